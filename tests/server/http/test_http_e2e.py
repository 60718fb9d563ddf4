"""The HTTP frontend end to end: real tritonclient (sync and aio) and httpx against a server.

The models are those of tests/models.py; one module-scoped server serves every test here.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
from tritonclient.utils import InferenceServerException

from tests.conftest import RunningServer

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def client(server: RunningServer) -> Iterator[httpclient.InferenceServerClient]:
    triton = httpclient.InferenceServerClient(server.http_url, network_timeout=30)
    yield triton
    triton.close()


@pytest.fixture(scope="module")
def http(server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"http://{server.http_url}", timeout=30) as session:
        yield session


def _input(name: str, array: np.ndarray, datatype: str, binary: bool = True) -> Any:
    tensor = httpclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array, binary_data=binary)
    return tensor


def _identity(client: httpclient.InferenceServerClient, rows: int = 2, **kwargs: Any) -> Any:
    x = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)
    result = client.infer("identity", [_input("INPUT0", x, "FP32")], **kwargs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)
    return result


def _infer_json(
    http: httpx.Client, model: str, doc: dict[str, Any], **kwargs: Any
) -> httpx.Response:
    return http.post(f"/v2/models/{model}/infer", content=json.dumps(doc), **kwargs)


def _fp32(name: str, shape: list[int], data: list[float]) -> dict[str, Any]:
    return {"name": name, "datatype": "FP32", "shape": shape, "data": data}


class TestHealthAndMetadata:
    def test_health(self, client: httpclient.InferenceServerClient, http: httpx.Client) -> None:
        assert client.is_server_live()
        assert client.is_server_ready()
        for path in ("/v2/health/live", "/v2/health/ready"):
            response = http.get(path)
            assert (response.status_code, response.content) == (200, b"")

    def test_model_ready(
        self, client: httpclient.InferenceServerClient, http: httpx.Client
    ) -> None:
        assert client.is_model_ready("identity")
        assert client.is_model_ready("identity", "1")
        assert not client.is_model_ready("identity", "9")
        assert not client.is_model_ready("no_such_model")
        assert not client.is_model_ready("gpu_only")  # failed to load on a CPU machine
        response = http.get("/v2/models/no_such_model/ready")
        assert response.status_code == 400
        assert response.json() == {"error": "Model version not ready"}

    def test_server_metadata(self, client: httpclient.InferenceServerClient) -> None:
        metadata = client.get_server_metadata()
        assert metadata["name"] == "fnserve"
        assert "binary_tensor_data" in metadata["extensions"]

    def test_model_metadata_includes_the_batch_dimension(
        self, client: httpclient.InferenceServerClient
    ) -> None:
        metadata = client.get_model_metadata("add_sub", "1")
        assert (metadata["name"], metadata["versions"]) == ("add_sub", ["1"])
        assert metadata["inputs"][0] == {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 16]}
        assert client.get_model_metadata("strings")["inputs"][0]["shape"] == [-1]

    def test_model_config_dims_exclude_the_batch_dimension(
        self, client: httpclient.InferenceServerClient
    ) -> None:
        config = client.get_model_config("add_sub")
        assert config["max_batch_size"] == 8
        assert config["input"][0]["dims"] == [16]
        assert config["input"][0]["data_type"] == "TYPE_FP32"

    @pytest.mark.parametrize(
        "path", ["/v2/models/nope", "/v2/models/nope/config", "/v2/models/identity/versions/7"]
    )
    def test_unknown_model_or_version_is_404(self, http: httpx.Client, path: str) -> None:
        response = http.get(path)
        assert response.status_code == 404
        assert response.headers["content-type"] == "application/json"
        assert "error" in response.json()

    def test_router_errors_are_json(self, http: httpx.Client) -> None:
        missing = http.get("/v2/nothing/here")
        assert (missing.status_code, missing.json()) == (404, {"error": "Not Found"})
        assert http.get("/v2/models/identity/versions/x1").status_code == 404
        wrong = http.post("/v2/health/live")
        assert (wrong.status_code, wrong.json()) == (405, {"error": "Method Not Allowed"})
        assert http.get("/v2/models/identity/infer").status_code == 405


class TestInference:
    def test_binary_round_trip(self, client: httpclient.InferenceServerClient) -> None:
        result = _identity(client)
        assert result.get_response()["model_version"] == "1"
        assert "id" not in result.get_response()

    def test_json_round_trip(self, client: httpclient.InferenceServerClient) -> None:
        x = np.array([[0.1, -2.5]], np.float32)
        output = httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)
        result = client.infer(
            "identity", [_input("INPUT0", x, "FP32", binary=False)], outputs=[output]
        )
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)
        assert result.get_response()["outputs"][0]["data"] == [0.10000000149011612, -2.5]

    def test_json_without_outputs_or_binary_data_output_answers_json(
        self, http: httpx.Client
    ) -> None:
        response = _infer_json(http, "identity", {"inputs": [_fp32("INPUT0", [1, 2], [1, 2])]})
        assert response.headers["content-type"] == "application/json"
        assert "inference-header-content-length" not in response.headers
        assert response.json()["outputs"][0]["data"] == [1.0, 2.0]

    def test_request_id_is_echoed(self, client: httpclient.InferenceServerClient) -> None:
        assert _identity(client, request_id="req-7").get_response()["id"] == "req-7"

    def test_subset_of_outputs(self, client: httpclient.InferenceServerClient) -> None:
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        b = np.ones((1, 16), np.float32)
        inputs = [_input("INPUT0", a, "FP32"), _input("INPUT1", b, "FP32", binary=False)]
        outputs = [httpclient.InferRequestedOutput("OUTPUT1")]
        result = client.infer("add_sub", inputs, outputs=outputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
        assert result.as_numpy("OUTPUT0") is None

    def test_bytes_binary_with_empty_non_utf8_and_nul(
        self, client: httpclient.InferenceServerClient
    ) -> None:
        items = np.array([b"", b"\xff\xfe", b"a\x00b", "ü".encode()], dtype=np.object_)
        result = client.infer("strings", [_input("INPUT0", items, "BYTES")])
        assert result.as_numpy("OUTPUT0").tolist() == items.tolist()

    def test_bytes_as_json_strings(self, client: httpclient.InferenceServerClient) -> None:
        items = np.array(["héllo", ""], dtype=np.object_)
        output = httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)
        result = client.infer(
            "strings", [_input("INPUT0", items, "BYTES", binary=False)], outputs=[output]
        )
        assert result.get_response()["outputs"][0]["data"] == ["héllo", ""]

    def test_bool_fp16_int8(self, client: httpclient.InferenceServerClient) -> None:
        flags = np.array([[True, False]])
        half = np.array([[1.5, -2.0]], np.float16)
        small = np.array([[5, -128]], np.int8)
        inputs = [
            _input("FLAGS", flags, "BOOL", binary=False),
            _input("HALF", half, "FP16"),
            _input("INT", small, "INT8"),
        ]
        result = client.infer("mixed", inputs)
        np.testing.assert_array_equal(result.as_numpy("NOT_FLAGS"), ~flags)
        np.testing.assert_array_equal(result.as_numpy("HALF_X2"), half * 2)
        np.testing.assert_array_equal(result.as_numpy("INT_NEG"), -small)

    def test_fp16_output_as_json_is_refused(self, http: httpx.Client) -> None:
        doc = {
            "inputs": [
                {"name": "FLAGS", "datatype": "BOOL", "shape": [1, 1], "data": [True]},
                {"name": "HALF", "datatype": "FP16", "shape": [1, 0]},
                {"name": "INT", "datatype": "INT8", "shape": [1, 1], "data": [1]},
            ]
        }
        response = _infer_json(http, "mixed", doc)
        assert response.status_code == 400
        assert "binary" in response.json()["error"]

    def test_versioned_and_async_model(self, client: httpclient.InferenceServerClient) -> None:
        x = np.array([[3], [4]], np.int32)
        result = client.infer("async_double", [_input("INPUT0", x, "INT32")], model_version="1")
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x * 2)

    def test_raw_binary_request(self, http: httpx.Client) -> None:
        x = np.array([1.5, 2.5, 3.5], np.float32)
        response = http.post(
            "/v2/models/identity/infer",
            content=x.tobytes(),
            headers={"Inference-Header-Content-Length": "0"},
        )
        assert response.status_code == 200, response.text
        header_length = int(response.headers["inference-header-content-length"])
        header = json.loads(response.content[:header_length])
        assert header["outputs"][0]["shape"] == [1, 3]
        tail = np.frombuffer(response.content[header_length:], np.float32)
        np.testing.assert_array_equal(tail, x)

    @pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
    def test_compressed_request_and_response(
        self, client: httpclient.InferenceServerClient, algorithm: str
    ) -> None:
        _identity(
            client,
            request_compression_algorithm=algorithm,
            response_compression_algorithm=algorithm,
        )

    def test_gzip_body_with_httpx(self, http: httpx.Client) -> None:
        import gzip

        body = gzip.compress(json.dumps({"inputs": [_fp32("INPUT0", [1, 1], [7])]}).encode())
        response = http.post(
            "/v2/models/identity/infer",
            content=body,
            headers={"Content-Encoding": "gzip", "Accept-Encoding": "gzip"},
        )
        assert response.status_code == 200
        assert response.headers["content-encoding"] == "gzip"
        assert response.json()["outputs"][0]["data"] == [7.0]  # httpx undoes the gzip

    def test_statistics_grow(self, client: httpclient.InferenceServerClient) -> None:
        def count() -> int:
            stats = client.get_inference_statistics("add_sub")["model_stats"]
            return int(stats[0]["inference_count"])

        before = count()
        a = np.zeros((3, 16), np.float32)
        client.infer("add_sub", [_input("INPUT0", a, "FP32"), _input("INPUT1", a, "FP32")])
        assert count() == before + 3
        names = {s["name"] for s in client.get_inference_statistics()["model_stats"]}
        assert {"identity", "add_sub"} <= names
        assert client.get_inference_statistics("add_sub", "1")["model_stats"][0]["version"] == "1"

    def test_statistics_of_unknown_model_is_400(self, http: httpx.Client) -> None:
        assert http.get("/v2/models/nope/stats").status_code == 400


def _bad_requests() -> list[tuple[str, str, dict[str, Any] | bytes, dict[str, str], int]]:
    add = [_fp32("INPUT0", [1, 16], [0] * 16), _fp32("INPUT1", [1, 16], [0] * 16)]
    binary = {"name": "INPUT0", "datatype": "FP32", "shape": [1, 2]}
    short = json.dumps({"inputs": [{**binary, "parameters": {"binary_data_size": 8}}]}).encode()
    return [
        ("unknown model", "nope", {"inputs": add}, {}, 404),
        ("unknown version", "add_sub/versions/5", {"inputs": add}, {}, 404),
        (
            "batch over max",
            "add_sub",
            {"inputs": [_fp32(n, [9, 16], [0] * 144) for n in ("INPUT0", "INPUT1")]},
            {},
            400,
        ),
        (
            "wrong datatype",
            "identity",
            {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 1], "data": [1]}]},
            {},
            400,
        ),
        (
            "wrong shape",
            "add_sub",
            {"inputs": [_fp32(n, [1, 15], [0] * 15) for n in ("INPUT0", "INPUT1")]},
            {},
            400,
        ),
        ("unknown input", "identity", {"inputs": [_fp32("NOPE", [1, 1], [1])]}, {}, 400),
        ("missing input", "add_sub", {"inputs": add[:1]}, {}, 400),
        (
            "unknown output",
            "identity",
            {"inputs": [_fp32("INPUT0", [1, 1], [1])], "outputs": [{"name": "NOPE"}]},
            {},
            400,
        ),
        ("element count", "identity", {"inputs": [_fp32("INPUT0", [1, 3], [1])]}, {}, 400),
        ("malformed json", "identity", b'{"inputs": [', {}, 400),
        (
            "binary size",
            "identity",
            short + b"1234",
            {"Inference-Header-Content-Length": str(len(short))},
            400,
        ),
        ("header length", "identity", b"{}", {"Inference-Header-Content-Length": "99"}, 400),
        (
            "reserved parameter",
            "identity",
            {"inputs": [_fp32("INPUT0", [1, 1], [1])], "parameters": {"triton_x": 1}},
            {},
            400,
        ),
        ("content encoding", "identity", b"{}", {"Content-Encoding": "br"}, 501),
    ]


class TestBadRequests:
    @pytest.mark.parametrize(
        ("model", "body", "headers", "status"),
        [case[1:] for case in _bad_requests()],
        ids=[case[0] for case in _bad_requests()],
    )
    def test_status_and_server_stays_healthy(
        self,
        http: httpx.Client,
        client: httpclient.InferenceServerClient,
        model: str,
        body: dict[str, Any] | bytes,
        headers: dict[str, str],
        status: int,
    ) -> None:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        response = http.post(f"/v2/models/{model}/infer", content=content, headers=headers)
        assert response.status_code == status, response.text
        assert response.headers["content-type"] == "application/json"
        assert response.json()["error"]
        assert client.is_server_live()
        _identity(client)

    def test_model_error_is_500_and_model_stays_ready(
        self, client: httpclient.InferenceServerClient
    ) -> None:
        x = np.array([-1.0], np.float32)
        with pytest.raises(InferenceServerException) as info:
            client.infer("fails", [_input("INPUT0", x, "FP32")])
        assert info.value.status() == "500"
        assert "negative input" in info.value.message()
        assert "Traceback" not in info.value.message()
        assert client.is_model_ready("fails")

    def test_body_over_the_limit_is_413(
        self, http: httpx.Client, client: httpclient.InferenceServerClient
    ) -> None:
        response = http.post("/v2/models/identity/infer", content=b" " * (64 * 1024 * 1024 + 1))
        assert response.status_code == 413
        assert "limit" in response.json()["error"]
        assert http.get("/v2/health/live").status_code == 200  # the connection is still usable
        _identity(client)

    def test_unsupported_extensions_are_501(self, client: httpclient.InferenceServerClient) -> None:
        calls = [
            client.get_log_settings,
            client.get_trace_settings,
            client.get_system_shared_memory_status,
            client.get_cuda_shared_memory_status,
            lambda: client.unregister_system_shared_memory("r"),
            lambda: client.update_trace_settings("identity", {"trace_rate": "1"}),
        ]
        for call in calls:
            with pytest.raises(InferenceServerException, match="not supported") as info:
                call()
            assert info.value.status() == "501"


class TestRepository:
    def test_index(self, client: httpclient.InferenceServerClient) -> None:
        index = {entry["name"]: entry for entry in client.get_model_repository_index()}
        assert index["identity"]["state"] == "READY"
        assert index["gpu_only"]["state"] == "UNAVAILABLE"
        assert index["gpu_only"]["reason"]

    def test_index_ready_only(self, http: httpx.Client) -> None:
        entries = http.post("/v2/repository/index", json={"ready": True}).json()
        assert entries
        assert all(entry["state"] == "READY" for entry in entries)

    def test_unload_then_load(self, client: httpclient.InferenceServerClient) -> None:
        client.unload_model("async_double")
        assert not client.is_model_ready("async_double")
        client.load_model("async_double")
        assert client.is_model_ready("async_double")

    def test_load_unknown_is_500_unload_unknown_is_200(
        self, client: httpclient.InferenceServerClient, http: httpx.Client
    ) -> None:
        with pytest.raises(InferenceServerException) as info:
            client.load_model("no_such_model")
        assert info.value.status() == "500"
        client.unload_model("no_such_model")
        assert http.post("/v2/repository/models/nope/unload").status_code == 200

    def test_config_override_and_repository_name_are_unsupported(
        self, client: httpclient.InferenceServerClient, http: httpx.Client
    ) -> None:
        with pytest.raises(InferenceServerException, match="not supported"):
            client.load_model("identity", config='{"max_batch_size": 4}')
        assert http.post("/v2/repository/other/index").status_code == 501


class TestTransport:
    def test_h2c_prior_knowledge(self, server: RunningServer) -> None:
        with httpx.Client(http1=False, http2=True, base_url=f"http://{server.http_url}") as h2:
            ready = h2.get("/v2/health/ready")
            assert (ready.status_code, ready.http_version) == (200, "HTTP/2")
            doc = {"inputs": [_fp32("INPUT0", [1, 2], [1, 2])]}
            response = h2.post("/v2/models/identity/infer", json=doc)
            assert response.status_code == 200
            assert response.json()["outputs"][0]["data"] == [1.0, 2.0]

    def test_chunked_request_body(self, http: httpx.Client) -> None:
        doc = json.dumps({"inputs": [_fp32("INPUT0", [1, 3], [1, 2, 3])]}).encode()
        parts = iter([doc[:10], doc[10:30], doc[30:]])  # no Content-Length: chunked encoding
        response = http.post("/v2/models/identity/infer", content=parts)
        assert response.status_code == 200
        assert response.json()["outputs"][0]["data"] == [1.0, 2.0, 3.0]

    def test_many_requests_on_one_keep_alive_connection(self, http: httpx.Client) -> None:
        for i in range(20):
            response = _infer_json(http, "identity", {"inputs": [_fp32("INPUT0", [1, 1], [i])]})
            assert response.json()["outputs"][0]["data"] == [float(i)]

    async def test_aio_client(self, server: RunningServer) -> None:
        async with aioclient.InferenceServerClient(server.http_url) as triton:
            assert await triton.is_server_live()
            x = np.ones((2, 3), np.float32)
            tensor = aioclient.InferInput("INPUT0", [2, 3], "FP32")
            tensor.set_data_from_numpy(x)
            result = await triton.infer("identity", [tensor])
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)
            with pytest.raises(InferenceServerException):
                await triton.get_model_metadata("nope")

    def test_disconnected_client_is_cancelled_before_its_model_runs(
        self, server: RunningServer, client: httpclient.InferenceServerClient
    ) -> None:
        def stats() -> Any:
            return client.get_inference_statistics("sleeper")["model_stats"][0]

        before = stats()
        busy = threading.Thread(target=_sleeper, args=(server.http_url, 1.0))
        busy.start()  # occupies the sleeper's single instance for a second
        time.sleep(0.2)
        body = json.dumps({"inputs": [_fp32("SECONDS", [1], [0.0])]}).encode()
        host, port = server.http_url.split(":")
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(
                b"POST /v2/models/sleeper/infer HTTP/1.1\r\nHost: x\r\n"
                + b"Content-Length: %d\r\n\r\n" % len(body)
                + body
            )
            time.sleep(0.2)  # queued behind the busy request, then the client leaves
        busy.join()
        after = stats()
        assert after["execution_count"] == before["execution_count"] + 1
        failed = (
            after["inference_stats"]["fail"]["count"] - before["inference_stats"]["fail"]["count"]
        )
        assert failed == 1


def _sleeper(url: str, seconds: float) -> None:
    with httpx.Client(base_url=f"http://{url}", timeout=30) as session:
        doc = {"inputs": [_fp32("SECONDS", [1], [seconds])]}
        assert session.post("/v2/models/sleeper/infer", json=doc).status_code == 200
