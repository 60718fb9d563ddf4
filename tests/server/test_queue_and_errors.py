"""A bounded queue per model by default, and model error messages that keep host paths private."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from fnserve import DynamicBatching, QueuePolicy, Tensor, model
from fnserve.config.server import ServerConfig
from fnserve.runtime import Runtime
from fnserve.stats import ModelStats
from tests.conftest import RunningServer, start_server, stop_server
from tests.tensor_io import TensorIO

pytestmark = pytest.mark.e2e

IO: TensorIO = {"inputs": [Tensor("X", "FP32", [1])], "outputs": [Tensor("Y", "FP32", [1])]}
GATE = threading.Event()
SECRET = "/srv/models/secret/weights.bin"


@model(name="gated", **IO)
def gated(X: np.ndarray) -> np.ndarray:
    GATE.wait(30)
    return X


@model(
    name="own_policy",
    max_batch_size=1,
    dynamic_batching=DynamicBatching(default_queue_policy=QueuePolicy(max_queue_size=5)),
    inputs=[Tensor("X", "FP32", [1])],
    outputs=[Tensor("Y", "FP32", [1])],
)
def own_policy(X: np.ndarray) -> np.ndarray:
    GATE.wait(30)
    return X


@model(name="boom", **IO)
def boom(X: np.ndarray) -> np.ndarray:
    raise FileNotFoundError(f"[Errno 2] No such file or directory: '{SECRET}'")


def _serve(**settings: Any) -> Iterator[RunningServer]:
    config = ServerConfig(
        http_port=0, grpc_port=0, metrics_port=0, shutdown_timeout_s=2, **settings
    )
    handle = start_server(Runtime([gated, own_policy, boom]), config)
    try:
        yield handle.server
    finally:
        GATE.set()
        stop_server(handle)


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    yield from _serve(max_queue_size=2)


def _post(server: RunningServer, name: str) -> httpx.Response:
    shape = [1, 1] if name == "own_policy" else [1]  # own_policy batches: rows first
    body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": shape, "data": [1.0]}]}
    url = f"http://{server.http_url}/v2/models/{name}/infer"
    return httpx.post(url, json=body, timeout=30)


def _pending(server: RunningServer, name: str) -> int:
    stats: list[ModelStats] = server.runtime.version_stats()
    return next(s.pending for s in stats if s.name == name)


def _queued(server: RunningServer, name: str) -> int:
    loaded = server.runtime.registry.resolve(name, "", True).loaded
    assert loaded is not None
    return loaded.scheduler.queued()


def _wait_until(done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not done():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def _fill(
    server: RunningServer, name: str, count: int, pool: ThreadPoolExecutor
) -> list[Future[httpx.Response]]:
    """Start `count` requests, one running and the rest queued behind it, and wait until the
    server holds them all. The first runs before the others are sent: arriving together, they
    could all be queued before the scheduler's turn takes the first out, and the bound would
    refuse one that the test means to queue."""
    futures = [pool.submit(_post, server, name)]
    _wait_until(lambda: _pending(server, name) == 1 and _queued(server, name) == 0)
    futures += [pool.submit(_post, server, name) for _ in range(count - 1)]
    _wait_until(lambda: _pending(server, name) == count)
    return futures


class TestDefaultQueueBound:
    def test_past_the_server_default_requests_fail_at_once_with_503(
        self, server: RunningServer
    ) -> None:
        GATE.clear()
        with ThreadPoolExecutor(4) as pool:
            waiting = _fill(server, "gated", 3, pool)  # one running, two queued: the bound
            start = time.monotonic()
            refused = _post(server, "gated")
            assert time.monotonic() - start < 2
            assert refused.status_code == 503
            assert refused.json() == {"error": "exceeds maximum queue size of 2 for model 'gated'"}
            client = grpcclient.InferenceServerClient(server.grpc_url)
            x = grpcclient.InferInput("X", [1], "FP32")
            x.set_data_from_numpy(np.array([1], np.float32))
            with pytest.raises(InferenceServerException) as caught:
                client.infer("gated", [x])
            assert caught.value.status() == "StatusCode.UNAVAILABLE"
            assert caught.value.message() == refused.json()["error"]
            GATE.set()
            assert [f.result().status_code for f in waiting] == [200, 200, 200]

    def test_a_models_own_queue_policy_wins(self, server: RunningServer) -> None:
        GATE.clear()
        with ThreadPoolExecutor(8) as pool:
            waiting = _fill(server, "own_policy", 6, pool)  # one running, five queued
            assert _post(server, "own_policy").status_code == 503
            GATE.set()
            assert all(f.result().status_code == 200 for f in waiting)


class TestModelErrorMessages:
    def test_host_paths_are_scrubbed_for_clients_and_kept_in_the_log(
        self, server: RunningServer, caplog: pytest.LogCaptureFixture
    ) -> None:
        with caplog.at_level(logging.WARNING, logger="fnserve"):
            response = _post(server, "boom")
        assert response.status_code == 500
        message = response.json()["error"]
        assert message == (
            "model 'boom' raised FileNotFoundError: [Errno 2] No such file or directory: '<path>'"
        )
        assert "/srv" not in message
        assert any(SECRET in r.getMessage() and r.exc_info for r in caplog.records)

    def test_scrubbed_over_grpc_too(self, server: RunningServer) -> None:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        x = grpcclient.InferInput("X", [1], "FP32")
        x.set_data_from_numpy(np.array([1], np.float32))
        with pytest.raises(InferenceServerException) as caught:
            client.infer("boom", [x])
        assert caught.value.status() == "StatusCode.INTERNAL"
        assert "'<path>'" in str(caught.value.message())
        assert "/srv" not in str(caught.value.message())

    def test_debug_errors_sends_the_whole_message(self) -> None:
        for debug_server in _serve(debug_errors=True):
            response = _post(debug_server, "boom")
            assert response.status_code == 500
            assert SECRET in response.json()["error"]
