"""Metadata, config and statistics of an unloaded model answer as a real Triton 2.51 does.

Observed on tritonserver 2.51.0 (PyTriton 0.7.0's binary, `--model-control-mode=explicit`, a
python-backend `identity` model; benchmarks/triton_reference/) after
`POST /v2/repository/models/identity/unload`:
  GET /v2/models/identity[/config]              404 "... 'identity' has no available versions"
  GET /v2/models/identity/versions/1[/config]   503 "... 'identity' version 1 is not at ready state"
  GET /v2/models/identity/versions/7[/config]   404 "... 'identity' version 7 is not found"
  GET /v2/models/identity[/versions/1]/stats    400 "requested model 'identity' is not available"
  gRPC ModelMetadata / ModelConfig: NOT_FOUND, UNAVAILABLE, NOT_FOUND (same messages)
i.e. metadata and config go through the same lookup as inference: the same status and message
for the same path. fnserve answered 200 with the stale document before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from fnserve import Tensor, model
from fnserve.runtime import Runtime
from tests.conftest import RunningServer, start_server, stop_server

pytestmark = pytest.mark.e2e

NAME = "gone"
BODY = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [1.0]}]}


@model(name=NAME, inputs=[Tensor("X", "FP32", [1])], outputs=[Tensor("Y", "FP32", [1])])
def gone(X: np.ndarray) -> np.ndarray:
    return X


@pytest.fixture(scope="module")
def unloaded() -> Iterator[RunningServer]:
    handle = start_server(Runtime([gone]))
    try:
        url = f"http://{handle.server.http_url}/v2/repository/models/{NAME}/unload"
        assert httpx.post(url).status_code == 200
        yield handle.server
    finally:
        stop_server(handle)


def _grpc_status(call: Callable[[], Any]) -> tuple[str, str]:
    try:
        call()
    except InferenceServerException as exc:
        return str(exc.status()), exc.message() or ""
    return "OK", ""


@pytest.mark.parametrize("suffix", ["", "/versions/1", "/versions/7"])
def test_http_metadata_and_config_answer_what_inference_answers(
    unloaded: RunningServer, suffix: str
) -> None:
    base = f"http://{unloaded.http_url}/v2/models/{NAME}{suffix}"
    infer = httpx.post(f"{base}/infer", json=BODY)
    assert infer.status_code in (404, 503)
    for response in (httpx.get(base), httpx.get(f"{base}/config")):
        assert (response.status_code, response.json()) == (infer.status_code, infer.json())


@pytest.mark.parametrize("version", ["", "1", "7"])
def test_grpc_metadata_and_config_answer_what_inference_answers(
    unloaded: RunningServer, version: str
) -> None:
    client = grpcclient.InferenceServerClient(unloaded.grpc_url)
    inp = grpcclient.InferInput("X", [1], "FP32")
    inp.set_data_from_numpy(np.array([1.0], np.float32))
    infer = _grpc_status(lambda: client.infer(NAME, [inp], model_version=version))
    assert infer[0] in ("StatusCode.NOT_FOUND", "StatusCode.UNAVAILABLE")
    assert _grpc_status(lambda: client.get_model_metadata(NAME, version)) == infer
    assert _grpc_status(lambda: client.get_model_config(NAME, version)) == infer


@pytest.mark.parametrize("suffix", ["", "/versions/1"])
def test_statistics_of_an_unloaded_model_are_a_client_error(
    unloaded: RunningServer, suffix: str
) -> None:
    response = httpx.get(f"http://{unloaded.http_url}/v2/models/{NAME}{suffix}/stats")
    assert response.status_code == 400
    assert "is not available" in response.json()["error"]
    client = grpcclient.InferenceServerClient(unloaded.grpc_url)
    status = _grpc_status(lambda: client.get_inference_statistics(NAME, suffix[-1:]))
    assert status[0] == "StatusCode.INVALID_ARGUMENT"


def test_metadata_comes_back_after_load(unloaded: RunningServer) -> None:
    base = f"http://{unloaded.http_url}"
    assert httpx.post(f"{base}/v2/repository/models/{NAME}/load").status_code == 200
    try:
        assert httpx.get(f"{base}/v2/models/{NAME}").json()["versions"] == ["1"]
        assert httpx.get(f"{base}/v2/models/{NAME}/stats").status_code == 200
    finally:
        assert httpx.post(f"{base}/v2/repository/models/{NAME}/unload").status_code == 200
