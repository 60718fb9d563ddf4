"""BLS in-process: Triton model.py files calling models through `pb_utils.InferenceRequest`,
served by a `Runtime` (the callee's own scheduler, errors as responses, misuse named)."""

from __future__ import annotations

import asyncio
import json
import textwrap
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fnserve.backends.base import ModelFileSpec
from fnserve.backends.registry import factory_for
from fnserve.calls import CURRENT_CLIENT, ModelClient
from fnserve.config.model_config import InstanceGroup, ModelConfig, Tensor
from fnserve.config.server import ModelDefaults
from fnserve.errors import ModelExecutionError
from fnserve.model import InstanceContext
from fnserve.repository.source import ModelSource
from fnserve.runtime import Runtime
from fnserve.types import InferInput, InferRequest, InferResponse
from tests.backends.triton_bls_models import write_model

# The callee: Y = 2X, Z = X + 1, PARAMS = the parameters it was called with; refuses X < 0.
DOUBLE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:  # requests of a batch come one by one, as in Triton
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if (x < 0).any():
                raise ValueError(f"X must be >= 0, got {x.min()}")
            params = np.full(x.shape, request.parameters().encode(), object)
            outputs = [
                pb_utils.Tensor("Y", x * 2),
                pb_utils.Tensor("Z", x + 1),
                pb_utils.Tensor("PARAMS", params),
            ]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""
# The callers call the model their request's parameters name (`target`, default "double"),
# asking for `outputs` (comma-separated; none: all), and answer what came back: Y (or -1),
# the output NAMES, the callee's PARAMS, or the error with its code.
CALLER_COMMON = """
import asyncio
import json

import numpy as np
import triton_python_backend_utils as pb_utils


def bls_request(request):
    options = json.loads(request.parameters())
    return options, pb_utils.InferenceRequest(
        model_name=options.get("target", "double"),
        requested_output_names=[n for n in options.get("outputs", "").split(",") if n],
        inputs=[pb_utils.get_input_tensor_by_name(request, "X")],
        model_version=options.get("version", -1),
        timeout=options.get("timeout", 0),
        parameters={"tag": "bls"},
    )


def answer(response, rows):
    if response.has_error():
        error = response.error()
        text = f"code {error.code()}: {error.message()}"
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(text))
    names = ",".join(t.name() for t in response.output_tensors()).encode()
    y = pb_utils.get_output_tensor_by_name(response, "Y")
    params = pb_utils.get_output_tensor_by_name(response, "PARAMS")
    outputs = [
        pb_utils.Tensor("Y", np.full((rows, 1), -1, np.float32) if y is None else y.as_numpy()),
        pb_utils.Tensor("NAMES", np.full((rows, 1), names, object)),
        pb_utils.Tensor(
            "PARAMS", np.full((rows, 1), b"", object) if params is None else params.as_numpy()
        ),
    ]
    return pb_utils.InferenceResponse(outputs)


async def both(call):
    first, second = await asyncio.gather(call.async_exec(), call.async_exec())
    if first.has_error() != second.has_error():
        raise AssertionError("two equal calls disagree")
    return first
"""
CALLER = (
    CALLER_COMMON
    + """
class TritonPythonModel:
    def execute(self, requests):
        (request,) = requests
        options, call = bls_request(request)
        via = options.get("via", "exec")
        if via == "exec":
            response = call.exec()
        elif via == "asyncio.run":  # a sync execute running a loop of its own
            response = asyncio.run(both(call))
        else:
            response = call.async_exec()
        return [answer(response, len(request.inputs()[0].as_numpy()))]
"""
)
ACALLER = (
    CALLER_COMMON
    + """
class TritonPythonModel:
    async def execute(self, requests):
        (request,) = requests
        options, call = bls_request(request)
        response = call.exec() if options.get("via") == "exec" else await both(call)
        return [answer(response, len(request.inputs()[0].as_numpy()))]
"""
)
X = 'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]'
DOUBLE_CONFIG = f"""backend: "python"
max_batch_size: 16
{X}
output [
  {{ name: "Y" data_type: TYPE_FP32 dims: [ 1 ] }},
  {{ name: "Z" data_type: TYPE_FP32 dims: [ 1 ] }},
  {{ name: "PARAMS" data_type: TYPE_STRING dims: [ 1 ] }}
]
dynamic_batching {{ }}
"""
CALLER_CONFIG = f"""backend: "python"
max_batch_size: 16
{X}
output [
  {{ name: "Y" data_type: TYPE_FP32 dims: [ 1 ] }},
  {{ name: "NAMES" data_type: TYPE_STRING dims: [ 1 ] }},
  {{ name: "PARAMS" data_type: TYPE_STRING dims: [ 1 ] }}
]
"""
CALLERS = ["caller", "acaller"]


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bls_calls")
    write_model(root, "double", DOUBLE_CONFIG, DOUBLE)
    write_model(root, "caller", CALLER_CONFIG, CALLER)
    write_model(root, "acaller", CALLER_CONFIG, ACALLER)
    return root


