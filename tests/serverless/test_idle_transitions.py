"""Scale to zero meeting the rest of the lifecycle, in-process: unload, load, a failing cold
start, a request cancelled while it waits for a cold start."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from fnserve import Tensor, model
from fnserve.errors import ModelNotFoundError, UnavailableError
from fnserve.repository.handle import ModelHandle
from fnserve.runtime import Runtime
from fnserve.types import InferInput, InferRequest, ModelState

BUILDS: list[str] = []


class Flaky:
    """Builds fine until `BUILDS` holds "break"; then its constructor raises."""

    def __init__(self) -> None:
        if "break" in BUILDS:
            raise RuntimeError("the weights are gone")
        BUILDS.append("built")

    def __call__(self, X: np.ndarray) -> np.ndarray:
        return X * 2


flaky = model(
    name="flaky",
    inputs=[Tensor("X", "FP32", [1])],
    outputs=[Tensor("Y", "FP32", [1])],
    idle_timeout_s=0.1,
)(Flaky)


def _request(value: float = 1.0) -> InferRequest:
    return InferRequest("flaky", (InferInput("X", "FP32", np.array([value], np.float32)),))


async def _idle(runtime: Runtime) -> ModelHandle:
    handle = next(runtime.registry.handles())
    for _ in range(100):
        if handle.state is ModelState.IDLE:
            return handle
        await asyncio.sleep(0.05)
    raise AssertionError(f"flaky did not scale to zero: {handle}")


@pytest.fixture
async def runtime() -> Runtime:
    BUILDS.clear()
    running = Runtime([flaky])
    await running.start()
    return running


async def test_unloading_an_idle_model_makes_it_unavailable(runtime: Runtime) -> None:
    await _idle(runtime)
    await runtime.unload_model("flaky")
    assert runtime.repository_index()[0].state is ModelState.UNLOADED
    with pytest.raises(ModelNotFoundError):
        await runtime.infer(_request())
    await runtime.aclose()


async def test_a_repository_load_brings_an_idle_model_back(runtime: Runtime) -> None:
    await _idle(runtime)
    await runtime.load_model("flaky")
    assert runtime.repository_index()[0].state is ModelState.READY
    assert BUILDS == ["built", "built"]
    await runtime.aclose()


async def test_a_failing_cold_start_fails_the_model_with_the_reason(runtime: Runtime) -> None:
    await _idle(runtime)
    BUILDS.append("break")
    with pytest.raises(UnavailableError, match="failed to cold-start: .*the weights are gone"):
        await runtime.infer(_request())
    entry = runtime.repository_index()[0]
    assert entry.state is ModelState.FAILED
    assert "cold start failed" in entry.reason
    await runtime.aclose()


async def test_a_cancelled_waiter_does_not_cancel_the_cold_start(runtime: Runtime) -> None:
    handle = await _idle(runtime)
    first = asyncio.ensure_future(runtime.infer(_request(1.0)))
    await asyncio.sleep(0)
    first.cancel()  # its client went away while the model was coming back
    with pytest.raises(asyncio.CancelledError):
        await first
    response = await runtime.infer(_request(3.0))
    assert response.outputs[0].data.tolist() == [6.0]
    assert handle.lifecycle.cold_starts == 1  # the second request found it coming back
    assert BUILDS == ["built", "built"]
    await runtime.aclose()
