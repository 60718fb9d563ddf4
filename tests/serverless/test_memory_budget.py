"""Memory budget and LRU eviction, end to end: a real `fnserve serve`, real clients.

Every `ballast_*` model (memory_models.py) holds 120 MiB; `ballast_big` 480 MiB. The budget
of 300 MiB holds two ballasts, not three.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.serverless.helpers import MODELS, index, infer, metric, wait_for
from tests.serverproc import ServerProcess

LOADED = ("ballast_a", "ballast_b", "ballast_c", "ballast_pinned")


def _serve(*models: str) -> ServerProcess:
    flags = [a for name in models for a in ("--load-model", name)]
    return ServerProcess.start(MODELS, "--memory-budget", "300MiB", "--model-control-mode",
                               "explicit", *flags)  # fmt: skip


@pytest.fixture
def server() -> Iterator[ServerProcess]:
    with _serve("ballast_a", "ballast_b", "ballast_c") as running:
        yield running


def _idle(server: ServerProcess) -> set[str]:
    return {n for n, (_, reason) in index(server).items() if "evicted" in reason}


def test_loading_past_the_budget_evicts_the_least_recently_used(server: ServerProcess) -> None:
    # a, b, c loaded in that order: c did not fit beside a and b, so a (the oldest) went.
    assert _idle(server) == {"ballast_a"}
    state, reason = index(server)["ballast_a"]
    assert state == "READY"  # scaled to zero, still served
    assert reason == "evicted to make room for 'ballast_c' (memory budget)"
    infer(server, "ballast_b")  # b is now more recently used than c
    assert infer(server, "ballast_a")["Y"] == 2.0  # a cold start, which evicts c, not b
    assert _idle(server) == {"ballast_c"}
    assert metric(server, "fnserve_model_evictions", model="ballast_a", version="1") == 1
    assert metric(server, "fnserve_model_evictions", model="ballast_c", version="1") == 1
    assert metric(server, "fnserve_model_cold_starts", model="ballast_a", version="1") == 1


def test_a_model_in_use_is_never_evicted(server: ServerProcess) -> None:
    infer(server, "ballast_c")  # c is the most recently used; b the least
    with ThreadPoolExecutor(1) as pool:
        busy = pool.submit(infer, server, "ballast_b", 5.0, 3.0)  # b runs for 3 s
        wait_for(lambda: metric(server, "nv_inference_pending_request_count",
                                model="ballast_b", version="1") == 1, "b to run")  # fmt: skip
        assert infer(server, "ballast_a")["Y"] == 2.0  # needs room: c goes, although newer
        assert busy.result()["Y"] == 6.0
    assert _idle(server) == {"ballast_c"}
    assert index(server)["ballast_b"] == ("READY", "")


def test_a_model_that_cannot_fit_is_refused_and_nothing_else_moves(
    server: ServerProcess,
) -> None:
    before = index(server)
    response = httpx.post(f"{server.http}/v2/repository/models/ballast_big/load", timeout=60)
    assert response.status_code == 503
    message = response.json()["error"]
    assert message.startswith("model 'ballast_big' version 1 needs ")
    assert "does not fit the host budget 0.29 GiB" in message
    assert "'ballast_b' v1" in message
    assert "'ballast_c' v1" in message
    assert index(server) == {**before, "ballast_big": ("UNAVAILABLE", message)}
    client = grpcclient.InferenceServerClient(server.grpc)
    with pytest.raises(InferenceServerException) as caught:
        client.load_model("ballast_big")
    assert caught.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
    assert infer(server, "ballast_b")["Y"] == 2.0  # the others serve as before


def test_min_instances_keeps_a_model_loaded() -> None:
    with _serve("ballast_pinned", "ballast_a", "ballast_b") as server:
        # pinned was loaded first, so it is the least recently used, but it may not go.
        assert _idle(server) == {"ballast_a"}
        assert index(server)["ballast_pinned"] == ("READY", "")
        response = httpx.post(f"{server.http}/v2/repository/models/ballast_c/load", timeout=60)
        assert response.status_code == 200
        assert _idle(server) == {"ballast_a", "ballast_b"}
        assert index(server)["ballast_pinned"] == ("READY", "")
