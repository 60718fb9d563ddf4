"""Run one batch on a backend: merge the requests' inputs, call, check and split the outputs.

Output checks hold the model to its declaration (names, datatypes, shapes, batch rows), so a
mistake in user code fails with a message that says what to fix, never with a broken response.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from fnserve.backends.base import Answer, Backend, OneRequest
from fnserve.calls import CALL_CHAIN, CURRENT_CLIENT, ModelClient
from fnserve.config.model_config import ModelConfig, Tensor
from fnserve.errors import FnserveError, ModelExecutionError, OutOfMemoryError
from fnserve.scheduling.oom import describe, is_out_of_memory
from fnserve.scheduling.request import PendingRequest
from fnserve.scheduling.reshape import Reshapes
from fnserve.tensors import numpy_dtype
from fnserve.types import Array, ParamValue

log = logging.getLogger(__name__)
# What a batch gives back, one entry per request: its outputs, or (from a backend that takes
# requests one by one) the error that fails that request alone.
Results = Sequence[dict[str, Array] | Exception]


class ExecutionTimes(NamedTuple):
    """Durations of one execution, in ns (Triton's compute_input / infer / output)."""

    input_ns: int
    infer_ns: int
    output_ns: int


class BatchRunner:
    """Executes batches for one model instance on its backend."""

    def __init__(self, config: ModelConfig, backend: Backend, debug_errors: bool = False) -> None:
        self.config = config
        self.backend = backend
        self.is_async = backend.is_async
        # Its models see each request of a batch (Triton's python backend): no merge, no split.
        self.per_request = bool(getattr(backend, "per_request", False))
        self.client: ModelClient | None = None  # set when the model may call other models
        self._outputs = config.outputs
        self._dtypes = {t.name: numpy_dtype(t.datatype) for t in config.outputs}
        reshapes = Reshapes(config)  # Triton's `reshape`: None when no tensor declares one
        self._reshapes = reshapes if reshapes.inputs or reshapes.outputs else None
        # each reshaped output as the model gives it, to check what it returned
        self._model_side = {
            t.name: Tensor(t.name, t.datatype, t.model_dims) for t in reshapes.outputs.values()
        }
        self._model_errors = _ModelErrors(
            config.name, debug_errors
        )  # stateless, so one serves every batch

    def run(self, batch: Sequence[PendingRequest]) -> tuple[Results, ExecutionTimes]:
        """Synchronous path (on the instance thread)."""
        if self.per_request:
            return self._run_each(batch)
        t0 = time.perf_counter_ns()
        inputs, parameters = merge_inputs(batch), [e.parameters for e in batch]
        t1 = time.perf_counter_ns()
        if self.client is None:
            return self._finish(batch, self.call(inputs, parameters), t0, t1)
        tokens = self._enter_calls(batch)
        try:
            return self._finish(batch, self.call(inputs, parameters), t0, t1)
        finally:
            _leave_calls(tokens)

    def run_one(
        self, inputs: dict[str, Array], rows: int
    ) -> tuple[dict[str, Array], ExecutionTimes]:
        """`run` for one request without parameters, already checked (`TensorPlan`): the
        direct lane's (see direct.py), with nothing to merge or split. It runs inline only,
        where a call to another model moves the request to the model's thread before it is
        made (`NeedsOwnThread`), so no call chain is set here."""
        t1 = time.perf_counter_ns()
        result = self.call(inputs, [{}])
        t2 = time.perf_counter_ns()
        outputs = self._outputs_of(result, rows)
        return outputs, ExecutionTimes(0, t2 - t1, time.perf_counter_ns() - t2)

    async def arun(self, batch: Sequence[PendingRequest]) -> tuple[Results, ExecutionTimes]:
        """Async path (on the event loop) for `async def` models."""
        if self.per_request:
            return await self._arun_each(batch)
        t0 = time.perf_counter_ns()
        inputs, parameters = merge_inputs(batch), [e.parameters for e in batch]
        t1 = time.perf_counter_ns()
        if self.client is None:
            return self._finish(batch, await self.acall(inputs, parameters), t0, t1)
        tokens = self._enter_calls(batch)
        try:
            return self._finish(batch, await self.acall(inputs, parameters), t0, t1)
        finally:
            _leave_calls(tokens)

    def _run_each(self, batch: Sequence[PendingRequest]) -> tuple[Results, ExecutionTimes]:
        """`run` for a backend that takes the requests one by one."""
        t0 = time.perf_counter_ns()
        requests = _one_by_one(batch, self._reshapes)
        with self._each_call(batch):
            answers = self.backend.execute_each(requests)  # type: ignore[attr-defined]
        return self._finish_each(batch, answers, t0)

    async def _arun_each(self, batch: Sequence[PendingRequest]) -> tuple[Results, ExecutionTimes]:
        """`_run_each` for async backends."""
        t0 = time.perf_counter_ns()
        requests = _one_by_one(batch, self._reshapes)
        with self._each_call(batch):
            answers = await self.backend.aexecute_each(requests)  # type: ignore[attr-defined]
        return self._finish_each(batch, answers, t0)

    @contextlib.contextmanager
    def _each_call(self, batch: Sequence[PendingRequest]) -> Iterator[None]:
        """Around a per-request backend's call: the batch's call chain for the model's calls
        to other models, and what it raises made a ModelExecutionError (as `call` does)."""
        tokens = None if self.client is None else self._enter_calls(batch)
        try:
            yield
        except FnserveError:
            raise
        except Exception as exc:
            raise self.model_error(exc, sum(e.rows for e in batch), len(batch)) from exc
        finally:
            if tokens is not None:
                _leave_calls(tokens)

    def _finish_each(
        self, batch: Sequence[PendingRequest], answers: Sequence[Answer], t0: int
    ) -> tuple[Results, ExecutionTimes]:
        """Each request's answer, checked on its own: a bad one fails only its request."""
        t1 = time.perf_counter_ns()
        results: list[dict[str, Array] | Exception] = []
        for entry, answer in zip(batch, answers, strict=True):
            if isinstance(answer, Exception):
                results.append(answer)
                continue
            try:
                results.append(self.check_outputs(answer, entry.rows, entry.requested))
            except FnserveError as exc:
                results.append(exc)
        return results, ExecutionTimes(0, t1 - t0, time.perf_counter_ns() - t1)

    def _enter_calls(self, batch: Sequence[PendingRequest]) -> tuple[Any, Any]:
        """Let the model's code call other models (`fnserve.infer`) for this batch: the
        chain is every request's chain, then this model."""
        chain = dict.fromkeys(name for e in batch for name in e.call_chain)
        chain[self.config.name] = None
        return CALL_CHAIN.set(tuple(chain)), CURRENT_CLIENT.set(self.client)

    def call(
        self, inputs: Mapping[str, Array], parameters: Sequence[Mapping[str, ParamValue]]
    ) -> Any:
        """Call the model on merged inputs; anything it raises becomes ModelExecutionError
        (OutOfMemoryError when it says memory ran out)."""
        if self._reshapes is not None:
            inputs = self._reshapes.model_inputs(inputs)
        try:
            return self.backend.execute(inputs, parameters)
        except FnserveError:
            raise
        except Exception as exc:
            raise self.model_error(exc, self._rows(inputs), len(parameters)) from exc

    async def acall(
        self, inputs: Mapping[str, Array], parameters: Sequence[Mapping[str, ParamValue]]
    ) -> Any:
        """`call` for async models."""
        if self._reshapes is not None:
            inputs = self._reshapes.model_inputs(inputs)
        try:
            return await self.backend.aexecute(inputs, parameters)
        except FnserveError:
            raise
        except Exception as exc:
            raise self.model_error(exc, self._rows(inputs), len(parameters)) from exc

    def model_error(self, exc: Exception, rows: int, requests: int) -> ModelExecutionError:
        """What to raise (`from exc`) when the model raised `exc` on a batch of `rows` rows
        from `requests` requests: OutOfMemoryError when it says memory ran out."""
        return self._model_errors.translate(exc, rows, requests)

    def _rows(self, inputs: Mapping[str, Array]) -> int:
        """Rows in the batch dimension of merged inputs (1 for a model without batching)."""
        if not self.config.batching or not inputs:
            return 1
        return int(next(iter(inputs.values())).shape[0])

    def _finish(
        self, batch: Sequence[PendingRequest], result: Any, t0: int, t1: int
    ) -> tuple[Results, ExecutionTimes]:
        """Check and split the outputs; times are input merge, model call, output handling."""
        t2 = time.perf_counter_ns()
        results = self._split(batch, result)
        return results, ExecutionTimes(t1 - t0, t2 - t1, time.perf_counter_ns() - t2)

    def _split(self, batch: Sequence[PendingRequest], result: Any) -> list[dict[str, Array]]:
        rows = batch[0].rows if len(batch) == 1 else sum(e.rows for e in batch)
        return split_outputs(batch, self._outputs_of(result, rows))

    def _outputs_of(self, result: Any, rows: int) -> dict[str, Array]:
        """What the model returned for `rows` rows, checked: one array per declared output."""
        outputs = self.config.plan.accept_outputs(result, rows)  # the common case, fast
        return self.check_outputs(result, rows) if outputs is None else outputs

    def check_outputs(
        self, result: Any, rows: int, requested: tuple[str, ...] | None = None
    ) -> dict[str, Array]:
        """Hold what the model returned to its declaration; one array per declared output
        (per output in `requested`, when given: a per-request model returns what was asked)."""
        name = self.config.name
        outputs = self._outputs
        if requested is not None:
            outputs = [t for t in outputs if t.name in requested]
        if result is None or not isinstance(result, Mapping) and len(self._outputs) != 1:
            raise ModelExecutionError(
                f"model '{name}' returned {_kind(result)}; it declares {self._declared()}, so "
                f"it must return "
                + ("one array or " if len(self._outputs) == 1 else "")
                + "a dict of output name to array"
            )
        if not isinstance(result, Mapping):
            result = {self._outputs[0].name: result}
        missing = [t.name for t in outputs if t.name not in result]
        if missing:
            returned = ", ".join(repr(str(k))[:40] for k in list(result)[:8]) or "nothing"
            raise ModelExecutionError(
                f"model '{name}' returned output(s) {returned} but not "
                f"{', '.join(missing)}; it declares {self._declared()}"
            )
        return {t.name: self._check_output(t, result[t.name], rows) for t in outputs}

    def _declared(self) -> str:
        return ", ".join(
            f"{t.name} {t.datatype} {self.config.full_shape(t)}" for t in self._outputs
        )

    def _check_output(self, spec: Tensor, value: Any, rows: int) -> Array:
        name = self.config.name
        array = np.asarray(value)
        expected = self._dtypes[spec.name]
        if spec.datatype == "BYTES":
            if array.dtype.kind not in "OSU":
                raise ModelExecutionError(
                    f"model '{name}' output '{spec.name}': expected BYTES (bytes or str "
                    f"elements), got numpy dtype {array.dtype}"
                )
            array = array.astype(np.object_, copy=False)
        elif array.dtype != expected:
            raise ModelExecutionError(
                f"model '{name}' output '{spec.name}': expected datatype {spec.datatype} "
                f"(numpy {expected}), got numpy {array.dtype}"
            )
        if self.config.batching and (array.ndim == 0 or array.shape[0] != rows):
            raise ModelExecutionError(
                f"model '{name}' output '{spec.name}': expected {rows} rows in the batch "
                f"dimension, got shape {list(array.shape)}"
            )
        model_side = self._model_side.get(spec.name, spec)
        if not self.config.matches_dims(model_side, array.shape):
            raise ModelExecutionError(
                f"model '{name}' output '{spec.name}': expected shape "
                f"{self.config.full_shape(model_side)}, got {list(array.shape)}"
            )
        if self._reshapes is not None and spec.name in self._model_side:
            return self._reshapes.wire_output(spec, array)
        return array


def _one_by_one(batch: Sequence[PendingRequest], reshapes: Reshapes | None) -> list[OneRequest]:
    return [
        OneRequest(
            e.inputs if reshapes is None else reshapes.model_inputs(e.inputs),
            e.parameters,
            e.requested,
            e.request_id,
        )
        for e in batch
    ]


def split_outputs(
    batch: Sequence[PendingRequest], outputs: dict[str, Array]
) -> list[dict[str, Array]]:
    """Cut merged outputs back into one dict per request, along the batch dimension."""
    if len(batch) == 1:
        return [outputs]
    results: list[dict[str, Array]] = [{} for _ in batch]
    offsets = np.cumsum([e.rows for e in batch])[:-1]
    for name, array in outputs.items():
        for i, part in enumerate(np.split(array, offsets)):
            results[i][name] = part
    return results


def _kind(value: Any) -> str:
    if value is None:
        return "None"
    return f"a {type(value).__name__}"


def merge_inputs(batch: Sequence[PendingRequest]) -> dict[str, Array]:
    """Concatenate the requests' inputs along the batch dimension (no copy for one request)."""
    if len(batch) == 1:
        return batch[0].inputs
    first = batch[0].inputs
    return {name: np.concatenate([e.inputs[name] for e in batch]) for name in first}


# Anything that looks like a host path: absolute (/x, C:\x, \\share), home (~/x) or
# explicitly relative (./x, ../x). A '/' inside a word ("km/h", "1/2") is left alone.
_PATH = re.compile(r"(?<![\w/\\.~-])(?:~|\.{1,2}|[A-Za-z]:)?[/\\][^\s'\"`<>|,;:()\[\]{}]+")


def scrub_paths(message: str) -> str:
    """`message` with every path-like token replaced by `<path>` (for clients to see)."""
    return _PATH.sub("<path>", message)


class _ModelErrors:
    """Translate anything the user's code raises into ModelExecutionError, at one place;
    OutOfMemoryError when it says memory ran out (the pool then splits the batch).

    The log gets the whole message and traceback; the client gets it with host paths scrubbed
    (a model's exception text often names files on the server) unless `debug_errors`.
    """

    def __init__(self, model: str, debug_errors: bool = False) -> None:
        self.model = model
        self.debug_errors = debug_errors

    def translate(self, exc: Exception, rows: int, requests: int) -> ModelExecutionError:
        """The error to raise (`from exc`) for what the model raised on a batch."""
        if is_out_of_memory(exc):
            message = describe(self.model, rows, requests, exc)
            log.info("%s", message)  # the pool logs what it does about it; no traceback
            return OutOfMemoryError(self._client_message(message))
        message = f"model '{self.model}' raised {type(exc).__name__}: {exc}"
        log.warning("%s", message, exc_info=exc)
        return ModelExecutionError(self._client_message(message))

    def _client_message(self, message: str) -> str:
        return message if self.debug_errors else scrub_paths(message)


def _leave_calls(tokens: tuple[Any, Any]) -> None:
    CALL_CHAIN.reset(tokens[0])
    CURRENT_CLIENT.reset(tokens[1])
