"""The direct lane (scheduling/direct.py): a request that finds its inline model idle runs at
once, and everything observable is as the normal way has it: answers, statistics, errors and
their statuses, bad input, batching of bursts; ensemble steps that take it (`call_now`) count
in their models' statistics and fail naming the step."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator

import numpy as np
import pytest

from fnserve import DynamicBatching, Tensor, ensemble, model
from fnserve.config.server import ModelDefaults
from fnserve.errors import InvalidInputError, ModelExecutionError, OutOfMemoryError
from fnserve.runtime import Runtime
from fnserve.scheduling.direct import DirectLane
from fnserve.stats import ModelStats
from fnserve.types import InferInput, InferRequest

X = Tensor("X", "FP32", [2])
Y = Tensor("Y", "FP32", [2])
Z = Tensor("Z", "FP32", [2])
SEEN_THREADS: list[str] = []


def _plus_one(X: np.ndarray) -> np.ndarray:
    SEEN_THREADS.append(threading.current_thread().name)
    if X[0, 0] < 0:
        raise ValueError("negative input")
    if X[0, 0] > 1e6:
        raise MemoryError("too big to fit")
    return X + 1


# The same function twice: runs inline (direct lane) and on its thread (the normal way).
fast = model(name="fast", inputs=[X], outputs=[Y], max_batch_size=8,
             parameters={"inline_max_us": "100000"})(_plus_one)  # fmt: skip
slow = model(name="slow", inputs=[X], outputs=[Y], max_batch_size=8,
             parameters={"inline_max_us": "0"})(_plus_one)  # fmt: skip


@model(inputs=[Y], outputs=[Z], max_batch_size=8, dynamic_batching=DynamicBatching(),
       parameters={"inline_max_us": "100000"})  # fmt: skip
def double(Y: np.ndarray) -> np.ndarray:
    if Y[0, 0] == 13:
        raise ValueError("unlucky")
    return Y * 2


pipeline = ensemble("pipeline", steps=[fast, double])


@pytest.fixture
async def runtime() -> AsyncIterator[Runtime]:
    served = Runtime([fast, slow, double, pipeline])
    await served.start(ModelDefaults())
    yield served
    await served.aclose()


def _request(name: str, x: float, **kwargs: object) -> InferRequest:
    data = np.full((1, 2), x, np.float32)
    tensor = "Y" if name == "double" else "X"
    return InferRequest(name, (InferInput(tensor, "FP32", data),), **kwargs)  # type: ignore[arg-type]


def _stats(runtime: Runtime, name: str) -> ModelStats:
    (record,) = [s for s in runtime.version_stats() if s.name == name]
    return record


def _counted(stats: ModelStats) -> list[object]:
    """What Triton's statistics count, without the durations."""
    batches = sorted((rows, b.compute_infer.count) for rows, b in stats.batches.items())
    return [stats.success.count, stats.fail.count, stats.queue.count, stats.compute_infer.count,
            stats.execution_count, stats.inference_count, sorted(stats.failures.items()),
            batches]  # fmt: skip


async def _warm(runtime: Runtime, name: str) -> None:
    """Past the inline policy's streak: from now on the model runs inline."""
    for _ in range(10):
        await runtime.infer(_request(name, 1))


def _spy(runtime: Runtime, name: str) -> list[bool]:
    """Record whether each request of `name` ran in the direct lane."""
    handle = runtime.registry.resolve(name, "", True)
    assert handle.loaded is not None
    direct = handle.loaded.direct
    assert isinstance(direct, DirectLane)
    taken: list[bool] = []
    try_run = direct.try_run

    def spying(*args: object) -> object:
        outputs = try_run(*args)  # type: ignore[arg-type]
        taken.append(outputs is not None)
        return outputs

    direct.try_run = spying  # type: ignore[method-assign,assignment]
    return taken


async def test_sequential_requests_of_one_task_all_take_the_lane(runtime: Runtime) -> None:
    """A task's next request waited for the previous answer: it is no burst to batch, even
    within one turn of the loop (the lane answers without letting the loop turn)."""
    await _warm(runtime, "fast")
    taken = _spy(runtime, "fast")
    for i in range(6):
        await runtime.infer(_request("fast", i))
    assert taken == [True] * 6


async def test_an_idle_inline_model_answers_in_the_direct_lane(runtime: Runtime) -> None:
    await _warm(runtime, "fast")
    taken = _spy(runtime, "fast")
    SEEN_THREADS.clear()
    for i in range(5):
        await asyncio.sleep(0)  # each request in a turn of its own, as from the network
        response = await runtime.infer(_request("fast", i))
        assert response.outputs[0].data.tolist() == [[i + 1, i + 1]]
        assert (response.model_name, response.model_version) == ("fast", "1")
    assert taken == [True] * 5
    assert SEEN_THREADS == [threading.current_thread().name] * 5


