"""Shutdown that always ends: a real `fnserve serve` process with a model that hangs."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from tests.serverproc import ServerProcess

pytestmark = pytest.mark.e2e

MODELS = Path(__file__).parents[1] / "hang_models.py"
DEADLINE_S = 2.0


def _pending(server: ServerProcess, name: str) -> float:
    text = httpx.get(server.metrics, timeout=5).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "nv_inference_pending_request_count" and s.labels["model"] == name
    )


def _wait_pending(server: ServerProcess, name: str, count: int) -> None:
    deadline = time.monotonic() + 10
    while _pending(server, name) < count:
        assert time.monotonic() < deadline, f"{count} request(s) never reached '{name}'"
        time.sleep(0.05)


def _http_hang(server: ServerProcess, out: list[httpx.Response | BaseException]) -> None:
    body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [3600]}]}
    try:
        out.append(httpx.post(f"{server.http}/v2/models/hang/infer", json=body, timeout=30))
    except BaseException as exc:
        out.append(exc)


def _grpc_hang(server: ServerProcess, out: list[BaseException | None]) -> None:
    client = grpcclient.InferenceServerClient(server.grpc)
    x = grpcclient.InferInput("X", [1], "FP32")
    x.set_data_from_numpy(np.array([3600], np.float32))
    try:
        client.infer("hang", [x], client_timeout=30)
        out.append(None)
    except BaseException as exc:
        out.append(exc)


def test_sigterm_with_a_hung_model_exits_after_the_deadline_with_clean_503s() -> None:
    http_out: list[httpx.Response | BaseException] = []
    grpc_out: list[BaseException | None] = []
    with ServerProcess.start(MODELS, "--shutdown-timeout", str(DEADLINE_S)) as server:
        clients = [
            threading.Thread(target=_http_hang, args=(server, http_out)),
            threading.Thread(target=_grpc_hang, args=(server, grpc_out)),
        ]
        for client in clients:
            client.start()
        _wait_pending(server, "hang", 2)  # one running, one queued behind it
        start = time.monotonic()
        code = server.stop(timeout_s=DEADLINE_S + 10)
        elapsed = time.monotonic() - start
        for client in clients:
            client.join(10)
    assert code == 0, server.output()
    assert elapsed < DEADLINE_S + 2, f"exited {elapsed:.1f} s after SIGTERM"
    (response,) = http_out
    assert isinstance(response, httpx.Response), response
    assert response.status_code == 503
    assert response.json() == {"error": "the server is shutting down"}
    (error,) = grpc_out
    assert isinstance(error, InferenceServerException), error
    assert error.status() == "StatusCode.UNAVAILABLE"
    assert error.message() == "the server is shutting down"
    log = server.output()
    assert "Traceback" not in log
    assert "CancelledError" not in log
    assert "requests still running after 2.0 s" in log


def test_sigterm_while_idle_exits_at_once() -> None:
    with ServerProcess.start(MODELS, "--shutdown-timeout", "30") as server:
        start = time.monotonic()
        assert server.stop(timeout_s=10) == 0
        assert time.monotonic() - start < 3
    assert "Traceback" not in server.output()
    assert "not waiting for thread" not in server.output()


def test_repository_unload_of_a_stuck_model_ends_within_the_deadline() -> None:
    http_out: list[httpx.Response | BaseException] = []
    with ServerProcess.start(MODELS, "--shutdown-timeout", str(DEADLINE_S)) as server:
        client = threading.Thread(target=_http_hang, args=(server, http_out))
        client.start()
        _wait_pending(server, "hang", 1)
        start = time.monotonic()
        unload = httpx.post(f"{server.http}/v2/repository/models/hang/unload", timeout=30)
        elapsed = time.monotonic() - start
        client.join(10)
        assert unload.status_code == 200, unload.text
        assert elapsed < DEADLINE_S + 1.5
        (response,) = http_out
        assert isinstance(response, httpx.Response), response
        assert response.status_code == 503
        assert "was unloaded before the request finished" in response.json()["error"]
        load = httpx.post(f"{server.http}/v2/repository/models/hang/load", timeout=30)
        assert load.status_code == 200, load.text
        body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [0]}]}
        again = httpx.post(f"{server.http}/v2/models/hang/infer", json=body, timeout=10)
        assert again.status_code == 200, again.text
        assert server.stop(timeout_s=10) == 0
    assert "Traceback" not in server.output()


def test_a_thread_the_model_left_behind_does_not_keep_the_process_alive() -> None:
    with ServerProcess.start(MODELS, "--shutdown-timeout", "5") as server:
        body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [3600]}]}
        done = httpx.post(f"{server.http}/v2/models/spawn/infer", json=body, timeout=10)
        assert done.status_code == 200, done.text
        start = time.monotonic()
        assert server.stop(timeout_s=10) == 0
        assert time.monotonic() - start < 3
    assert "not waiting for thread(s) still running: user-pool_0" in server.output()