@pytest.fixture
async def runtime(repository: Path) -> AsyncIterator[Runtime]:
    found = ModelSource([repository]).scan()
    assert not found.failures
    served = Runtime(found.definitions)
    await served.start()
    yield served
    await served.aclose()


async def _call(runtime: Runtime, model: str, x: list[float], **options: Any) -> dict[str, Any]:
    data = np.array(x, np.float32).reshape(-1, 1)
    request = InferRequest(model, (InferInput("X", "FP32", data),), parameters=options)
    response: InferResponse = await runtime.infer(request)
    return {o.name: o.data for o in response.outputs}


@pytest.mark.parametrize("model", CALLERS)
async def test_a_call_returns_every_output_of_the_callee(runtime: Runtime, model: str) -> None:
    out = await _call(runtime, model, [1.0, 2.5])
    assert out["Y"].tolist() == [[2.0], [5.0]]
    assert out["NAMES"][0, 0] == b"Y,Z,PARAMS"


@pytest.mark.parametrize("model", CALLERS)
async def test_only_the_requested_outputs_come_back(runtime: Runtime, model: str) -> None:
    out = await _call(runtime, model, [1.0], outputs="Z")
    assert out["NAMES"][0, 0] == b"Z"
    assert out["Y"].tolist() == [[-1.0]]  # not asked for, so not there


@pytest.mark.parametrize("model", CALLERS)
async def test_parameters_reach_the_callee_and_timeout_is_the_queue_timeout(
    runtime: Runtime, model: str
) -> None:
    out = await _call(runtime, model, [1.0], outputs="PARAMS", timeout=5_000_000, version=1)
    assert json.loads(out["PARAMS"][0, 0]) == {"tag": "bls"}  # timeout is not the model's


async def test_a_sync_execute_may_run_async_exec_in_its_own_loop(runtime: Runtime) -> None:
    out = await _call(runtime, "caller", [3.0], via="asyncio.run")
    assert out["Y"].tolist() == [[6.0]]


@pytest.mark.parametrize("model", CALLERS)
@pytest.mark.parametrize(
    ("options", "x", "error"),
    [
        ({}, -1.0, "code 1: call to model 'double' failed: model 'double' raised ValueError: "
                   "X must be >= 0, got -1.0"),
        ({"target": "nowhere"}, 1.0, "code 2: call to model 'nowhere' failed: unknown model"),
        ({"version": 7}, 1.0, "code 2: call to model 'double' failed: unknown version 7 of "
                              "model 'double'"),
        ({"outputs": "NOPE"}, 1.0, "code 3: call to model 'double' failed: unexpected "
                                   "inference output 'NOPE' for model 'double'"),
    ],
)  # fmt: skip
async def test_the_callees_error_is_a_response_with_its_code(
    runtime: Runtime, model: str, options: dict[str, Any], x: float, error: str
) -> None:
    with pytest.raises(ModelExecutionError) as info:
        await _call(runtime, model, [x], **options)
    assert str(info.value).startswith(error)  # the caller's response error, as it wrote it


@pytest.mark.parametrize("model", CALLERS)
async def test_a_model_calling_itself_gets_an_error_at_once(runtime: Runtime, model: str) -> None:
    with pytest.raises(ModelExecutionError) as info:
        await asyncio.wait_for(_call(runtime, model, [1.0], target=model), 10)
    assert f"model call cycle: {model} -> {model}" in str(info.value)


@pytest.mark.parametrize(
    ("model", "via", "error"),
    [
        ("caller", "async_exec", "pb_utils.InferenceRequest.async_exec: it needs a running "
                                 "event loop: make `execute` an `async def`"),
        ("acaller", "exec", "pb_utils.InferenceRequest.exec: it would block the server's event "
                            "loop; in an `async def execute` use `await request.async_exec()`"),
    ],
)  # fmt: skip
async def test_a_call_where_it_cannot_run_says_what_to_use(
    runtime: Runtime, model: str, via: str, error: str
) -> None:
    with pytest.raises(ModelExecutionError, match="raised TritonModelException") as info:
        await _call(runtime, model, [1.0], via=via)
    assert error in str(info.value)


# Cancellation, at the backend with a fake runtime whose calls never answer.

