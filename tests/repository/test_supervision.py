"""Supervised background work: a scheduler task that dies fails its model at once (FAILED,
with the reason, in the index and the metrics), its requests get an answer, other models
serve, and a load brings it back."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from fnserve import DynamicBatching, model
from fnserve.errors import ModelExecutionError, UnavailableError
from fnserve.runtime import Runtime
from fnserve.scheduling.batcher import BatchPolicy
from fnserve.scheduling.pool import InstancePool
from fnserve.server.metrics import RuntimeCollector, exposition
from fnserve.types import InferInput, InferRequest, ModelState
from tests.repository.counting import Counted
from tests.repository.test_races import IO, _request


def _victim(value: float = 1.0) -> InferRequest:
    """A request for the batching model (a batch dimension of 1)."""
    return InferRequest("victim", (InferInput("X", "FP32", np.array([[value]], np.float32)),))


def _runtime() -> Runtime:
    victim = model(name="victim", max_batch_size=8, dynamic_batching=DynamicBatching(), **IO)
    return Runtime([victim(Counted), model(name="bystander", **IO)(Counted)])


def _metric(runtime: Runtime, line_start: str) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RuntimeCollector(runtime))
    text = exposition(registry).decode()
    return next(line for line in text.splitlines() if line.startswith(line_start))


async def _kill_with_requests_queued(runtime: Runtime, kill: object) -> list[BaseException]:
    """Hold the only instance, queue requests behind it, kill the scheduler; the outcomes."""
    Counted.gate.clear()
    running = asyncio.ensure_future(runtime.infer(_victim()))
    await asyncio.sleep(0.05)
    queued = [asyncio.ensure_future(runtime.infer(_victim())) for _ in range(5)]
    await asyncio.sleep(0.05)
    assert all(not q.done() for q in queued)
    start = time.monotonic()
    assert callable(kill)
    kill()
    done, pending = await asyncio.wait(queued, timeout=1.0)
    assert not pending, "queued requests must fail within 1 s of the scheduler's death"
    assert time.monotonic() - start < 1.0
    Counted.gate.set()
    outcomes = [t.exception() for t in queued]
    await asyncio.wait([running], timeout=5)
    assert running.done()
    return [o for o in outcomes if o is not None]


async def test_a_cancelled_scheduler_task_fails_its_model_and_a_load_brings_it_back() -> None:
    runtime = _runtime()
    await runtime.start()
    (handle,) = runtime.registry.versions("victim")
    assert handle.loaded is not None
    task = handle.loaded.scheduler_task
    assert task is not None
    errors = await _kill_with_requests_queued(runtime, task.cancel)

    assert len(errors) == 5
    assert all(isinstance(e, UnavailableError) for e in errors)
    assert "background task died" in str(errors[0])
    index = {e.name: e for e in runtime.repository_index()}
    assert index["victim"].state is ModelState.FAILED
    assert "scheduler" in index["victim"].reason
    assert "was cancelled" in index["victim"].reason
    assert index["bystander"].state is ModelState.READY
    assert (await runtime.infer(_request("bystander", 3.0))).outputs[0].data[0] == 3.0
    assert (
        _metric(runtime, 'fnserve_model_state{model="victim",version="1",state="FAILED"}')[-1]
        == "1"
    )
    with pytest.raises(Exception, match="FAILED: a background task died"):
        await runtime.infer(_victim())

    await runtime.load_model("victim")
    assert handle.state is ModelState.READY
    assert (await runtime.infer(_victim(6.0))).outputs[0].data[0, 0] == 6.0
    await runtime.aclose()
    assert Counted.closed == Counted.built  # the failed instances were released too


async def test_a_scheduler_that_raises_fails_its_model_with_the_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runtime = _runtime()
    await runtime.start()
    calls = 0
    original = BatchPolicy.next_batch

    def next_batch(self: BatchPolicy, *args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise RuntimeError("policy bug")
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(BatchPolicy, "next_batch", next_batch)
    Counted.gate.clear()
    running = asyncio.ensure_future(runtime.infer(_victim()))
    await asyncio.sleep(0.05)
    start = time.monotonic()
    queued = asyncio.ensure_future(runtime.infer(_victim()))
    Counted.gate.set()  # frees the instance: the scheduler's next turn raises
    with pytest.raises(UnavailableError, match="RuntimeError: policy bug"):
        await asyncio.wait_for(queued, 1.0)
    assert time.monotonic() - start < 1.0
    await running
    entry = {e.name: e for e in runtime.repository_index()}["victim"]
    assert entry.state is ModelState.FAILED
    assert "policy bug" in entry.reason
    monkeypatch.undo()
    await runtime.load_model("victim")
    assert (await runtime.infer(_victim(2.0))).outputs[0].data[0, 0] == 2.0
    await runtime.aclose()
    assert Counted.closed == Counted.built


async def test_a_batch_task_that_dies_answers_its_requests_and_fails_the_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runtime = _runtime()
    await runtime.start()

    def broken_record(*args: object) -> None:
        raise RuntimeError("bookkeeping bug")

    monkeypatch.setattr(InstancePool, "_record", broken_record)
    with pytest.raises(ModelExecutionError, match="bookkeeping bug"):
        await asyncio.wait_for(runtime.infer(_victim()), 1.0)
    monkeypatch.undo()
    await asyncio.sleep(0)
    entry = {e.name: e for e in runtime.repository_index()}["victim"]
    assert entry.state is ModelState.FAILED
    assert "bookkeeping bug" in entry.reason
    assert (await runtime.infer(_request("bystander", 1.0))).outputs[0].data[0] == 1.0
    await runtime.load_model("victim")
    assert (await runtime.infer(_victim(5.0))).outputs[0].data[0, 0] == 5.0
    await runtime.aclose()
    assert Counted.closed == Counted.built


async def test_supervisor_owns_no_task_after_close() -> None:
    runtime = _runtime()
    await runtime.start()
    assert len(runtime.supervisor) == 3  # one scheduler per model, the idle reaper
    await runtime.aclose()
    assert len(runtime.supervisor) == 0
