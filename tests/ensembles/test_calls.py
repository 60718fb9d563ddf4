"""Models calling models in-process: async and sync callers, errors, cycles, batching."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import pytest

import fnserve
from fnserve import DynamicBatching, Tensor, model
from fnserve.errors import InvalidInputError, ModelExecutionError, ModelNotFoundError
from fnserve.runtime import Runtime
from fnserve.types import InferInput, InferRequest

X = Tensor("X", "FP32", [1])
Y = Tensor("Y", "FP32", [1])
SEEN: list[int] = []


@model(inputs=[X], outputs=[Y], max_batch_size=64, dynamic_batching=DynamicBatching())
async def callee(X: np.ndarray) -> np.ndarray:
    SEEN.append(len(X))
    await asyncio.sleep(0.002)
    return X * 10


@model(inputs=[X], outputs=[Y], max_batch_size=64, dynamic_batching=DynamicBatching())
async def async_caller(X: np.ndarray) -> np.ndarray:
    out = await fnserve.infer("callee", {"X": X})
    result: np.ndarray = out["Y"] + 1
    return result


@model(inputs=[X], outputs=[Y], max_batch_size=64)
def sync_caller(X: np.ndarray) -> np.ndarray:
    result: np.ndarray = fnserve.infer_blocking("callee", {"X": X})["Y"] + 2
    return result


@model(inputs=[X], outputs=[Y], max_batch_size=64)
async def to_nowhere(X: np.ndarray) -> np.ndarray:
    result: np.ndarray = (await fnserve.infer("nowhere", {"X": X}))["Y"]
    return result


@model(inputs=[X], outputs=[Y], max_batch_size=64)
async def ping(X: np.ndarray) -> np.ndarray:
    result: np.ndarray = (await fnserve.infer("pong", {"X": X}))["Y"]
    return result


@model(inputs=[X], outputs=[Y], max_batch_size=64)
async def pong(X: np.ndarray) -> np.ndarray:
    result: np.ndarray = (await fnserve.infer("ping", {"X": X}))["Y"]
    return result


def _request(name: str, x: float) -> InferRequest:
    return InferRequest(name, (InferInput("X", "FP32", np.array([[x]], np.float32)),))


@pytest.fixture
async def runtime() -> AsyncIterator[Runtime]:
    served = Runtime([callee, async_caller, sync_caller, to_nowhere, ping, pong])
    await served.start()
    yield served
    await served.aclose()


async def test_async_and_sync_callers_get_the_callees_answer_batched(runtime: Runtime) -> None:
    SEEN.clear()
    xs = [float(i) for i in range(100)]
    answers = await asyncio.gather(
        *(runtime.infer(_request("async_caller", x)) for x in xs),
        *(runtime.infer(_request("sync_caller", x)) for x in xs),
    )
    got = [float(a.outputs[0].data[0, 0]) for a in answers]
    assert got == [x * 10 + 1 for x in xs] + [x * 10 + 2 for x in xs]
    (stats,) = runtime.statistics("callee")
    assert stats.inference_count == 200
    assert stats.execution_count < 200  # the callers' calls batched together
    assert max(SEEN) > 1


async def test_the_callees_errors_reach_the_caller(runtime: Runtime) -> None:
    with pytest.raises(ModelNotFoundError, match="call to model 'nowhere' failed: unknown model"):
        await runtime.infer(_request("to_nowhere", 1.0))


async def test_a_cycle_fails_at_once_naming_it(runtime: Runtime) -> None:
    with pytest.raises(ModelExecutionError, match="model call cycle: ping -> pong -> ping"):
        await asyncio.wait_for(runtime.infer(_request("ping", 1.0)), 5)


async def test_outside_a_model_there_is_nothing_to_call() -> None:
    with pytest.raises(InvalidInputError, match="from inside a model"):
        await fnserve.infer("callee", {"X": np.zeros((1, 1), np.float32)})
