"""The background lane (durable jobs): below every online priority level, never bounded by the
queue policy, and a batch takes online requests first."""

from __future__ import annotations

import asyncio

import numpy as np

from fnserve import DynamicBatching, QueuePolicy
from fnserve.runtime import Runtime
from fnserve.scheduling.scheduler import QueueScheduler
from tests.scheduling.test_dynamic_batching import (
    Recorder,
    _model,
    request,
    rows,
    serving,
    started,
)


def _first_values(recorder: Recorder) -> list[list[int]]:
    return [[int(v) for v in batch[:, 0]] for batch in recorder.batches]


async def _blocked(runtime: Runtime, recorder: Recorder) -> asyncio.Task[object]:
    """A request holding the only instance, so what follows waits in the queue."""
    blocker = asyncio.create_task(runtime.infer(request(rows(0))))
    await started(recorder)
    return blocker


async def test_background_runs_after_every_priority_level() -> None:
    recorder = Recorder(hold_first=True)
    batching = DynamicBatching(priority_levels=2, default_priority_level=2)
    async with serving(_model(recorder, 1, dynamic_batching=batching)) as runtime:
        blocker = await _blocked(runtime, recorder)
        jobs = [
            asyncio.create_task(runtime.infer(request(rows(30 + i)), background=True))
            for i in range(2)
        ]
        low = asyncio.create_task(runtime.infer(request(rows(10))))
        high = asyncio.create_task(runtime.infer(request(rows(20), priority=1)))
        await asyncio.sleep(0.01)
        recorder.gate.set()
        await asyncio.gather(blocker, *jobs, low, high)
    assert _first_values(recorder) == [[0], [20], [10], [30], [31]]


async def test_batch_is_filled_with_online_requests_first() -> None:
    recorder = Recorder(hold_first=True)
    async with serving(_model(recorder, 4, dynamic_batching=DynamicBatching())) as runtime:
        blocker = await _blocked(runtime, recorder)
        jobs = [
            asyncio.create_task(runtime.infer(request(rows(30 + i)), background=True))
            for i in range(4)
        ]
        online = [asyncio.create_task(runtime.infer(request(rows(10 + i)))) for i in range(2)]
        await asyncio.sleep(0.01)
        recorder.gate.set()
        results = await asyncio.gather(*jobs, *online)
        await blocker
    # online requests lead the batch; jobs fill the rest, then the remaining jobs run
    assert _first_values(recorder) == [[0], [10, 11, 30, 31], [32, 33]]
    assert [int(r.outputs[0].data[0, 0]) for r in results] == [30, 31, 32, 33, 10, 11]


async def test_background_requests_ignore_the_queue_size_limit() -> None:
    recorder = Recorder(hold_first=True)
    policy = QueuePolicy(max_queue_size=1)
    batching = DynamicBatching(default_queue_policy=policy)
    async with serving(_model(recorder, 1, dynamic_batching=batching)) as runtime:
        blocker = await _blocked(runtime, recorder)
        jobs = [
            asyncio.create_task(runtime.infer(request(rows(30 + i)), background=True))
            for i in range(5)
        ]
        online = asyncio.create_task(runtime.infer(request(rows(10))))  # its level has room
        await asyncio.sleep(0.01)
        loaded = runtime.registry.resolve("m", "", True).loaded
        assert loaded is not None
        assert isinstance(loaded.scheduler, QueueScheduler)
        statistics = loaded.scheduler.queue.statistics()
        recorder.gate.set()
        await asyncio.gather(blocker, *jobs, online)
    assert statistics.background == 5
    assert statistics.per_level == (1,)
    assert _first_values(recorder)[1] == [10]


async def test_background_lane_without_dynamic_batching() -> None:
    recorder = Recorder(hold_first=True)
    async with serving(_model(recorder, 1)) as runtime:
        blocker = await _blocked(runtime, recorder)
        job = asyncio.create_task(runtime.infer(request(rows(30)), background=True))
        online = asyncio.create_task(runtime.infer(request(rows(10))))
        await asyncio.sleep(0.01)
        recorder.gate.set()
        await asyncio.gather(blocker, job, online)
    assert _first_values(recorder) == [[0], [10], [30]]


async def test_cancelled_background_request_never_runs() -> None:
    recorder = Recorder(hold_first=True)
    async with serving(_model(recorder, 1, dynamic_batching=DynamicBatching())) as runtime:
        blocker = await _blocked(runtime, recorder)
        job = asyncio.create_task(runtime.infer(request(rows(30)), background=True))
        await asyncio.sleep(0.01)
        job.cancel()
        await asyncio.sleep(0)
        recorder.gate.set()
        await blocker
        await runtime.infer(request(rows(11)))
    assert _first_values(recorder) == [[0], [11]]
    assert np.all(recorder.batches[-1] == 11)
