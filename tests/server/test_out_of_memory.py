"""Out of memory end to end: batches split and rerun, a request too big alone fails by itself.

The models (`oom_models.py`) raise what numpy and torch raise when memory runs out, above 4
rows, and wait for full batches of 8 rows, so the batches here are known in advance: no
assertion depends on timing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from fnserve.runtime import Runtime
from tests.conftest import RunningServer, start_server, stop_server
from tests.server.oom_models import LIMIT_ROWS, MAX_ROWS, MODELS

pytestmark = pytest.mark.e2e
Infer = Callable[[RunningServer, str, np.ndarray], np.ndarray]


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    handle = start_server(Runtime(MODELS))
    try:
        yield handle.server
    finally:
        stop_server(handle)


def _http(server: RunningServer, name: str, x: np.ndarray) -> np.ndarray:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=30)
    try:
        tensor = httpclient.InferInput("X", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        result: np.ndarray | None = client.infer(name, [tensor]).as_numpy("Y")
    finally:
        client.close()
    assert result is not None
    return result


def _grpc(server: RunningServer, name: str, x: np.ndarray) -> np.ndarray:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        tensor = grpcclient.InferInput("X", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        result: np.ndarray | None = client.infer(name, [tensor], client_timeout=30).as_numpy("Y")
    finally:
        client.close()
    assert result is not None
    return result


def _concurrently(infer: Infer, server: RunningServer, name: str, rows: list[int]) -> list[Any]:
    """Send one request per entry of `rows` at once; each result, or the exception raised."""
    inputs = [np.full((n, 1), i, np.float32) for i, n in enumerate(rows)]
    with ThreadPoolExecutor(len(rows)) as threads:
        futures = [threads.submit(infer, server, name, x) for x in inputs]
    return [f.exception() or f.result() for f in futures]


def _statistics(server: RunningServer, name: str) -> dict[str, Any]:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        stats: dict[str, Any] = client.get_inference_statistics(name)["model_stats"][0]
    finally:
        client.close()
    return stats


def _metric(server: RunningServer, family: str, **labels: str) -> float:
    text = httpx.get(server.metrics_url).text
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name.startswith(family) and labels.items() <= s.labels.items()
    )


@pytest.mark.parametrize(("infer", "name"), [(_http, "oom_host"), (_grpc, "oom_cuda")])
def test_a_batch_that_runs_out_of_memory_is_split_and_every_request_answered(
    server: RunningServer, infer: Infer, name: str
) -> None:
    # Eight one-row requests form one full batch of 8 rows, over the limit of 4: it is rerun
    # as two batches of 4.
    results = _concurrently(infer, server, name, [1] * MAX_ROWS)
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result, [[2.0 * i]])
    stats = _statistics(server, name)
    assert {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]} == {
        LIMIT_ROWS: 2
    }
    assert (stats["inference_count"], stats["execution_count"]) == (8, 2)
    assert stats["inference_stats"]["fail"]["count"] == 0
    assert server.runtime.statistics(name)[0].oom_splits == 1
    assert _metric(server, "fnserve_inference_oom_split", model=name, version="1") == 1
    # For the next 30 s the model forms batches of at most 4 rows: no new out-of-memory.
    # (The margin is 30 s for a step that takes milliseconds.)
    results = _concurrently(infer, server, name, [1] * MAX_ROWS)
    assert [r.tolist() for r in results] == [[[2.0 * i]] for i in range(MAX_ROWS)]
    stats = _statistics(server, name)
    assert [(b["batch_size"], b["compute_infer"]["count"]) for b in stats["batch_stats"]] == [
        (LIMIT_ROWS, 4)
    ]
    assert server.runtime.statistics(name)[0].oom_splits == 1


def test_a_request_too_big_alone_fails_with_503_and_its_neighbours_succeed(
    server: RunningServer,
) -> None:
    # 1 + 1 + 6 rows: one full batch; split, the 6-row request runs out of memory alone.
    results = _concurrently(_http, server, "oom_alone_http", [1, 1, 6])
    np.testing.assert_array_equal(results[0], [[0.0]])
    np.testing.assert_array_equal(results[1], [[2.0]])
    error = results[2]
    assert isinstance(error, InferenceServerException)
    assert error.status() == "503"
    message = str(error.message())
    assert message == (
        "model 'oom_alone_http' ran out of memory on a batch of 6 rows from 1 request: "
        "MemoryError: Unable to allocate 6.00 PiB for an array with shape (6, 1125899906842624) "
        "and data type uint8"
    )
    assert server.runtime.statistics("oom_alone_http")[0].oom_splits >= 1
    backend = _metric(server, "nv_inference_request_failure", model="oom_alone_http")
    assert backend == _metric(
        server, "nv_inference_request_failure", model="oom_alone_http", reason="BACKEND"
    )
    assert backend == 1
    # The server, other models and other requests of this one go on.
    assert _http(server, "bystander", np.array([1.0], np.float32)).tolist() == [2.0]
    bystander = server.runtime.statistics("bystander")[0]
    assert (bystander.fail.count, bystander.oom_splits) == (0, 0)
    assert httpx.get(f"http://{server.http_url}/v2/health/ready").status_code == 200


def test_a_request_too_big_alone_is_resource_exhausted_over_grpc(server: RunningServer) -> None:
    results = _concurrently(_grpc, server, "oom_alone_grpc", [6, 1, 1])
    error = results[0]
    assert isinstance(error, InferenceServerException)
    assert error.status() == "StatusCode.RESOURCE_EXHAUSTED"
    assert str(error.message()) == (
        "model 'oom_alone_grpc' ran out of memory on a batch of 6 rows from 1 request: "
        "OutOfMemoryError: CUDA out of memory. Tried to allocate 6.00 GiB. GPU 0 has a total "
        "capacity of 15.70 GiB of which 1.06 GiB is free."
    )
    np.testing.assert_array_equal(results[1], [[2.0]])
    np.testing.assert_array_equal(results[2], [[4.0]])
    assert server.runtime.statistics("oom_alone_grpc")[0].failures["BACKEND"] == 1


def test_a_process_isolated_model_splits_too(server: RunningServer) -> None:
    results = _concurrently(_http, server, "oom_process", [1, 6, 1])
    np.testing.assert_array_equal(results[0], [[0.0]])
    np.testing.assert_array_equal(results[2], [[4.0]])
    error = results[1]
    assert isinstance(error, InferenceServerException)
    assert error.status() == "503"  # the worker's error came back as OutOfMemoryError
    assert "ran out of memory on a batch of 6 rows from 1 request" in str(error.message())
    assert server.runtime.statistics("oom_process")[0].oom_splits >= 1
