"""Lifecycle races on the model handles: whatever interleaves, the final state is the one last
asked for, every backend built is unloaded exactly once, and no request hangs."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fnserve import model
from fnserve.errors import ModelNotFoundError, ModelNotReadyError, UnavailableError
from fnserve.repository.source import ModelSource
from fnserve.runtime import Runtime
from fnserve.types import InferInput, InferRequest, ModelState
from tests.repository import counting
from tests.repository.counting import NO_HANG_S, Counted
from tests.tensor_io import TensorIO

IO: TensorIO = {"inputs": [counting.X], "outputs": [counting.Y]}


def _request(name: str, value: float = 1.0) -> InferRequest:
    return InferRequest(name, (InferInput("X", "FP32", np.array([value], np.float32)),))


def _counted(name: str) -> Runtime:
    return Runtime([model(name=name, **IO)(Counted)])


async def _answered(requests: Sequence[asyncio.Task[Any]]) -> list[object]:
    """Every request's outcome; fails the test if one is still waiting after NO_HANG_S."""
    done, pending = await asyncio.wait(requests, timeout=NO_HANG_S)
    assert not pending, f"{len(pending)} request(s) hung"
    return [t.exception() or t.result() for t in requests]


def _state(runtime: Runtime, name: str) -> ModelState:
    (handle,) = runtime.registry.versions(name)
    return handle.state


async def test_load_during_unload_ends_ready_and_unloads_the_old_backends_once() -> None:
    runtime = _counted("m")
    await runtime.start()
    Counted.gate.clear()
    running = [asyncio.ensure_future(runtime.infer(_request("m"))) for _ in range(3)]
    await asyncio.sleep(0.05)
    unloading = asyncio.ensure_future(runtime.unload_model("m", drain_timeout_s=5))
    await asyncio.sleep(0.05)
    assert _state(runtime, "m") is ModelState.DRAINING
    loading = asyncio.ensure_future(runtime.load_model("m"))
    await asyncio.sleep(0.05)
    Counted.gate.set()
    await asyncio.gather(unloading, loading)
    outcomes = await _answered(running)
    assert all(not isinstance(o, BaseException) for o in outcomes)  # drained, not failed
    assert _state(runtime, "m") is ModelState.READY  # the last thing asked for
    assert (await runtime.infer(_request("m", 4.0))).outputs[0].data[0] == 4.0
    assert (Counted.built["m"], Counted.closed["m"]) == (2, 1)
    await runtime.aclose()
    assert Counted.closed == Counted.built


async def test_two_concurrent_loads_both_return_ready_and_build_once() -> None:
    Counted.build_s = 0.3
    runtime = _counted("m")

    async def load_then_ready() -> bool:
        await runtime.load_model("m")
        return runtime.model_ready("m")

    assert list(await asyncio.gather(load_then_ready(), load_then_ready())) == [True, True]
    assert Counted.built["m"] == 1
    await runtime.aclose()
    assert Counted.closed == Counted.built == Counter({"m": 1})


async def test_unload_during_a_burst_answers_every_request() -> None:
    runtime = _counted("m")
    await runtime.start()
    Counted.gate.clear()
    burst = [asyncio.ensure_future(runtime.infer(_request("m", i))) for i in range(200)]
    await asyncio.sleep(0.05)
    unloading = asyncio.ensure_future(runtime.unload_model("m", drain_timeout_s=0.3))
    await asyncio.sleep(0.1)
    late = [asyncio.ensure_future(runtime.infer(_request("m"))) for _ in range(20)]
    Counted.gate.set()
    await unloading
    outcomes = await _answered(burst + late)
    for outcome in outcomes:  # served, or refused with a clear 503-class error
        if isinstance(outcome, BaseException):
            refused = UnavailableError | ModelNotFoundError | ModelNotReadyError
            assert isinstance(outcome, refused), repr(outcome)
    assert _state(runtime, "m") is ModelState.UNLOADED
    await runtime.aclose()
    assert Counted.closed == Counted.built


async def test_interleaved_loads_and_unloads_end_in_the_last_asked_state() -> None:
    Counted.build_s = 0.05
    runtime = _counted("m")
    await runtime.start()
    for last in ("load", "unload"):
        ops = ["unload", "load", "unload", "load", "load", "unload", "load"]
        ops.append(last)
        calls = {"load": runtime.load_model, "unload": runtime.unload_model}
        await asyncio.gather(*(calls[op]("m") for op in ops))
        expected = ModelState.READY if last == "load" else ModelState.UNLOADED
        assert _state(runtime, "m") is expected
    await runtime.aclose()
    assert Counted.closed == Counted.built
    assert Counted.built["m"] >= 4


MODEL_FILE = """
import time
import numpy as np
from fnserve import model
from tests.repository import counting
from tests.repository.counting import NO_HANG_S, Counted

@model(name="edited", inputs=[counting.X], outputs=[counting.Y])
class Edited:
    def __init__(self):
        time.sleep({build_s})
        counting.BUILT["{tag}"] += 1

    def infer(self, X):
        return X + {add}

    def close(self):
        counting.CLOSED["{tag}"] += 1
"""


async def test_reload_during_load_serves_the_code_asked_for_last(tmp_path: Path) -> None:
    counting.BUILT.clear()
    counting.CLOSED.clear()
    file = tmp_path / "edited.py"
    file.write_text(MODEL_FILE.format(build_s=0.5, tag="v1", add=1))
    source = ModelSource([tmp_path])
    found = source.scan()
    runtime = Runtime(found.definitions, source, found.failures)
    first = asyncio.ensure_future(runtime.load_model("edited"))
    await asyncio.sleep(0.1)  # v1 is building
    file.write_text(MODEL_FILE.format(build_s=0.1, tag="v2", add=2))
    second = asyncio.ensure_future(runtime.load_model("edited"))
    await asyncio.gather(first, second)
    response = await runtime.infer(_request("edited", 1.0))
    assert response.outputs[0].data[0] == 3.0  # v2's code
    assert counting.BUILT == Counter({"v1": 1, "v2": 1})
    assert counting.CLOSED == Counter({"v1": 1})  # v1 swapped out and drained
    await runtime.aclose()
    assert counting.CLOSED == counting.BUILT


async def test_reload_of_a_busy_model_fails_no_request(tmp_path: Path) -> None:
    counting.BUILT.clear()
    counting.CLOSED.clear()
    file = tmp_path / "edited.py"
    file.write_text(MODEL_FILE.format(build_s=0, tag="v1", add=1))
    source = ModelSource([tmp_path])
    found = source.scan()
    runtime = Runtime(found.definitions, source, found.failures)
    await runtime.start()
    stop = asyncio.Event()

    async def client() -> list[float]:
        seen = []
        while not stop.is_set():
            seen.append(float((await runtime.infer(_request("edited", 0.0))).outputs[0].data[0]))
        return seen

    clients = [asyncio.ensure_future(client()) for _ in range(8)]
    await asyncio.sleep(0.1)
    file.write_text(MODEL_FILE.format(build_s=0.2, tag="v2", add=2))
    await runtime.load_model("edited")
    await asyncio.sleep(0.1)
    stop.set()
    results = await asyncio.gather(*clients)  # any failed request raises here
    answers = [a for seen in results for a in seen]
    assert answers[-1] == 2.0
    assert 1.0 in answers
    assert set(answers) == {1.0, 2.0}
    await runtime.aclose()
    assert counting.CLOSED == counting.BUILT == Counter({"v1": 1, "v2": 1})
