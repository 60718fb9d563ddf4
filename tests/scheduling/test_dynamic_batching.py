"""The dynamic batcher driven through the in-process Runtime (real threads, no mocks)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
import pytest

from fnserve import DynamicBatching, InstanceGroup, QueuePolicy, Tensor, model
from fnserve.errors import ModelExecutionError, QueueFullError, RequestTimeoutError
from fnserve.runtime import Runtime
from fnserve.types import InferInput, InferRequest
from tests.tensor_io import TensorIO

IO: TensorIO = {"inputs": [Tensor("X", "FP32", [-1])], "outputs": [Tensor("Y", "FP32", [-1])]}


class Recorder:
    """A model body that records every batch it ran and can be held at a gate."""

    def __init__(self, hold_first: bool = False) -> None:
        self.batches: list[np.ndarray] = []
        self.gate = threading.Event()
        self.started = threading.Event()
        if not hold_first:
            self.gate.set()
        self.lock = threading.Lock()

    def __call__(self, X: np.ndarray) -> np.ndarray:
        with self.lock:
            self.batches.append(X.copy())
        self.started.set()
        self.gate.wait(10)
        if (X < 0).any():
            raise ValueError("negative value")
        return X

    @property
    def sizes(self) -> list[int]:
        return [len(b) for b in self.batches]


def _model(body: Callable[..., Any], max_batch_size: int = 8, **kw: Any) -> Any:
    def fn(X: np.ndarray) -> np.ndarray:
        return body(X)  # type: ignore[no-any-return]

    return model(name="m", max_batch_size=max_batch_size, **IO, **kw)(fn)


@asynccontextmanager
async def serving(definition: Any) -> AsyncIterator[Runtime]:
    runtime = Runtime([definition])
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.aclose()


def request(x: np.ndarray, **parameters: Any) -> InferRequest:
    return InferRequest("m", (InferInput("X", "FP32", x),), parameters=parameters)


async def started(recorder: Recorder) -> None:
    await asyncio.to_thread(recorder.started.wait, 10)


def rows(*values: float, cols: int = 2) -> np.ndarray:
    return np.array([[v] * cols for v in values], dtype=np.float32)


@pytest.mark.parametrize("max_batch_size", [1, 4, 64])
@pytest.mark.parametrize("delay_us", [0, 2000])
async def test_concurrent_requests_each_get_their_own_answer(
    max_batch_size: int, delay_us: int
) -> None:
    recorder = Recorder()
    batching = DynamicBatching(max_queue_delay_microseconds=delay_us)
    async with serving(_model(recorder, max_batch_size, dynamic_batching=batching)) as runtime:
        sizes = [1 + i % min(max_batch_size, 3) for i in range(500)]
        inputs = [rows(*range(i * 10, i * 10 + n)) for i, n in enumerate(sizes)]
        responses = await asyncio.gather(*(runtime.infer(request(x)) for x in inputs))
        for x, response in zip(inputs, responses, strict=False):
            np.testing.assert_array_equal(response.outputs[0].data, x)
        stats = runtime.statistics("m")[0]
    assert stats.inference_count == sum(sizes)
    assert max(recorder.sizes) <= max_batch_size
    if max_batch_size > 1:
        assert stats.execution_count < len(sizes)  # batches really formed


async def test_async_model_batches_too() -> None:
    seen: list[int] = []

    async def body(X: np.ndarray) -> np.ndarray:
        seen.append(len(X))
        await asyncio.sleep(0.001)
        return X

    definition = model(name="m", max_batch_size=16, dynamic_batching=DynamicBatching(), **IO)(body)
    async with serving(definition) as runtime:
        inputs = [rows(i) for i in range(100)]
        responses = await asyncio.gather(*(runtime.infer(request(x)) for x in inputs))
    assert [r.outputs[0].data[0, 0] for r in responses] == list(range(100))
    assert max(seen) > 1


async def test_requests_with_different_dims_are_not_merged() -> None:
    recorder = Recorder(hold_first=True)
    async with serving(_model(recorder, dynamic_batching=DynamicBatching())) as runtime:
        first = asyncio.create_task(runtime.infer(request(rows(0))))
        await started(recorder)
        inputs = [rows(i, cols=2 + (i > 3)) for i in range(1, 7)]
        gathered = asyncio.gather(*(runtime.infer(request(x)) for x in inputs))
        await asyncio.sleep(0.01)
        recorder.gate.set()
        await first
        responses = await gathered
    for x, response in zip(inputs, responses, strict=False):
        np.testing.assert_array_equal(response.outputs[0].data, x)
    # Rows of width 2 (values 1-3) ran together, then rows of width 3 (values 4-6).
    assert [b.shape for b in recorder.batches] == [(1, 2), (3, 2), (3, 3)]


async def test_without_dynamic_batching_every_request_runs_alone() -> None:
    recorder = Recorder()
    async with serving(_model(recorder)) as runtime:
        await asyncio.gather(*(runtime.infer(request(rows(i, i))) for i in range(20)))
        stats = runtime.statistics("m")[0]
    assert stats.execution_count == 20
    assert stats.inference_count == 40


async def test_priority_levels_run_higher_priority_first() -> None:
    recorder = Recorder(hold_first=True)
    batching = DynamicBatching(priority_levels=2, default_priority_level=2)
    async with serving(_model(recorder, 1, dynamic_batching=batching)) as runtime:
        blocker = asyncio.create_task(runtime.infer(request(rows(0))))
        await started(recorder)
        low = [asyncio.create_task(runtime.infer(request(rows(10 + i)))) for i in range(3)]
        high = [
            asyncio.create_task(runtime.infer(request(rows(20 + i), priority=1))) for i in range(3)
        ]
        await asyncio.sleep(0.01)
        recorder.gate.set()
        await asyncio.gather(blocker, *low, *high)
    order = [int(b[0, 0]) for b in recorder.batches]
    assert order == [0, 20, 21, 22, 10, 11, 12]


async def test_max_queue_size_rejects_at_once() -> None:
    recorder = Recorder(hold_first=True)
    policy = QueuePolicy(max_queue_size=2)
    batching = DynamicBatching(default_queue_policy=policy)
    async with serving(_model(recorder, 1, dynamic_batching=batching)) as runtime:
        running = asyncio.create_task(runtime.infer(request(rows(0))))
        await started(recorder)
        queued = [asyncio.create_task(runtime.infer(request(rows(i)))) for i in (1, 2)]
        await asyncio.sleep(0)
        with pytest.raises(QueueFullError, match="maximum queue size of 2"):
            await runtime.infer(request(rows(3)))
        recorder.gate.set()
        await asyncio.gather(running, *queued)
        stats = runtime.statistics("m")[0]
    assert stats.fail.count == 1


async def test_timeout_reject_fails_waiting_request() -> None:
    recorder = Recorder(hold_first=True)
    policy = QueuePolicy(default_timeout_microseconds=20_000)
    async with serving(
        _model(recorder, 1, dynamic_batching=DynamicBatching(default_queue_policy=policy))
    ) as runtime:
        running = asyncio.create_task(runtime.infer(request(rows(0))))
        await started(recorder)
        with pytest.raises(RequestTimeoutError, match="timeout expired"):
            await runtime.infer(request(rows(1)))
        recorder.gate.set()
        await running
    assert recorder.sizes == [1]  # the timed-out request never ran


async def test_timeout_delay_runs_late_request_after_others() -> None:
    recorder = Recorder(hold_first=True)
    policy = QueuePolicy(timeout_action="DELAY", default_timeout_microseconds=20_000)
    batching = DynamicBatching(default_queue_policy=policy)
    async with serving(_model(recorder, 1, dynamic_batching=batching)) as runtime:
        running = asyncio.create_task(runtime.infer(request(rows(0))))
        await started(recorder)
        late = asyncio.create_task(runtime.infer(request(rows(1))))
        await asyncio.sleep(0.05)  # past the 20 ms timeout: request 1 is now delayed
        fresh = asyncio.create_task(runtime.infer(request(rows(2))))
        await asyncio.sleep(0)
        recorder.gate.set()
        await asyncio.gather(running, late, fresh)
    assert [int(b[0, 0]) for b in recorder.batches] == [0, 2, 1]


async def test_timeout_override_shortens_default_only_when_allowed() -> None:
    recorder = Recorder(hold_first=True)
    policy = QueuePolicy(allow_timeout_override=True)
    async with serving(
        _model(recorder, 1, dynamic_batching=DynamicBatching(default_queue_policy=policy))
    ) as runtime:
        running = asyncio.create_task(runtime.infer(request(rows(0))))
        await started(recorder)
        with pytest.raises(RequestTimeoutError):
            await runtime.infer(request(rows(1), timeout=10_000))
        recorder.gate.set()
        await running


async def test_request_cancelled_before_run_is_dropped() -> None:
    recorder = Recorder(hold_first=True)
    async with serving(_model(recorder, 1, dynamic_batching=DynamicBatching())) as runtime:
        running = asyncio.create_task(runtime.infer(request(rows(0))))
        await started(recorder)
        gone = asyncio.create_task(runtime.infer(request(rows(1))))
        kept = asyncio.create_task(runtime.infer(request(rows(2))))
        await asyncio.sleep(0)
        gone.cancel()
        recorder.gate.set()
        await asyncio.gather(running, kept)
        stats = runtime.statistics("m")[0]
    assert [int(b[0, 0]) for b in recorder.batches] == [0, 2]
    assert stats.fail.count == 1


async def test_raising_model_fails_only_its_batch() -> None:
    recorder = Recorder(hold_first=True)
    async with serving(_model(recorder, 8, dynamic_batching=DynamicBatching())) as runtime:
        poisoned = asyncio.create_task(runtime.infer(request(rows(-1))))
        await started(recorder)
        others = [asyncio.create_task(runtime.infer(request(rows(i)))) for i in range(1, 5)]
        await asyncio.sleep(0)
        recorder.gate.set()
        with pytest.raises(ModelExecutionError, match="raised ValueError: negative value"):
            await poisoned
        results = await asyncio.gather(*others)
        assert runtime.model_ready("m")
    assert [r.outputs[0].data[0, 0] for r in results] == [1, 2, 3, 4]


async def test_preserve_ordering_delivers_in_dispatch_order() -> None:
    release_first = threading.Event()
    calls = 0
    lock = threading.Lock()

    def body(X: np.ndarray) -> np.ndarray:
        nonlocal calls
        with lock:
            calls += 1
            mine = calls
        if mine == 1:
            release_first.wait(10)
        return X

    batching = DynamicBatching(preserve_ordering=True)
    definition = _model(body, 1, dynamic_batching=batching, instance_group=[InstanceGroup(count=2)])
    finished: list[int] = []
    async with serving(definition) as runtime:

        async def call(value: int) -> None:
            await runtime.infer(request(rows(value)))
            finished.append(value)

        first = asyncio.create_task(call(1))
        await asyncio.sleep(0.02)
        second = asyncio.create_task(call(2))
        await asyncio.sleep(0.05)  # the second batch is done by now, but must wait
        assert finished == []
        release_first.set()
        await asyncio.gather(first, second)
    assert finished == [1, 2]


async def test_instances_run_concurrently() -> None:
    barrier = threading.Barrier(2, timeout=10)

    def body(X: np.ndarray) -> np.ndarray:
        barrier.wait()  # only passes when two instances run at the same time
        return X

    definition = _model(body, 1, instance_group=[InstanceGroup(count=2, kind="KIND_CPU")])
    async with serving(definition) as runtime:
        await asyncio.gather(runtime.infer(request(rows(1))), runtime.infer(request(rows(2))))
