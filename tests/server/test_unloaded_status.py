"""Inference on an unloaded model or an unknown version answers what Triton 2.51 answers.

Observed on a real Triton (PyTriton 0.7.0's tritonserver 2.51.0) after
`POST /v2/repository/models/identity/unload`:
  no version named   HTTP 404 / gRPC NOT_FOUND  "...: 'identity' has no available versions"
  version 1 (known)  HTTP 503 / gRPC UNAVAILABLE "...: 'identity' version 1 is not at ready state"
  version 7 (never)  HTTP 404 / gRPC NOT_FOUND  "...: 'identity' version 7 is not found"
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from fnserve import Tensor, model
from fnserve.runtime import Runtime
from tests.conftest import RunningServer, start_server, stop_server

pytestmark = pytest.mark.e2e


@model(name="identity", inputs=[Tensor("X", "FP32", [1])], outputs=[Tensor("Y", "FP32", [1])])
def identity(X: np.ndarray) -> np.ndarray:
    return X


BODY = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
CASES = [  # path suffix, gRPC version, HTTP status, gRPC code, message fragment
    ("", "", 404, "StatusCode.NOT_FOUND", "has no available versions"),
    ("/versions/1", "1", 503, "StatusCode.UNAVAILABLE", "version 1 is not ready"),
    ("/versions/7", "7", 404, "StatusCode.NOT_FOUND", "unknown version 7"),
]


@pytest.fixture(scope="module")
def unloaded() -> Iterator[RunningServer]:
    handle = start_server(Runtime([identity]))
    try:
        url = f"http://{handle.server.http_url}/v2/repository/models/identity/unload"
        assert httpx.post(url).status_code == 200
        yield handle.server
    finally:
        stop_server(handle)


@pytest.mark.parametrize(("suffix", "version", "status", "code", "message"), CASES)
def test_http_and_grpc_answer_like_triton(
    unloaded: RunningServer, suffix: str, version: str, status: int, code: str, message: str
) -> None:
    response = httpx.post(f"http://{unloaded.http_url}/v2/models/identity{suffix}/infer", json=BODY)
    assert (response.status_code, message in response.json()["error"]) == (status, True)
    inp = grpcclient.InferInput("X", [1], "FP32")
    inp.set_data_from_numpy(np.array([1.0], np.float32))
    with (
        grpcclient.InferenceServerClient(unloaded.grpc_url) as client,
        pytest.raises(InferenceServerException) as caught,
    ):
        client.infer("identity", [inp], model_version=version)
    assert caught.value.status() == code
    assert message in (caught.value.message() or "")
    assert caught.value.message() == response.json()["error"]  # same wording on both
