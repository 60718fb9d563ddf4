"""Bearer tokens and Triton's restricted APIs on real servers, over HTTP and gRPC alike.

401 / UNAUTHENTICATED without a valid token, 403 / PERMISSION_DENIED with a token of too low
a role; Triton's `--http-restricted-api` / `--grpc-restricted-protocol` answer as Triton does
(403 / UNAVAILABLE "This ... is restricted, expecting header '...'"); on a non-loopback address
without an admin token the control APIs are refused, and the start-up log says why.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from fnserve import Tensor, model
from fnserve.config.server import ServerConfig
from fnserve.runtime import Runtime
from tests.conftest import MODELS, RunningServer, start_server, stop_server
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.e2e

ADMIN, API = "admin-Secret-1", "api-Secret-2"
CI, APP = "ci-Secret-3", "app-Secret-4"
BODY = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [1.0]}]}


@model(name="guarded", inputs=[Tensor("X", "FP32", [1])], outputs=[Tensor("Y", "FP32", [1])])
def guarded(X: np.ndarray) -> np.ndarray:
    return X


def _serve(**settings: object) -> Iterator[RunningServer]:
    config = ServerConfig(http_port=0, grpc_port=0, metrics_port=0, shutdown_timeout_s=2)
    config = ServerConfig.from_mapping({**config.__dict__, **settings})
    handle = start_server(Runtime([guarded]), config)
    try:
        yield handle.server
    finally:
        stop_server(handle)


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    token_file = tmp_path_factory.mktemp("auth") / "tokens"
    token_file.write_text(f"# name role token\nci admin {CI}\n\napp  api   {APP}\n")
    token_file.chmod(0o600)
    yield from _serve(admin_token=ADMIN, api_token=API, token_file=str(token_file))


def _auth(token: str | None) -> dict[str, str]:
    return {} if token is None else {"Authorization": f"Bearer {token}"}


def _post(server: RunningServer, path: str, token: str | None, **kw: object) -> httpx.Response:
    return httpx.post(f"http://{server.http_url}{path}", headers=_auth(token), timeout=30, **kw)  # type: ignore[arg-type]


class TestHttpTokens:
    @pytest.mark.parametrize("token", [None, "not-a-token", API[:-1]])
    def test_inference_without_a_valid_token_is_401(
        self, tokens: RunningServer, token: str | None
    ) -> None:
        response = _post(tokens, "/v2/models/guarded/infer", token, json=BODY)
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
        message = response.json()["error"]
        assert "token" in message
        assert token is None or token not in message

    @pytest.mark.parametrize("token", [API, ADMIN, CI, APP])
    def test_inference_with_an_api_or_admin_token_serves(
        self, tokens: RunningServer, token: str
    ) -> None:
        response = _post(tokens, "/v2/models/guarded/infer", token, json=BODY)
        assert response.status_code == 200, response.text

    def test_metadata_needs_a_token_and_health_stays_open(self, tokens: RunningServer) -> None:
        base = f"http://{tokens.http_url}"
        assert httpx.get(f"{base}/v2").status_code == 401
        assert httpx.get(f"{base}/v2/models/guarded", headers=_auth(APP)).status_code == 200
        assert httpx.get(f"{base}/v2/models/guarded/config").status_code == 401
        assert httpx.get(f"{base}/v2/health/ready").status_code == 200
        assert httpx.get(f"{base}/v2/models/guarded/ready").status_code == 200
        assert httpx.get(tokens.metrics_url).status_code == 200

    @pytest.mark.parametrize(("token", "status"), [(None, 401), ("wrong", 401), (API, 403)])
    def test_load_and_unload_refuse_without_an_admin_token(
        self, tokens: RunningServer, token: str | None, status: int
    ) -> None:
        for action in ("unload", "load"):
            response = _post(tokens, f"/v2/repository/models/guarded/{action}", token)
            assert response.status_code == status, response.text
        assert _post(tokens, "/v2/repository/index", token).status_code == status
        assert tokens.runtime.model_ready("guarded", "")

    def test_api_role_is_named_in_the_403(self, tokens: RunningServer) -> None:
        response = _post(tokens, "/v2/repository/models/guarded/unload", APP)
        assert response.json() == {
            "error": "the model-repository API needs a token with the admin role; token 'app' "
            "has the api role"
        }

    @pytest.mark.parametrize("token", [ADMIN, CI])
    def test_admin_tokens_unload_and_load(self, tokens: RunningServer, token: str) -> None:
        assert _post(tokens, "/v2/repository/models/guarded/unload", token).status_code == 200
        assert not tokens.runtime.model_ready("guarded", "")
        assert _post(tokens, "/v2/repository/models/guarded/load", token).status_code == 200
        assert tokens.runtime.model_ready("guarded", "")

    def test_tritonclient_sends_the_bearer_header(self, tokens: RunningServer) -> None:
        client = httpclient.InferenceServerClient(tokens.http_url)
        with pytest.raises(InferenceServerException, match="requires a bearer token"):
            client.get_server_metadata()
        assert client.get_server_metadata(headers=_auth(API))["name"]
        with pytest.raises(InferenceServerException, match="admin role"):
            client.load_model("guarded", headers=_auth(API))
        client.load_model("guarded", headers=_auth(ADMIN))
        client.close()


class TestGrpcTokens:
    def _infer(self, server: RunningServer, token: str | None) -> None:
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            x = grpcclient.InferInput("X", [1], "FP32")
            x.set_data_from_numpy(np.ones(1, np.float32))
            headers = None if token is None else {"authorization": f"Bearer {token}"}
            client.infer("guarded", [x], headers=headers)

    @pytest.mark.parametrize("token", [None, "not-a-token"])
    def test_inference_without_a_valid_token_is_unauthenticated(
        self, tokens: RunningServer, token: str | None
    ) -> None:
        with pytest.raises(InferenceServerException) as raised:
            self._infer(tokens, token)
        assert raised.value.status() == "StatusCode.UNAUTHENTICATED"
        assert token is None or token not in str(raised.value)

    @pytest.mark.parametrize("token", [API, ADMIN, APP])
    def test_inference_with_a_token_serves(self, tokens: RunningServer, token: str) -> None:
        self._infer(tokens, token)

    def test_control_needs_the_admin_role(self, tokens: RunningServer) -> None:
        with grpcclient.InferenceServerClient(tokens.grpc_url) as client:
            assert client.is_server_live()  # health: open
            with pytest.raises(InferenceServerException) as raised:
                client.unload_model("guarded")
            assert raised.value.status() == "StatusCode.UNAUTHENTICATED"
            with pytest.raises(InferenceServerException) as raised:
                client.unload_model("guarded", headers={"authorization": f"Bearer {APP}"})
            assert raised.value.status() == "StatusCode.PERMISSION_DENIED"
            assert tokens.runtime.model_ready("guarded", "")
            client.unload_model("guarded", headers={"authorization": f"Bearer {CI}"})
            client.load_model("guarded", headers={"authorization": f"Bearer {ADMIN}"})
        assert tokens.runtime.model_ready("guarded", "")


@pytest.fixture(scope="module")
def restricted() -> Iterator[RunningServer]:
    yield from _serve(
        http_restricted_api=("model-repository:admin-key=adm", "inference,metadata:infer-key=inf"),
        grpc_restricted_protocol=("model-repository:admin-key=adm",),
    )


class TestTritonRestrictedApi:
    def test_http_answers_as_triton(self, restricted: RunningServer) -> None:
        base = f"http://{restricted.http_url}"
        response = httpx.post(f"{base}/v2/repository/models/guarded/unload")
        assert response.status_code == 403
        assert response.json() == {"error": "This API is restricted, expecting header 'admin-key'"}
        wrong = httpx.post(f"{base}/v2/models/guarded/infer", json=BODY, headers={"infer-key": "x"})
        assert wrong.status_code == 403
        assert httpx.get(f"{base}/v2/health/live").status_code == 200  # not restricted
        assert httpx.get(f"{base}/v2/models/guarded/stats").status_code == 200

    def test_http_with_the_header_serves(self, restricted: RunningServer) -> None:
        client = httpclient.InferenceServerClient(restricted.http_url)
        client.unload_model("guarded", headers={"admin-key": "adm"})
        client.load_model("guarded", headers={"admin-key": "adm"})
        x = httpclient.InferInput("X", [1], "FP32")
        x.set_data_from_numpy(np.ones(1, np.float32))
        client.infer("guarded", [x], headers={"infer-key": "inf"})
        client.close()

    def test_grpc_answers_as_triton(self, restricted: RunningServer) -> None:
        with grpcclient.InferenceServerClient(restricted.grpc_url) as client:
            with pytest.raises(InferenceServerException) as raised:
                client.unload_model("guarded", headers={"admin-key": "adm"})  # HTTP's form
            assert raised.value.status() == "StatusCode.UNAVAILABLE"
            assert "This protocol is restricted, expecting header " in str(raised.value)
            assert "'triton-grpc-protocol-admin-key'" in str(raised.value)
            client.unload_model("guarded", headers={"triton-grpc-protocol-admin-key": "adm"})
            client.load_model("guarded", headers={"triton-grpc-protocol-admin-key": "adm"})
            assert client.is_model_ready("guarded")  # inference is restricted on HTTP only


def _public(*args: str, env: dict[str, str] | None = None) -> ServerProcess:
    return ServerProcess.start(MODELS, "--host", "0.0.0.0", *args, env=env)


def test_public_address_without_admin_token_refuses_control() -> None:
    with _public() as server:
        assert "without an admin token" in server.output()
        base = server.http.replace("0.0.0.0", "127.0.0.1")
        response = httpx.post(f"{base}/v2/repository/models/identity/unload")
        assert response.status_code == 403
        message = response.json()["error"]
        assert "listens on 0.0.0.0 without an admin token" in message
        assert "--admin-token" in message
        body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1]}]}
        assert httpx.post(f"{base}/v2/models/identity/infer", json=body).status_code == 200
        grpc_url = f"127.0.0.1:{server.grpc_port}"
        with grpcclient.InferenceServerClient(grpc_url) as client:
            with pytest.raises(InferenceServerException) as raised:
                client.unload_model("identity")
            assert raised.value.status() == "StatusCode.PERMISSION_DENIED"
            assert client.is_model_ready("identity")


def test_admin_token_from_the_environment_enables_control(tmp_path: Path) -> None:
    import os

    env = {**os.environ, "FNSERVE_ADMIN_TOKEN": ADMIN}
    with _public(env=env) as server:
        assert "without an admin token" not in server.output()
        base = server.http.replace("0.0.0.0", "127.0.0.1")
        url = f"{base}/v2/repository/models/identity/load"
        assert httpx.post(url).status_code == 401
        assert httpx.post(url, headers=_auth(ADMIN)).status_code == 200
        assert ADMIN not in server.output()
