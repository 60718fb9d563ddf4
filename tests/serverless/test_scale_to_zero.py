"""Scale to zero and cold start, end to end: a real `fnserve serve`, real clients.

`sleepy` (memory_models.py) holds 120 MiB per instance and has idle_timeout_s=1.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.serverless.helpers import MODELS, index, infer, metric, wait_for
from tests.serverproc import ServerProcess

LABELS = {"model": "sleepy", "version": "1"}


def _serve(*flags: str, build_delay_s: float = 0.0) -> ServerProcess:
    env = {**os.environ, "FNSERVE_TEST_BUILD_DELAY_S": str(build_delay_s)}
    return ServerProcess.start(MODELS, "--model-control-mode", "explicit", "--load-model",
                               "sleepy", *flags, env=env)  # fmt: skip


@pytest.fixture
def server() -> Iterator[ServerProcess]:
    with _serve() as running:
        yield running


def _scaled_to_zero(server: ServerProcess) -> bool:
    return "scaled to zero" in index(server)["sleepy"][1]


def test_idle_model_scales_to_zero_gives_memory_back_and_stays_ready(
    server: ServerProcess,
) -> None:
    assert infer(server, "sleepy")["Y"] == 2.0
    loaded_mb = server.rss_mb()
    wait_for(lambda: _scaled_to_zero(server), "sleepy to scale to zero")
    state, reason = index(server)["sleepy"]
    assert (state, reason) == ("READY", "scaled to zero after 1 s idle")
    assert httpclient.InferenceServerClient(server.http.removeprefix("http://")).is_model_ready(
        "sleepy"
    )
    grpc = grpcclient.InferenceServerClient(server.grpc)
    assert grpc.is_model_ready("sleepy")
    ready_only = httpx.post(f"{server.http}/v2/repository/index", json={"ready": True}).json()
    assert [(m["name"], m["state"]) for m in ready_only] == [("sleepy", "READY")]
    # Its 120 MiB go back to the system once the instance is released (right after IDLE).
    wait_for(lambda: loaded_mb - server.rss_mb() > 100, "the server's RSS to drop", 5)
    assert metric(server, "fnserve_model_state", **LABELS, state="IDLE") == 1
    assert metric(server, "fnserve_model_instances", **LABELS) == 0
    assert metric(server, "fnserve_model_idle_unloads", **LABELS) == 1
    assert metric(server, "fnserve_model_memory_bytes", **LABELS, device="host") == 0


def test_the_next_request_cold_starts_it_warmed_before_the_answer(server: ServerProcess) -> None:
    first = infer(server, "sleepy")
    wait_for(lambda: _scaled_to_zero(server), "sleepy to scale to zero")
    client = grpcclient.InferenceServerClient(server.grpc)
    x = grpcclient.InferInput("X", [1, 1], "FP32")
    x.set_data_from_numpy(np.array([[41.0]], np.float32))
    result = client.infer("sleepy", [x])
    assert result.as_numpy("Y").item() == 42.0
    assert result.as_numpy("BUILT").item() == first["BUILT"] + 1  # a new instance
    assert result.as_numpy("CALLS").item() == 2  # its warmup sample ran first
    assert index(server)["sleepy"] == ("READY", "")
    assert metric(server, "fnserve_model_cold_starts", **LABELS) == 1
    assert metric(server, "fnserve_model_cold_start_duration_seconds_count", **LABELS) == 1
    assert metric(server, "fnserve_model_memory_bytes", **LABELS, device="host") > 100 * 2**20
    stats = client.get_inference_statistics("sleepy", as_json=True)["model_stats"][0]
    assert int(stats["inference_count"]) == 2  # counters continue across the cold start


def test_fifty_concurrent_first_requests_share_one_cold_start() -> None:
    with _serve(build_delay_s=1.0) as server:
        before = infer(server, "sleepy")["BUILT"]
        wait_for(lambda: _scaled_to_zero(server), "sleepy to scale to zero")
        with ThreadPoolExecutor(50) as pool:
            answers = list(pool.map(lambda i: infer(server, "sleepy", float(i)), range(50)))
        assert [a["Y"] for a in answers] == [float(i + 1) for i in range(50)]
        assert {a["BUILT"] for a in answers} == {before + 1}
        assert metric(server, "fnserve_model_cold_starts", **LABELS) == 1


def test_a_cold_start_past_its_timeout_answers_503_then_serves() -> None:
    with _serve("--cold-start-timeout", "0.3", build_delay_s=1.5) as server:
        infer(server, "sleepy")
        wait_for(lambda: _scaled_to_zero(server), "sleepy to scale to zero")
        with pytest.raises(InferenceServerException) as caught:
            infer(server, "sleepy")
        assert caught.value.status() == "503"
        assert "cold-starting and was not ready within the cold-start timeout of 0.3 s" in str(
            caught.value
        )
        wait_for(lambda: index(server)["sleepy"] == ("READY", ""), "the cold start to finish")
        assert infer(server, "sleepy")["Y"] == 2.0
        assert metric(server, "fnserve_model_cold_starts", **LABELS) == 1
