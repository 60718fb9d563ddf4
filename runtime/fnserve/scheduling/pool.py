"""Instance pool: one worker per model instance, so instances (and models) run concurrently.

An `Instance` is the seam between scheduling and where a model runs: `ThreadInstance` runs a
synchronous model on its own daemon thread (an async model on the loop); a process-isolated
instance runs it in a worker process. The pool hands idle instances to the batcher, runs the
batches it launches, and keeps the model serving when an instance goes bad: a batch past
`execution_timeout_s` fails with `DeadlineExceededError`, an instance that died raises
`InstanceBrokenError`; either way the instance is abandoned and the factory builds a
replacement for its index (with backoff), while queued requests wait for it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from fnserve.errors import (
    DeadlineExceededError,
    FnserveError,
    InstanceBrokenError,
    ModelExecutionError,
    UnavailableError,
)
from fnserve.scheduling.request import PendingRequest
from fnserve.scheduling.runner import BatchRunner, ExecutionTimes
from fnserve.scheduling.supervisor import OnCrash, Supervisor
from fnserve.scheduling.threads import DaemonWorker, run_in_daemon_thread
from fnserve.stats import ModelStats
from fnserve.types import Array

log = logging.getLogger(__name__)
Results = list[dict[str, Array]]
# Rebuilds of one instance index wait 0.1 s, 0.2 s, ... up to 10 s; a good batch resets it.
_FIRST_BACKOFF_S = 0.1
_MAX_BACKOFF_S = 10.0


class Instance(Protocol):
    """One loaded model instance, wherever it runs.

    `run` executes one batch (raising `FnserveError`s; `InstanceBrokenError` when the instance
    itself died). `close` releases it gracefully and may block (called off the event loop, once
    no batch runs). `abandon` gives up on a stuck or broken instance: it releases what can be
    released without waiting and never blocks; nothing it leaves behind may keep the process
    alive at exit.
    """

    index: int

    async def run(self, batch: Sequence[PendingRequest]) -> tuple[Results, ExecutionTimes]: ...

    def close(self) -> None: ...

    def abandon(self) -> None: ...


InstanceFactory = Callable[[int], Instance]  # builds the instance for an index (blocking)


class ThreadInstance:
    """An in-process instance: a sync model on its own daemon thread, an async one on the loop."""

    def __init__(self, index: int, runner: BatchRunner, thread_name: str) -> None:
        self.index = index
        self.runner = runner
        self._worker = None if runner.is_async else DaemonWorker(thread_name)

    async def run(self, batch: Sequence[PendingRequest]) -> tuple[Results, ExecutionTimes]:
        if self._worker is None:
            return await self.runner.arun(batch)
        return await asyncio.wrap_future(self._worker.submit(self.runner.run, batch))

    def close(self) -> None:
        if self._worker is not None:
            self._worker.shutdown(wait=True)
        self.runner.backend.unload()

    def abandon(self) -> None:
        # The thread may be stuck in user code: let it go (a daemon), unload nothing it uses.
        if self._worker is not None:
            self._worker.shutdown(wait=False)


class InstancePool:
    """Hands out idle instances to the batcher and runs the batches it launches.

    Args:
        name: model name, for messages.
        instances: the loaded instances.
        stats: where executions and per-request durations are recorded.
        preserve_ordering: deliver results in dispatch order even when batches finish out of it.
        factory: builds a replacement instance for an index (blocking; run on a daemon thread).
        execution_timeout_s: longest one batch may run (None or 0: no limit).
        supervisor: starts the pool's tasks (batches, rebuilds); a private one when None.
        on_crash: called if one of those tasks dies of a bug (the model then fails).
    """

    def __init__(
        self,
        name: str,
        instances: list[Instance],
        stats: ModelStats,
        preserve_ordering: bool,
        factory: InstanceFactory,
        execution_timeout_s: float | None = None,
        supervisor: Supervisor | None = None,
        on_crash: OnCrash | None = None,
    ) -> None:
        self.name = name
        self.instances = instances
        self.stats = stats
        self._factory = factory
        self._timeout_s = execution_timeout_s or None
        self._tasks = supervisor or Supervisor()
        self._on_crash = on_crash
        self._idle: asyncio.Queue[Instance] = asyncio.Queue()
        for instance in instances:
            self._idle.put_nowait(instance)
        self._running: dict[asyncio.Task[None], tuple[Instance, list[PendingRequest]]] = {}
        self._rebuilds: set[asyncio.Task[None]] = set()
        self._backoff_s: dict[int, float] = {}
        self._closed = False
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
        return len(self._running)

    def launch(self, instance: Instance, batch: list[PendingRequest]) -> None:
        """Run `batch` on `instance` in the background; the instance returns when it is done."""
        seq = self._dispatched
        self._dispatched += 1
        task = self._tasks.spawn(self._execute(instance, batch, seq), self.name, self._batch_died)
        self._running[task] = (instance, batch)
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._running.pop(task, None)

    def _batch_died(self, error: BaseException) -> None:
        """A batch task died of a bug (not a model error, which `_execute` delivers): answer
        its requests, then tell the owner. Runs before `_forget`, so the task is still known."""
        failure = ModelExecutionError(f"model '{self.name}' failed: {error!r}")
        for task, (_, batch) in list(self._running.items()):
            if task.done():  # its instance was released before the bookkeeping that failed
                del self._running[task]
                _deliver(batch, failure)
        if self._on_crash is not None:
            self._on_crash(error)

    async def _execute(self, instance: Instance, batch: list[PendingRequest], seq: int) -> None:
        start_ns = time.perf_counter_ns()
        outcome: Results | BaseException
        times: ExecutionTimes | None = None
        broken: BaseException | None = None
        try:
            outcome, times = await self._run(instance, batch)
        except asyncio.CancelledError:
            if self._closed:
                return  # abort() already answered this batch and abandoned the instance
            raise
        except (DeadlineExceededError, InstanceBrokenError) as exc:
            outcome = broken = exc
        except FnserveError as exc:
            outcome = exc
        except Exception as exc:  # the runner already wraps model errors; this is a bug path
            log.exception("model '%s': batch execution failed", self.name)
            outcome = ModelExecutionError(f"model '{self.name}' failed: {exc}")
        if broken is None:
            if times is not None and self._backoff_s:
                self._backoff_s.pop(instance.index, None)
            self.release(instance)
        else:
            self._retire(instance, broken)
        if times is not None:
            self._record(batch, start_ns, times)
        if self._ordered:
            self._finished[seq] = (batch, outcome)
            self._deliver_in_order()
        else:
            _deliver(batch, outcome)

    async def _run(
        self, instance: Instance, batch: list[PendingRequest]
    ) -> tuple[Results, ExecutionTimes]:
        if self._timeout_s is None:
            return await instance.run(batch)
        # A task plus asyncio.wait, not wait_for: wait_for would wait for the cancelled run
        # to end, and a model that ignores cancellation (or a stuck thread) never does.
        task = asyncio.ensure_future(instance.run(batch))
        try:
            done, _ = await asyncio.wait((task,), timeout=self._timeout_s)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if done:
            return task.result()
        task.cancel()
        task.add_done_callback(_consume)
        self.stats.execution_timeouts += 1
        raise DeadlineExceededError(
            f"model '{self.name}' did not finish within its execution timeout of "
            f"{self._timeout_s:g} s"
        )

    def _retire(self, instance: Instance, cause: BaseException) -> None:
        """Take a stuck or dead instance out of rotation and start building its replacement."""
        log.warning("model '%s' instance %d is replaced: %s", self.name, instance.index, cause)
        instance.abandon()
        if instance in self.instances:
            self.instances.remove(instance)
        task = self._tasks.spawn(
            self._replace(instance.index), f"{self.name}-rebuild-{instance.index}", self._on_crash
        )
        self._rebuilds.add(task)
        task.add_done_callback(self._rebuilds.discard)

    async def _replace(self, index: int) -> None:
        while not self._closed:
            delay_s = self._backoff_s.get(index, _FIRST_BACKOFF_S)
            self._backoff_s[index] = min(delay_s * 2, _MAX_BACKOFF_S)
            await asyncio.sleep(delay_s)
            try:
                instance = await run_in_daemon_thread(self._factory, index)
            except Exception:
                log.exception("model '%s': rebuilding instance %d failed", self.name, index)
                continue
            if self._closed:  # unloaded meanwhile: release it off the loop, nobody waits
                asyncio.ensure_future(run_in_daemon_thread(instance.close))
                return
            self.instances.append(instance)
            self.release(instance)
            log.info("model '%s' instance %d is back in rotation", self.name, index)
            return

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
        while self._running:
            await asyncio.gather(*list(self._running), return_exceptions=True)

    async def wait_progress(self, timeout_s: float) -> None:
        """Wait until a running batch ends (a short poll when none runs), at most `timeout_s`."""
        if self._running:
            await asyncio.wait(
                list(self._running), timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
        else:  # the batcher is about to dispatch, or an instance is being rebuilt
            await asyncio.sleep(min(timeout_s, 0.01))

    def abort(self, error: UnavailableError) -> None:
        """Past a drain deadline: fail running batches with `error`, abandon their instances.

        Batches already finished but held for ordering get their own outcome. No instance
        is rebuilt afterwards; `close` releases the healthy ones.
        """
        self._closed = True
        for task in list(self._rebuilds):
            self._tasks.stop(task)
        for seq in sorted(self._finished):
            _deliver(*self._finished.pop(seq))
        running, self._running = self._running, {}  # answered now: no longer busy
        for task, (instance, batch) in running.items():
            _deliver(batch, error)
            instance.abandon()
            if instance in self.instances:
                self.instances.remove(instance)
            self._tasks.stop(task)

    def close(self) -> None:
        """Release every instance in rotation (blocking: call it off the event loop)."""
        self._closed = True
        for instance in self.instances:
            instance.close()


def _consume(task: asyncio.Future[Any]) -> None:
    """Retrieve an abandoned run's outcome so asyncio does not log it as never retrieved."""
    if not task.cancelled():
        task.exception()


def _deliver(batch: Sequence[PendingRequest], outcome: Results | BaseException) -> None:
    if isinstance(outcome, BaseException):
        for entry in batch:
            if entry.alive:
                entry.future.set_exception(outcome)
        return
    for entry, outputs in zip(batch, outcome, strict=False):
        if entry.alive:
            entry.future.set_result(outputs)
