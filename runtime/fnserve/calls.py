"""Models calling models (business logic), in-process.

Inside a model's code:

```python
@model(...)
async def router(TEXT):                       # an async model awaits
    out = await fnserve.infer("encoder", {"TEXT": TEXT})
    return out["EMBEDDING"]

@model(...)
def legacy(X):                                # a sync model (on its own thread) blocks
    return fnserve.infer_blocking("scaler", {"X": X})["Y"]
```
The call goes through the callee's own scheduler (so it batches with everyone else's
requests), arrays come back as they are (no copy), and the callee's errors arrive as the same
`FnserveError`s clients see. Every request carries the chain of models it was called through;
a call that would close a cycle (`a -> b -> a`) fails at once with an error naming the chain,
instead of deadlocking on an instance that waits for itself. Cancelling the outer request of
an async model cancels the calls it is awaiting.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Mapping, Sequence

import numpy as np

from fnserve.errors import FnserveError, InvalidInputError
from fnserve.tensors import datatype_of
from fnserve.types import Array, InferInput, InferRequest, ModelCaller, ParamValue

# The models the batch being executed was called through (with the executing model last),
# and the client of the instance executing it; set by the batch runner around each batch.
CALL_CHAIN: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "fnserve_call_chain", default=()
)
CURRENT_CLIENT: contextvars.ContextVar[ModelClient | None] = contextvars.ContextVar(
    "fnserve_model_client", default=None
)


class _InlineRun(threading.local):
    """Whether a model's batch is running inline on this thread (the event loop's, see
    `scheduling/inline.py`): a call to another model from there must move the batch to its
    own thread instead of failing. Per thread, so a model's own thread never sees the flag the
    loop's thread sets. A plain flag rather than a context variable: it is set and reset
    around every inline batch, where the ContextVar's set and reset cost more (each builds a
    new context mapping), and nothing awaits in between that would need a context."""

    active = False


INLINE_RUN = _InlineRun()


class NeedsOwnThread(BaseException):
    """A synchronous model call made from a batch run inline. A BaseException, so the model's
    own `except Exception` and the runner's error wrapping let it through to the instance,
    which reruns the batch on the model's thread."""


def current_client() -> ModelClient | None:
    """The client of the model executing on this thread or task; None outside a model.

    Raises:
        NeedsOwnThread: the model runs inline (where the calls it makes cannot wait): its
            batch moves to its own thread, where the call then runs.
    """
    if INLINE_RUN.active:
        raise NeedsOwnThread
    return CURRENT_CLIENT.get()


class ModelClient:
    """Calls models of the runtime that serves the calling model.

    Args:
        caller: the runtime.
        loop: its event loop (sync models call from their own threads).
    """

    def __init__(self, caller: ModelCaller, loop: asyncio.AbstractEventLoop) -> None:
        self._caller = caller
        self._loop = loop

    async def ainfer(
        self,
        model: str,
        inputs: Mapping[str, Array],
        version: str = "",
        outputs: Sequence[str] | None = None,
        chain: tuple[str, ...] | None = None,
        parameters: Mapping[str, ParamValue] | None = None,
    ) -> dict[str, Array]:
        """Run `model` on `inputs` (numpy arrays by input name); its outputs by name.

        `parameters` are the request's (`timeout`, `priority` and custom keys, as a client's).

        Raises:
            FnserveError: of the class the callee's clients would get (unknown model, bad
                input, its failure; ModelExecutionError for a call cycle), its message naming
                the call. Uncaught, it answers the outer request with the same status.
        """
        request = InferRequest(
            model,
            tuple(InferInput(n, datatype_of(a), np.asarray(a)) for n, a in inputs.items()),
            model_version=version,
            outputs=None if outputs is None else tuple(outputs),
            parameters={} if parameters is None else parameters,
            call_chain=CALL_CHAIN.get() if chain is None else chain,
        )
        try:
            response = await self._caller.infer(request)
        except FnserveError as exc:  # the callee's status, with the call named
            raise type(exc)(f"call to model '{model}' failed: {exc.message}") from exc
        return {o.name: o.data for o in response.outputs}

    def infer(
        self,
        model: str,
        inputs: Mapping[str, Array],
        version: str = "",
        outputs: Sequence[str] | None = None,
        parameters: Mapping[str, ParamValue] | None = None,
    ) -> dict[str, Array]:
        """`ainfer` for synchronous models: blocks their thread until the answer is there.

        Raises:
            RuntimeError: called on the event loop's own thread (an async model must await
                `ainfer`; blocking there would stop the server).
        """
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            if INLINE_RUN.active:  # a short model run inline: move it to its thread
                raise NeedsOwnThread
            raise RuntimeError(
                "infer_blocking() was called on the event loop: in an async model use "
                "`await fnserve.infer(...)`"
            )
        coro = self.ainfer(model, inputs, version, outputs, CALL_CHAIN.get(), parameters)
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()


def _client() -> ModelClient:
    client = current_client()
    if client is None:
        raise InvalidInputError(
            "fnserve.infer() calls other models from inside a model served by fnserve; here no "
            "model is executing"
        )
    return client


async def infer(
    model: str, inputs: Mapping[str, Array], version: str = "", outputs: Sequence[str] | None = None
) -> dict[str, Array]:
    """From an async model: call another model of the same server (see the module doc)."""
    return await _client().ainfer(model, inputs, version, outputs)


def infer_blocking(
    model: str, inputs: Mapping[str, Array], version: str = "", outputs: Sequence[str] | None = None
) -> dict[str, Array]:
    """From a sync model: call another model of the same server, blocking until it answers."""
    return _client().infer(model, inputs, version, outputs)
