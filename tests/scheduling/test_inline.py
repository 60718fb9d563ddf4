"""Inline execution (scheduling/inline.py): short sync models run on the event loop's thread
after a streak of short batches; long ones, models with an execution timeout, and models that
call other models synchronously stay on (or go back to) their own thread, answering the same."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator

import numpy as np
import pytest

import fnserve
from fnserve import DynamicBatching, Tensor, model
from fnserve.config.server import ModelDefaults
from fnserve.errors import ModelExecutionError
from fnserve.runtime import Runtime
from fnserve.scheduling.inline import InlinePolicy
from fnserve.types import InferInput, InferRequest

X = Tensor("X", "FP32", [1])
Y = Tensor("Y", "FP32", [1])
THREADS: dict[str, list[str]] = {}


def _ran(name: str) -> None:
    THREADS.setdefault(name, []).append(threading.current_thread().name)


@model(inputs=[X], outputs=[Y], max_batch_size=8)
def short(X: np.ndarray) -> np.ndarray:
    _ran("short")
    if X[0, 0] < 0:
        raise ValueError("negative")
    return X + 1


@model(inputs=[X], outputs=[Y], max_batch_size=8, dynamic_batching=DynamicBatching())
def batched(X: np.ndarray) -> np.ndarray:
    _ran("batched")
    return X + 6


@model(inputs=[X], outputs=[Y], max_batch_size=8)
def slow(X: np.ndarray) -> np.ndarray:
    _ran("slow")
    time.sleep(0.002)
    return X + 2


@model(inputs=[X], outputs=[Y], max_batch_size=8, execution_timeout_s=5.0)
def bounded(X: np.ndarray) -> np.ndarray:
    _ran("bounded")
    return X + 3


@model(inputs=[X], outputs=[Y], max_batch_size=8)
def sometimes_calls(X: np.ndarray) -> np.ndarray:
    """Short, until an input asks it to call another model synchronously."""
    _ran("sometimes_calls")
    if X[0, 0] >= 100:
        result: np.ndarray = fnserve.infer_blocking("short", {"X": X})["Y"] + 10
        return result
    return X + 4


@model(inputs=[X], outputs=[Y], max_batch_size=8, parameters={"inline_max_us": "1000"})
def opted_in(X: np.ndarray) -> np.ndarray:
    _ran("opted_in")
    return X + 5


@model(inputs=[X], outputs=[Y], max_batch_size=8, parameters={"inline_max_us": "soon"})
def misconfigured(X: np.ndarray) -> np.ndarray:
    return X


MODELS = [short, batched, slow, bounded, sometimes_calls]


def _request(name: str, x: float) -> InferRequest:
    return InferRequest(name, (InferInput("X", "FP32", np.array([[x]], np.float32)),))


async def _call(runtime: Runtime, name: str, x: float) -> float:
    return float((await runtime.infer(_request(name, x))).outputs[0].data[0, 0])


@pytest.fixture
async def runtime() -> AsyncIterator[Runtime]:
    THREADS.clear()
    served = Runtime(MODELS)
    await served.start(ModelDefaults(inline_us=1000.0))  # generous: CI machines are slow
    yield served
    await served.aclose()


async def test_a_short_model_moves_to_the_loop_thread_after_a_streak(runtime: Runtime) -> None:
    loop_thread = threading.current_thread().name
    for i in range(20):
        assert await _call(runtime, "short", i) == i + 1
    ran = THREADS["short"]
    assert ran[0] != loop_thread  # the first batches run on the instance's thread
    assert ran[-5:] == [loop_thread] * 5  # then inline


async def test_concurrent_requests_to_an_inline_model_each_get_their_answer(
    runtime: Runtime,
) -> None:
    for i in range(12):
        await _call(runtime, "batched", i)
    assert THREADS["batched"][-1] == threading.current_thread().name
    answers = await asyncio.gather(*(_call(runtime, "batched", i) for i in range(200)))
    assert answers == [i + 6.0 for i in range(200)]
    (record,) = [s for s in runtime.version_stats() if s.name == "batched"]
    # The first request found the queue empty and ran at once; the rest queued behind it and
    # were batched (at most 8 rows each).
    assert record.execution_count < record.inference_count


async def test_errors_raised_inline_are_the_models_errors(runtime: Runtime) -> None:
    for i in range(12):
        await _call(runtime, "short", i)
    assert THREADS["short"][-1] == threading.current_thread().name
    with pytest.raises(ModelExecutionError, match="negative"):
        await _call(runtime, "short", -1)
    assert await _call(runtime, "short", 1) == 2.0  # and it keeps serving


async def test_long_and_bounded_models_stay_on_their_threads(runtime: Runtime) -> None:
    loop_thread = threading.current_thread().name
    for i in range(15):
        assert await _call(runtime, "slow", i) == i + 2
        assert await _call(runtime, "bounded", i) == i + 3
    assert loop_thread not in THREADS["slow"]
    assert loop_thread not in THREADS["bounded"]  # a timeout needs an interruptible thread


async def test_a_synchronous_call_moves_the_model_back_to_its_thread(runtime: Runtime) -> None:
    loop_thread = threading.current_thread().name
    for i in range(12):
        assert await _call(runtime, "sometimes_calls", i) == i + 4
    assert THREADS["sometimes_calls"][-1] == loop_thread
    # Inline it cannot block on the loop it runs on: the batch reruns on its thread.
    assert await _call(runtime, "sometimes_calls", 100) == 111.0
    ran = THREADS["sometimes_calls"]
    assert ran[-2:] == [loop_thread, "sometimes_calls-0"]
    for i in range(12):  # and stays there
        assert await _call(runtime, "sometimes_calls", i) == i + 4
    assert loop_thread not in THREADS["sometimes_calls"][-12:]


async def test_inline_zero_keeps_every_model_on_its_thread() -> None:
    THREADS.clear()
    served = Runtime([short])
    await served.start(ModelDefaults(inline_us=0))
    try:
        for i in range(20):
            await _call(served, "short", i)
    finally:
        await served.aclose()
    assert threading.current_thread().name not in THREADS["short"]


async def test_a_model_opts_in_with_its_parameter() -> None:
    THREADS.clear()
    served = Runtime([short, opted_in, misconfigured])
    await served.start()  # the server's default: off
    try:
        for i in range(20):
            assert await _call(served, "short", i) == i + 1
            assert await _call(served, "opted_in", i) == i + 5
        index = {e.name: e for e in served.repository_index()}
    finally:
        await served.aclose()
    loop_thread = threading.current_thread().name
    assert loop_thread not in THREADS["short"]
    assert THREADS["opted_in"][-5:] == [loop_thread] * 5
    assert index["misconfigured"].state.value == "FAILED"
    assert "parameter inline_max_us must be a number" in index["misconfigured"].reason


def test_the_policy_needs_a_streak_and_one_long_batch_resets_it() -> None:
    policy = InlinePolicy(limit_ns=1000, streak=3)
    for _ in range(2):
        policy.observe(10)
    assert not policy.allows()
    policy.observe(10)
    assert policy.allows()
    policy.observe(5000)
    assert not policy.allows()
    for _ in range(3):
        policy.observe(10)
    assert policy.allows()
    policy.disable()
    assert not policy.allows()
    assert not InlinePolicy(limit_ns=0).allows()
