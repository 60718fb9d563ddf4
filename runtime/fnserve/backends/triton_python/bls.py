"""BLS (business logic scripting): what `pb_utils.InferenceRequest.exec()` and `async_exec()`
run, through `fnserve.calls` (the callee's own scheduler, so calls batch with everyone
else's requests; the call chain, so a cycle fails at once instead of waiting for itself).

`exec()` blocks the thread of a sync `execute` until the callee answers. `async_exec()` returns
an asyncio future that is already running: inside an `async def execute` (on the server's
event loop) a task that belongs to that execute, cancelled with it when it fails or is
cancelled; inside a sync `execute` that runs its own loop (`asyncio.run`), the blocking call
on an executor thread, as Triton runs every `async_exec`.

The callee's outputs, or the `FnserveError` its clients would get, go to `respond`, which
builds the `pb_utils.InferenceResponse` (so this module needs nothing from pb_utils). A call
made where it cannot run raises `UsageError`, saying where it can.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from fnserve.calls import ModelClient, current_client
from fnserve.errors import FnserveError
from fnserve.types import Array, ParamValue

R = TypeVar("R")
Outcome = dict[str, Array] | FnserveError
Respond = Callable[[Outcome], R]


class UsageError(Exception):
    """A BLS call made where fnserve cannot run it; the message says where it can."""


@dataclass(frozen=True, slots=True)
class Call:
    """One BLS request.

    Args:
        model: the model to call.
        inputs: its input arrays by name.
        version: a version number, or "" for the latest ready one.
        outputs: the outputs wanted, or None for all of them.
        parameters: request parameters, as a client sends them (`timeout` included).
    """

    model: str
    inputs: Mapping[str, Array]
    version: str = ""
    outputs: tuple[str, ...] | None = None
    parameters: Mapping[str, ParamValue] = field(default_factory=dict)


@dataclass(eq=False, slots=True)
class _Scope:
    """The `async def execute` running on `loop`, and the calls it started."""

    loop: asyncio.AbstractEventLoop
    tasks: set[asyncio.Task[Any]]


_SCOPE: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar(
    "fnserve_bls_scope", default=None
)


@contextlib.contextmanager
def async_execute_scope() -> Iterator[None]:
    """Around an `async def execute`: the calls it starts with `async_exec()` are its own.

    When it fails or is cancelled, those still running are cancelled (awaited ones already
    are, through the await; the others have no one left to read them), and their requests
    leave the callees' queues.
    """
    scope = _Scope(asyncio.get_running_loop(), set())
    token = _SCOPE.set(scope)
    try:
        yield
    except BaseException:
        for task in list(scope.tasks):
            task.cancel()
        raise
    finally:
        _SCOPE.reset(token)


def run(call: Call, respond: Respond[R]) -> R:
    """`exec()`: run `call`, blocking this thread until the callee answers.

    Raises:
        UsageError: no `execute` is running, or this is its event loop (an async execute).
    """
    client = _client()
    scope = _SCOPE.get()
    if scope is not None and _running_loop() is scope.loop:
        raise UsageError(
            "it would block the server's event loop; in an `async def execute` use "
            "`await request.async_exec()`"
        )
    return _settle(client, call, respond)


def start(call: Call, respond: Respond[R]) -> asyncio.Future[R]:
    """`async_exec()`: start `call` now; the future resolves to `respond(outcome)`.

    Raises:
        UsageError: no `execute` is running, or no event loop runs on this thread.
    """
    client = _client()
    loop = _running_loop()
    if loop is None:
        raise UsageError(
            "it needs a running event loop: make `execute` an `async def` (or use exec())"
        )
    scope = _SCOPE.get()
    if scope is None or scope.loop is not loop:  # a sync execute running its own loop
        job = functools.partial(_settle, client, call, respond)
        return loop.run_in_executor(None, functools.partial(contextvars.copy_context().run, job))
    task = loop.create_task(_asettle(client, call, respond))
    scope.tasks.add(task)
    task.add_done_callback(scope.tasks.discard)
    return task


def host_array(array: Array) -> Array:
    """An input array as a client's would arrive: fixed-width bytes become BYTES' object
    array of `bytes`."""
    return array.astype(np.object_) if array.dtype.kind == "S" else array


def parameters_of(text: str, timeout_us: int) -> dict[str, ParamValue]:
    """A call's request parameters from `InferenceRequest.parameters()` JSON text, with
    `timeout` (microseconds in the callee's queue, Triton's request timeout) when set.

    Raises:
        UsageError: the text is not a JSON object of str, number or bool values.
    """
    try:
        loaded: Any = json.loads(text)
    except json.JSONDecodeError:
        loaded = None
    if not isinstance(loaded, dict) or not all(
        isinstance(v, bool | int | float | str) for v in loaded.values()
    ):
        raise UsageError(
            f"parameters must map names to str, int, float or bool values, got {text[:80]}"
        )
    parameters: dict[str, ParamValue] = dict(loaded)
    if timeout_us:
        parameters["timeout"] = timeout_us
    return parameters


def _client() -> ModelClient:
    client = current_client()
    if client is None:
        raise UsageError(
            "BLS is only supported during the 'execute' function (on the thread or event "
            "loop task that runs it)"
        )
    return client


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _settle(client: ModelClient, call: Call, respond: Respond[R]) -> R:
    try:
        outputs = client.infer(call.model, call.inputs, call.version, call.outputs, call.parameters)
    except FnserveError as exc:
        return respond(exc)
    return respond(outputs)


async def _asettle(client: ModelClient, call: Call, respond: Respond[R]) -> R:
    try:
        outputs = await client.ainfer(
            call.model, call.inputs, call.version, call.outputs, None, call.parameters
        )
    except FnserveError as exc:
        return respond(exc)
    return respond(outputs)