async def test_statistics_count_as_the_normal_way_does(runtime: Runtime) -> None:
    await _warm(runtime, "fast")
    await _warm(runtime, "slow")
    taken = _spy(runtime, "fast")
    for name in ("fast", "slow"):
        for i in range(7):
            await runtime.infer(_request(name, i))
        for i in (-1, -2):
            with pytest.raises(ModelExecutionError):
                await runtime.infer(_request(name, i))
    assert taken == [True] * 7  # failures raise out of the lane (the spy sees no answer)
    assert _counted(_stats(runtime, "fast")) == _counted(_stats(runtime, "slow"))
    fast_stats = _stats(runtime, "fast")
    assert fast_stats.success.ns > 0
    assert fast_stats.compute_infer.ns > 0
    assert fast_stats.failures["BACKEND"] == 2


async def test_errors_are_the_normal_ways(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    await _warm(runtime, "fast")
    await _warm(runtime, "slow")
    raised: dict[str, list[str]] = {}
    for name in ("fast", "slow"):
        messages = raised.setdefault(name, [])
        with pytest.raises(ModelExecutionError) as failed:
            await runtime.infer(_request(name, -1))
        messages.append(str(failed.value).replace(name, "M"))
        with caplog.at_level(logging.WARNING), pytest.raises(OutOfMemoryError) as oom:
            await runtime.infer(_request(name, 2e6))
        messages.append(str(oom.value).replace(name, "M"))
        assert f"model '{name}' instance 0: a single request (1 rows) ran out of memory" in (
            caplog.text
        )
        # bad input: the fast checks leave it to the detailed ones, which say what is wrong
        wrong = InferRequest(name, (InferInput("X", "FP64", np.zeros((1, 2))),))
        with pytest.raises(InvalidInputError) as invalid:
            await runtime.infer(wrong)
        messages.append(str(invalid.value))
        assert (await runtime.infer(_request(name, 1))).outputs[0].data[0, 0] == 2  # serving
    assert raised["fast"] == raised["slow"]
    assert "expected datatype FP32" in raised["fast"][2]


async def test_requests_the_lane_does_not_take_go_the_normal_way(runtime: Runtime) -> None:
    await _warm(runtime, "fast")
    taken = _spy(runtime, "fast")
    with_parameters = _request("fast", 1, parameters={"tag": "x"})
    assert (await runtime.infer(with_parameters)).outputs[0].data[0, 0] == 2
    assert (await runtime.infer(_request("fast", 1), background=True)).outputs[0].data[0, 0] == 2
    with pytest.raises(InvalidInputError, match="unexpected inference output 'NOPE'"):
        await runtime.infer(_request("fast", 1, outputs=("NOPE",)))
    assert taken == []
    only_y = await runtime.infer(_request("fast", 3, outputs=("Y",)))
    assert [o.name for o in only_y.outputs] == ["Y"]
    assert taken == [True]


async def test_a_burst_in_one_turn_of_the_loop_still_batches(runtime: Runtime) -> None:
    await _warm(runtime, "double")
    before = _stats(runtime, "double").execution_count
    answers = await asyncio.gather(*(runtime.infer(_request("double", i)) for i in range(20)))
    assert [a.outputs[0].data[0, 0] for a in answers] == [2.0 * i for i in range(20)]
    stats = _stats(runtime, "double")
    assert stats.execution_count - before < 20  # the first ran at once, the rest batched


async def test_ensemble_steps_take_the_lane_and_count_in_their_models(runtime: Runtime) -> None:
    await _warm(runtime, "fast")
    for _ in range(10):
        await runtime.infer(_request("pipeline", 1))
    taken = _spy(runtime, "fast")
    names = ("fast", "double", "pipeline")
    successes = {n: _stats(runtime, n).success.count for n in names}
    executions = _stats(runtime, "fast").execution_count
    for i in range(4):
        response = await runtime.infer(_request("pipeline", i))
        assert response.outputs[0].data.tolist() == [[2 * (i + 1)] * 2]
    assert taken == [True] * 4
    for name in names:  # the ensemble and each of its steps, as Triton counts them
        assert _stats(runtime, name).success.count == successes[name] + 4
    assert _stats(runtime, "fast").execution_count == executions + 4
    with pytest.raises(ModelExecutionError, match=r"step 1 \('double'\) failed: .*unlucky"):
        await runtime.infer(_request("pipeline", 12))
    with pytest.raises(ModelExecutionError, match=r"step 0 \('fast'\) failed: .*negative"):
        await runtime.infer(_request("pipeline", -1))
    assert _stats(runtime, "double").failures["BACKEND"] == 1
    assert _stats(runtime, "fast").failures["BACKEND"] == 1
    assert (await runtime.infer(_request("pipeline", 0))).outputs[0].data[0, 0] == 2


async def test_a_cancelled_wait_for_an_instance_gives_it_back() -> None:
    """The pool's idle instances and waiters (not an asyncio.Queue any more)."""
    from fnserve.scheduling.pool import InstancePool
    from fnserve.stats import ModelStats as Stats

    instance = object()
    pool = InstancePool("m", [instance], Stats("m", "1"), False, lambda i: instance)  # type: ignore[list-item,arg-type,return-value]
    assert await pool.acquire() is instance
    waiting = asyncio.ensure_future(pool.acquire())
    await asyncio.sleep(0)
    pool.release(instance)  # handed to the waiter...
    waiting.cancel()  # ...which gives up before it runs again
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert pool.try_acquire() is instance  # back in the pool, not lost
    assert pool.try_acquire() is None
    pool.release(instance)
    second = asyncio.ensure_future(pool.acquire())
    assert await second is instance