PARKED = """
import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        x = pb_utils.get_input_tensor_by_name(requests[0], "X")
        call = pb_utils.InferenceRequest(model_name="slow", requested_output_names=[], inputs=[x])
        self.calls = [call.async_exec(), call.async_exec()]
        if self.mode == "awaited":
            await asyncio.gather(*self.calls)
        await asyncio.sleep(3600)  # "left running": started, never awaited
"""


class _Parked:
    """A `ModelCaller` whose calls wait until cancelled, and say so."""

    def __init__(self) -> None:
        self.started = 0
        self.cancelled = 0
        self.all_started = asyncio.Event()

    def call_now(self, *args: object) -> None:
        return None  # never at once: every call parks in `infer`

    async def infer(self, request: InferRequest) -> InferResponse:
        self.started += 1
        if self.started == 2:
            self.all_started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        raise AssertionError("unreachable")

    async def infer_outputs(self, request: InferRequest) -> tuple[dict[str, Any], dict[str, str]]:
        raise AssertionError("BLS calls `infer`")


@pytest.mark.parametrize("mode", ["awaited", "left running"])
async def test_cancelling_an_async_execute_cancels_its_calls(tmp_path: Path, mode: str) -> None:
    path = tmp_path / "parked" / "1" / "model.py"
    path.parent.mkdir(parents=True)
    path.write_text(textwrap.dedent(PARKED))
    config = ModelConfig(
        name="parked",
        inputs=[Tensor("X", "FP32", [1])],
        outputs=[Tensor("Y", "FP32", [1])],
        max_batch_size=4,
        backend="python",
        instance_group=(InstanceGroup(kind="KIND_CPU"),),
    )
    context = InstanceContext("parked", 1, 0, "KIND_CPU", "cpu", {})
    backend: Any = factory_for(ModelFileSpec(config, path)).create(context)
    backend.model.mode = mode
    parked = _Parked()
    token = CURRENT_CLIENT.set(ModelClient(parked, asyncio.get_running_loop()))
    try:
        execute = asyncio.ensure_future(backend.aexecute({"X": np.ones((1, 1), np.float32)}, [{}]))
        await asyncio.wait_for(parked.all_started.wait(), 10)
        execute.cancel()
        with pytest.raises(asyncio.CancelledError):
            await execute
        await asyncio.wait_for(asyncio.gather(*backend.model.calls, return_exceptions=True), 10)
    finally:
        CURRENT_CLIENT.reset(token)
    assert parked.cancelled == 2
    assert all(call.cancelled() for call in backend.model.calls)


# Short, so it runs inline on the loop's thread after a streak, until an input >= 100 makes it
# call `double` through BLS `exec()`; answers Y and the thread it ran on.
SOMETIMES_CALLS = """
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if (x >= 100).any():
                call = pb_utils.InferenceRequest(
                    model_name="double", requested_output_names=["Y"],
                    inputs=[pb_utils.Tensor("X", x)],
                )
                y = pb_utils.get_output_tensor_by_name(call.exec(), "Y").as_numpy()
            else:
                y = x + 4
            thread = np.full(x.shape, threading.current_thread().name.encode(), object)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", y), pb_utils.Tensor("THREAD", thread)]
            ))
        return responses
"""
SOMETIMES_CALLS_CONFIG = f"""backend: "python"
max_batch_size: 16
{X}
output [
  {{ name: "Y" data_type: TYPE_FP32 dims: [ 1 ] }},
  {{ name: "THREAD" data_type: TYPE_STRING dims: [ 1 ] }}
]
"""


async def test_an_inline_model_calling_through_bls_moves_to_its_thread(tmp_path: Path) -> None:
    write_model(tmp_path, "double", DOUBLE_CONFIG, DOUBLE)
    write_model(tmp_path, "sometimes_calls", SOMETIMES_CALLS_CONFIG, SOMETIMES_CALLS)
    found = ModelSource([tmp_path]).scan()
    assert not found.failures
    served = Runtime(found.definitions)
    await served.start(ModelDefaults(inline_us=100_000.0))  # generous: CI machines are slow
    loop_thread = threading.current_thread().name.encode()

    async def call(x: float) -> tuple[float, bytes]:
        out = await _call(served, "sometimes_calls", [x])
        return float(out["Y"][0, 0]), out["THREAD"][0, 0]

    try:
        for i in range(12):
            assert (await call(i))[0] == i + 4
        assert (await call(1))[1] == loop_thread  # inline after the streak
        # Inline, `exec()` cannot wait on the loop it runs on: the request reruns on the
        # model's thread, where the call is made, and the model stays there.
        assert await call(100) == (200.0, b"sometimes_calls-0")
        for i in range(12):
            assert (await call(i))[1] != loop_thread
    finally:
        await served.aclose()
