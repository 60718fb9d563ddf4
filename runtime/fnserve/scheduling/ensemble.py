"""The ensemble scheduler: each request flows through the steps' own models, as a DAG.

An ensemble has no instances of its own. Every request runs in its caller's task and calls the
composing models through the runtime (`ModelCaller.infer_outputs`), so each step queues in that
model's scheduler and batches with the steps of other requests. A step starts as soon as every
tensor it reads exists (steps whose inputs are ready run concurrently); tensors pass between
steps as the same numpy arrays, never serialized or copied. A failing step fails only its
request, with an error that names the step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, NamedTuple

from fnserve.config.model_config import EnsembleStep, ModelConfig
from fnserve.errors import FnserveError, ModelExecutionError, QueueFullError
from fnserve.scheduling.request import PendingRequest
from fnserve.stats import ModelStats
from fnserve.types import Array, InferInput, InferRequest, ModelCaller


class EnsembleScheduler:
    """Runs ensemble requests, at most `max_inflight` at once (0: no bound).

    Each request that succeeds counts as one execution of the ensemble over its batch size in
    `stats`, as Triton's ensemble scheduler counts it (`UpdateInferBatchStatsWithDuration` when
    the last step ends): `execution_count` + 1 and `inference_count` + the request's rows (1
    without batching). Triton's ensemble compute durations are the sums of its steps'; fnserve
    does not carry those back from the steps, so the ensemble's compute durations stay 0.

    Args:
        config: the ensemble's config (its `ensemble` steps).
        caller: what calls the composing models (the runtime).
        max_inflight: requests running at once before new ones are refused (QueueFullError).
        stats: the ensemble's statistics record.
    """

    def __init__(
        self,
        config: ModelConfig,
        caller: ModelCaller,
        max_inflight: int,
        stats: ModelStats,
    ) -> None:
        self._config = config
        self._caller = caller
        self._max_inflight = max_inflight
        self._stats = stats
        self._running: set[asyncio.Task[Any]] = set()  # the callers' tasks
        self._failed: dict[asyncio.Task[Any], Exception] = {}  # those fail_queued ended
        self._chain = chain_of(config)

    def execute(self, entry: PendingRequest) -> Awaitable[dict[str, Array]]:
        """The `Scheduler` way in, with a queue entry already built (a request with
        parameters, or a durable job's): `run_inputs` on its inputs."""
        return self.run_inputs(entry.inputs, entry.call_chain)

    async def run_inputs(
        self, inputs: Mapping[str, Array], call_chain: tuple[str, ...]
    ) -> dict[str, Array]:
        """Run a request's checked inputs through the steps in the caller's own task: no task
        to create, no turn of the loop to hand the outputs back, and no queue entry (the
        runtime calls this directly for requests without parameters). At concurrency 1 those
        were a good part of what an ensemble added to its steps."""
        if self._max_inflight and len(self._running) >= self._max_inflight:
            raise QueueFullError(
                f"exceeds maximum queue size of {self._max_inflight} for model "
                f"'{self._config.name}'"
            )
        task = asyncio.current_task()
        assert task is not None
        self._running.add(task)
        try:
            chain = (*call_chain, self._config.name)
            if self._chain is not None and len(inputs) == len(self._config.inputs):
                outputs = await run_chain(self._config, self._chain, inputs, self._caller, chain)
            else:
                outputs = await run_steps(self._config, inputs, self._caller, chain)
            self._stats.record_batch(self._rows(inputs), [0], 0, 0, 0)
            return outputs
        except asyncio.CancelledError:
            error = self._failed.pop(task, None)
            if error is not None and task.uncancel() == 0:  # fail_queued ended it: its error
                raise error from None
            raise
        except FnserveError:
            raise
        except Exception as exc:  # a bug in a step's plumbing: still answer the request
            raise ModelExecutionError(f"ensemble '{self._config.name}' failed: {exc!r}") from exc
        finally:
            self._running.discard(task)
            self._failed.pop(task, None)  # failed as it finished: nothing left to cancel

    def _rows(self, inputs: Mapping[str, Array]) -> int:
        """The request's batch size as Triton counts it: its rows, at least 1."""
        if not self._config.batching or not inputs:
            return 1
        return max(1, len(next(iter(inputs.values()))))

    def queued(self) -> int:
        return len(self._running)

    def flush(self) -> None:
        """Nothing waits to form batches here."""

    def fail_queued(self, error: Exception) -> None:
        """Fail every running request with `error` (their steps are cancelled; a request
        its client cancelled already ends cancelled)."""
        for task in self._running:
            self._failed[task] = error
            task.cancel()
        self._running.clear()

    async def run(self) -> None:
        """Requests run in their callers' tasks; this only keeps the scheduler's place."""
        await asyncio.get_running_loop().create_future()  # until cancelled


async def run_steps(
    config: ModelConfig,
    inputs: Mapping[str, Array],
    caller: ModelCaller,
    chain: tuple[str, ...] = (),
) -> dict[str, Array]:
    """Run the ensemble's steps over `inputs`; the ensemble's outputs by name.

    Raises:
        FnserveError: a step failed (its message names the step), with the step's status.
    """
    declared = config.input_datatypes
    tensors: dict[str, Typed] = {n: (declared[n], a) for n, a in inputs.items()}
    pending = list(enumerate(config.ensemble))
    running: dict[asyncio.Task[dict[str, Typed]], tuple[int, EnsembleStep]] = {}
    try:
        while pending or running:
            ready = _ready(pending, tensors)
            if len(ready) == 1 and not running:  # a chain: no task, no wait (the common case)
                index, step = ready[0]
                pending.remove(ready[0])
                try:
                    tensors.update(await _step(step, tensors, caller, chain))
                except FnserveError as exc:
                    raise _named(config, index, step, exc) from exc
                continue
            for index, step in ready:
                pending.remove((index, step))
                task = asyncio.ensure_future(_step(step, tensors, caller, chain))
                running[task] = (index, step)
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                index, step = running.pop(task)
                try:
                    tensors.update(task.result())
                except FnserveError as exc:
                    raise _named(config, index, step, exc) from exc
    finally:
        for task in running:  # a failed step ends the request: stop its siblings
            task.cancel()
    return {t.name: tensors[t.name][1] for t in config.outputs}


Typed = tuple[str, Array]  # (protocol datatype, array) of an ensemble tensor


class ChainStep(NamedTuple):
    """One step of an ensemble that is a chain, with its maps as tuples."""

    position: int  # in the config's steps (errors name it)
    step: EnsembleStep
    version: str  # "" for the latest
    reads: tuple[tuple[str, str], ...]  # (the step model's input, the ensemble tensor)
    writes: dict[str, str]  # the step model's output -> the ensemble tensor
    outputs: tuple[str, ...]  # the step model's outputs it asks for


def chain_of(config: ModelConfig) -> tuple[ChainStep, ...] | None:
    """The steps in the order they run when the ensemble is a chain (with every input given,
    exactly one step can run at each point: nothing to run concurrently); None otherwise."""
    available = {t.name for t in config.inputs}
    pending = list(enumerate(config.ensemble))
    order: list[ChainStep] = []
    while pending:
        ready = [(i, s) for i, s in pending if available.issuperset(s.input_map.values())]
        if len(ready) != 1:
            return None
        index, step = ready[0]
        pending.remove(ready[0])
        available.update(step.output_map.values())
        reads = tuple(step.input_map.items())
        order.append(ChainStep(index, step, _version(step), reads, dict(step.output_map),
                               tuple(step.output_map)))  # fmt: skip
    return tuple(order)


async def run_chain(
    config: ModelConfig,
    steps: Sequence[ChainStep],
    inputs: Mapping[str, Array],
    caller: ModelCaller,
    chain: tuple[str, ...],
) -> dict[str, Array]:
    """`run_steps` for an ensemble that is a chain (`chain_of`): one step after the other,
    with nothing worked out per request but the tensors."""
    declared = config.input_datatypes
    tensors: dict[str, Typed] = {n: (declared[n], a) for n, a in inputs.items()}
    # Loops rather than comprehensions: a step runs right after a large model may have
    # evicted the CPU caches, and each comprehension is one more function to bring back.
    for plan in steps:
        step_inputs = []  # (name, datatype, array): InferInputs only if a request is needed
        for name, source in plan.reads:
            datatype, array = tensors[source]
            step_inputs.append((name, datatype, array))
        try:
            # A step that can answer at once (idle, inline) does, without request objects.
            answer = caller.call_now(
                plan.step.model_name, plan.version, step_inputs, plan.outputs, chain
            )
            if answer is None:
                request = InferRequest(
                    plan.step.model_name,
                    tuple(InferInput(*tensor) for tensor in step_inputs),
                    plan.version,
                    outputs=plan.outputs,
                    call_chain=chain,  # an ensemble that reaches itself fails, not recurses
                )
                answer = await caller.infer_outputs(request)
        except FnserveError as exc:
            raise _named(config, plan.position, plan.step, exc) from exc
        arrays, datatypes = answer
        for name, target in plan.writes.items():
            tensors[target] = (datatypes[name], arrays[name])
    outputs = {}
    for tensor in config.outputs:
        outputs[tensor.name] = tensors[tensor.name][1]
    return outputs


def _version(step: EnsembleStep) -> str:
    """The version a step asks for ("" for the latest)."""
    return "" if step.model_version < 0 else str(step.model_version)


def _named(config: ModelConfig, index: int, step: EnsembleStep, exc: FnserveError) -> Exception:
    """The step's error, of the same class, naming the ensemble and the step."""
    return type(exc)(
        f"ensemble '{config.name}' step {index} ('{step.model_name}') failed: {exc.message}"
    )


def _ready(
    pending: Sequence[tuple[int, EnsembleStep]], tensors: Mapping[str, Typed]
) -> list[tuple[int, EnsembleStep]]:
    return [(i, s) for i, s in pending if all(t in tensors for t in s.input_map.values())]


async def _step(
    step: EnsembleStep, tensors: Mapping[str, Typed], caller: ModelCaller, chain: tuple[str, ...]
) -> dict[str, Typed]:
    request = InferRequest(
        step.model_name,
        tuple(InferInput(name, *tensors[source]) for name, source in step.input_map.items()),
        model_version=_version(step),
        outputs=tuple(step.output_map),
        call_chain=chain,  # an ensemble that reaches itself fails instead of recursing
    )
    outputs, datatypes = await caller.infer_outputs(request)
    return {target: (datatypes[name], outputs[name]) for name, target in step.output_map.items()}
