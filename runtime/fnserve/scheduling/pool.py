"""Instance pool: one worker per model instance, so instances (and models) run concurrently.

A synchronous model runs its whole batch (merge inputs, call, check and split outputs) on the
instance's own thread, keeping the event loop free; an async model runs on the loop. Results
go back to each request's future; with `preserve_ordering` they leave in dispatch order.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from fnserve.errors import FnserveError, ModelExecutionError
from fnserve.scheduling.request import PendingRequest
from fnserve.scheduling.runner import BatchRunner, ExecutionTimes
from fnserve.stats import ModelStats
from fnserve.types import Array

log = logging.getLogger(__name__)
Results = list[dict[str, Array]]


class Instance:
    """One loaded model instance and the thread that runs it."""

    def __init__(self, index: int, runner: BatchRunner, thread_name: str) -> None:
        self.index = index
        self.runner = runner
        self.executor = (
            None if runner.is_async else ThreadPoolExecutor(1, thread_name_prefix=thread_name)
        )

    async def run(self, batch: Sequence[PendingRequest]) -> tuple[Results, ExecutionTimes]:
        if self.executor is None:
            return await self.runner.arun(batch)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, self.runner.run, batch)

    def close(self) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=True)


class InstancePool:
    """Hands out idle instances to the batcher and runs the batches it launches.

    Args:
        name: model name, for messages.
        instances: the loaded instances.
        stats: where executions and per-request durations are recorded.
        preserve_ordering: deliver results in dispatch order even when batches finish out of it.
    """

    def __init__(
        self, name: str, instances: list[Instance], stats: ModelStats, preserve_ordering: bool
    ) -> None:
        self.name = name
        self.instances = instances
        self.stats = stats
        self._idle: asyncio.Queue[Instance] = asyncio.Queue()
        for instance in instances:
            self._idle.put_nowait(instance)
        self._tasks: set[asyncio.Task[None]] = set()
        self._ordered = preserve_ordering and len(instances) > 1
        self._dispatched = 0
        self._delivered = 0
        self._finished: dict[int, tuple[Sequence[PendingRequest], Results | BaseException]] = {}

    async def acquire(self) -> Instance:
        return await self._idle.get()

    def release(self, instance: Instance) -> None:
        self._idle.put_nowait(instance)

    @property
    def busy(self) -> int:
        return len(self._tasks)

    def launch(self, instance: Instance, batch: list[PendingRequest]) -> None:
        """Run `batch` on `instance` in the background; the instance returns when it is done."""
        seq = self._dispatched
        self._dispatched += 1
        task = asyncio.get_running_loop().create_task(self._execute(instance, batch, seq))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _execute(self, instance: Instance, batch: list[PendingRequest], seq: int) -> None:
        start_ns = time.perf_counter_ns()
        outcome: Results | BaseException
        try:
            outcome, times = await instance.run(batch)
        except FnserveError as exc:
            outcome, times = exc, None
        except Exception as exc:  # the runner already wraps model errors; this is a bug path
            log.exception("model '%s': batch execution failed", self.name)
            outcome, times = ModelExecutionError(f"model '{self.name}' failed: {exc}"), None
        finally:
            self.release(instance)
        if times is not None:
            self._record(batch, start_ns, times)
        if self._ordered:
            self._finished[seq] = (batch, outcome)
            self._deliver_in_order()
        else:
            _deliver(batch, outcome)

    def _record(self, batch: list[PendingRequest], start_ns: int, times: ExecutionTimes) -> None:
        rows = sum(e.rows for e in batch)
        self.stats.record_execution(rows, times.input_ns, times.infer_ns, times.output_ns)
        for entry in batch:
            self.stats.record_request_compute(
                max(start_ns - entry.enqueued_ns, 0),
                times.input_ns,
                times.infer_ns,
                times.output_ns,
            )

    def _deliver_in_order(self) -> None:
        while self._delivered in self._finished:
            batch, outcome = self._finished.pop(self._delivered)
            self._delivered += 1
            _deliver(batch, outcome)

    async def drain(self) -> None:
        """Wait for every launched batch to finish."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def close(self) -> None:
        for instance in self.instances:
            instance.close()


def _deliver(batch: Sequence[PendingRequest], outcome: Results | BaseException) -> None:
    if isinstance(outcome, BaseException):
        for entry in batch:
            if entry.alive:
                entry.future.set_exception(outcome)
        return
    for entry, outputs in zip(batch, outcome, strict=False):
        if entry.alive:
            entry.future.set_result(outputs)
