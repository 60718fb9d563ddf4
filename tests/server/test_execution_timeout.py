"""Execution timeouts end to end: 504 / DEADLINE_EXCEEDED, the instance replaced, counted."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from fnserve import Tensor, model
from fnserve.runtime import Runtime
from tests.conftest import RunningServer, start_server, stop_server
from tests.tensor_io import TensorIO

pytestmark = pytest.mark.e2e

IO: TensorIO = {"inputs": [Tensor("X", "FP32", [1])], "outputs": [Tensor("Y", "FP32", [1])]}
RELEASE = threading.Event()  # lets the stuck threads go when the module ends


@model(name="sleepy", execution_timeout_s=0.5, **IO)
def sleepy(X: np.ndarray) -> np.ndarray:
    """Hangs (until the module ends) when X is negative, answers at once otherwise."""
    if X[0] < 0:
        RELEASE.wait(60)
    return X


@model(name="async_sleepy", parameters={"execution_timeout_s": "0.5"}, **IO)
async def async_sleepy(X: np.ndarray) -> np.ndarray:
    """The same on the event loop, with the timeout set the config.pbtxt way."""
    import asyncio

    if X[0] < 0:
        await asyncio.sleep(60)
    return X


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    handle = start_server(Runtime([sleepy, async_sleepy]))
    try:
        yield handle.server
    finally:
        RELEASE.set()
        stop_server(handle)


def _http_infer(server: RunningServer, name: str, value: float) -> httpx.Response:
    body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [value]}]}
    return httpx.post(f"http://{server.http_url}/v2/models/{name}/infer", json=body, timeout=10)


def _grpc_infer(server: RunningServer, name: str, value: float) -> float:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    x = grpcclient.InferInput("X", [1], "FP32")
    x.set_data_from_numpy(np.array([value], np.float32))
    result = client.infer(name, [x], client_timeout=10)
    return float(result.as_numpy("Y")[0])


def _timeouts(server: RunningServer, name: str) -> float:
    text = httpx.get(server.metrics_url).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("fnserve_inference_exec_timeout") and s.labels["model"] == name
    )


@pytest.mark.parametrize("name", ["sleepy", "async_sleepy"])
def test_timeout_answers_504_and_the_next_request_is_served(
    server: RunningServer, name: str
) -> None:
    stuck = _http_infer(server, name, -1.0)
    assert stuck.status_code == 504
    assert stuck.json() == {
        "error": f"model '{name}' did not finish within its execution timeout of 0.5 s"
    }
    after = _http_infer(server, name, 3.0)  # its instance was replaced: one instance only
    assert after.status_code == 200, after.text
    assert after.json()["outputs"][0]["data"] == [3.0]


@pytest.mark.parametrize("name", ["sleepy", "async_sleepy"])
def test_timeout_is_deadline_exceeded_over_grpc(server: RunningServer, name: str) -> None:
    with pytest.raises(InferenceServerException) as caught:
        _grpc_infer(server, name, -1.0)
    assert caught.value.status() == "StatusCode.DEADLINE_EXCEEDED"
    assert "execution timeout of 0.5 s" in str(caught.value.message())
    assert _grpc_infer(server, name, 4.0) == 4.0


def test_timeouts_are_counted_in_metrics_and_statistics(server: RunningServer) -> None:
    before = _timeouts(server, "sleepy")
    fails_before = server.runtime.statistics("sleepy")[0].fail.count
    assert _http_infer(server, "sleepy", -1.0).status_code == 504
    assert _timeouts(server, "sleepy") == before + 1
    assert server.runtime.statistics("sleepy")[0].fail.count == fails_before + 1
    text = httpx.get(server.metrics_url).text
    backend = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("nv_inference_request_failure")
        and s.labels == {"model": "sleepy", "version": "1", "reason": "BACKEND"}
    ]
    assert backend
    assert backend[0] >= 1
