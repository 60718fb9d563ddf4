"""Instance pool: one worker per model instance, so instances (and models) run concurrently.

Instances (instance.py) are where a model runs. The pool hands idle instances to the
batcher, runs the batches it launches, and keeps the model serving when an instance goes bad:
a batch past `execution_timeout_s` fails with `DeadlineExceededError`, an instance that died
raises `InstanceBrokenError`; either way the instance is abandoned and the factory builds a
replacement for its index (with backoff), while queued requests wait for it. A batch that runs
out of memory is rerun in halves, down to single requests (see `oom.py`).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from fnserve.errors import (
    DeadlineExceededError,
    FnserveError,
    InstanceBrokenError,
    ModelExecutionError,
    OutOfMemoryError,
    UnavailableError,
)
from fnserve.scheduling.inline import NeedsOwnThread
from fnserve.scheduling.instance import Instance, InstanceFactory, Outcome, ThreadInstance
from fnserve.scheduling.oom import BatchCap, describe, halves, is_out_of_memory
from fnserve.scheduling.request import PendingRequest
from fnserve.scheduling.runner import ExecutionTimes, Results, scrub_paths
from fnserve.scheduling.supervisor import OnCrash, Supervisor
from fnserve.scheduling.threads import run_in_daemon_thread
from fnserve.stats import ModelStats

log = logging.getLogger(__name__)
Delivery = tuple[Sequence[PendingRequest], Results | BaseException]  # requests and their answer
# Rebuilds of one instance index wait 0.1 s, 0.2 s, ... up to 10 s; a good batch resets it.
_FIRST_BACKOFF_S = 0.1
_MAX_BACKOFF_S = 10.0


@dataclass(eq=False, slots=True)
class _Split:
    """A batch that ran out of memory, rerun piece by piece on its instance."""

    rest: list[list[PendingRequest]] = field(default_factory=list)  # to run, next first
    done: list[Delivery] = field(default_factory=list)  # answers held for ordered delivery


@dataclass(eq=False, slots=True)
class _Batch:
    """A launched batch: where it runs, what it holds, and its execution-timeout timer."""

    instance: Instance
    requests: list[PendingRequest]
    seq: int
    start_ns: int
    timer: asyncio.TimerHandle | None = None
    expired: bool = False
    split: _Split | None = None  # set on the pieces of a batch that ran out of memory


class InstancePool:
    """Hands out idle instances to the batcher and runs the batches it launches.

    A launched batch is a future with a done-callback, not a task: a task per batch (its
    creation, first step and bookkeeping) cost about a tenth of a small model's whole call.

    A batch of several requests that raises `OutOfMemoryError` is cut in two (`oom.halves`)
    and the halves run on the same instance, one after the other, each cut again if it runs
    out too, down to single requests; a request that runs out alone gets the error. The
    instance stays with the batch until every piece is done: no other batch competes for its
    memory meanwhile, the pieces keep the batch's place for `preserve_ordering`, and the
    scheduler needs no way to take requests back. `batch_cap`, when a batching scheduler
    sets one, is lowered on each out-of-memory so the batches formed next are smaller.

    Args:
        name: model name, for messages.
        instances: the loaded instances.
        stats: where executions and per-request durations are recorded.
        preserve_ordering: deliver results in dispatch order even when batches finish out of it.
        factory: builds a replacement instance for an index (blocking; run on a daemon thread).
        execution_timeout_s: longest one batch may run (None or 0: no limit).
        supervisor: starts the pool's tasks (instance rebuilds); a private one when None.
        on_crash: called if one of those tasks, or the bookkeeping of a batch, dies of a bug
            (the model then fails).
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
        self._idle: collections.deque[Instance] = collections.deque(instances)
        self._waiters: collections.deque[asyncio.Future[Instance]] = collections.deque()
        self._running: dict[asyncio.Future[Outcome], _Batch] = {}
        self._rebuilds: set[asyncio.Task[None]] = set()
        self._backoff_s: dict[int, float] = {}
        self._closed = False
        self._ordered = preserve_ordering  # one instance keeps order anyway: cheap
        self._peak_busy = 0
        self._dispatched = 0
        self._delivered = 0
        self._finished: dict[int, list[Delivery]] = {}
        self.batch_cap: BatchCap | None = None

    # Idle instances are a deque and a deque of waiters rather than an asyncio.Queue: an
    # instance is taken and given back on every request's path, and the queue's bookkeeping
    # (its unfinished-task count and join event) was a good part of a small step's cost.

    async def acquire(self) -> Instance:
        """The next idle instance, in turn, when there is one."""
        if self._idle:
            return self._idle.popleft()
        waiter: asyncio.Future[Instance] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # handed one just as it gave up
                self.release(waiter.result())
            raise

    def release(self, instance: Instance) -> None:
        """Give an instance back: to the first one waiting, else to the idle ones."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(instance)
                return
        self._idle.append(instance)

    def try_acquire(self) -> Instance | None:
        """An idle instance if there is one now (the caller launches or releases it)."""
        return self._idle.popleft() if self._idle else None

    def take_inline(self) -> ThreadInstance | None:
        """The next idle instance if it would run a batch inline now (see inline.py), taken
        (the caller runs on it and releases it); else None, and nothing is taken."""
        idle = self._idle
        if idle:
            instance = idle[0]
            if isinstance(instance, ThreadInstance) and instance.runs_inline():
                idle.popleft()
                return instance
        return None

    @property
    def busy(self) -> int:
        return len(self._running)

    def take_peak_busy(self) -> int:
        """The most batches that ran at once since the last call (for the scaler)."""
        peak, self._peak_busy = max(self._peak_busy, len(self._running)), len(self._running)
        return peak

    def add(self, instance: Instance) -> None:
        """Put a new instance in rotation."""
        self.instances.append(instance)
        self.release(instance)

    def take_idle(self) -> Instance | None:
        """Take an idle instance out of rotation (the caller closes it); None if all are busy."""
        instance = self.try_acquire()
        if instance is not None:
            self.instances.remove(instance)
        return instance

    def launch(self, instance: Instance, batch: list[PendingRequest]) -> None:
        """Run `batch` on `instance` in the background; the instance returns when it is done."""
        run = _Batch(instance, batch, self._dispatched, time.perf_counter_ns())
        self._dispatched += 1
        self._start(run)

    def run_now(self, instance: ThreadInstance, batch: list[PendingRequest]) -> None:
        """Run `batch` inline on `instance` (its `runs_inline()` said yes) and answer it before
        returning. Only success takes this short way; a failure, an out-of-memory split, a
        pool that keeps order, or a model that must go to its thread take `launch`'s."""
        if self._ordered:
            self.launch(instance, batch)
            return
        start_ns = time.perf_counter_ns()
        self._peak_busy = max(self._peak_busy, len(self._running) + 1)
        try:
            results, times = instance.run_inline(batch)
        except NeedsOwnThread:
            self.launch(instance, batch)
            return
        except BaseException as exc:
            future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
            future.set_exception(exc)
            self._running[future] = _Batch(instance, batch, self._dispatched, start_ns)
            self._dispatched += 1
            self._done(future)
            return
        self._dispatched += 1
        if self._backoff_s:
            self._backoff_s.pop(instance.index, None)
        self._record(batch, start_ns, times)
        self.release(instance)
        _deliver(batch, results)

    def _start(self, run: _Batch) -> None:
        future = run.instance.start(run.requests)
        if self._timeout_s is not None:
            run.timer = asyncio.get_running_loop().call_later(
                self._timeout_s, self._expire, future, run
            )
        self._running[future] = run
        self._peak_busy = max(self._peak_busy, len(self._running))
        if future.done():  # it ran inline: answer now, the caller then awaits no loop turn
            self._done(future)
        else:
            future.add_done_callback(self._done)

    def _expire(self, future: asyncio.Future[Outcome], run: _Batch) -> None:
        """Past the execution timeout: give up on the batch (a stuck thread is left behind)."""
        if not future.done():
            run.expired = True
            self.stats.execution_timeouts += 1
            future.cancel()

    def _done(self, future: asyncio.Future[Outcome]) -> None:
        run = self._running.pop(future, None)
        if run is None:
            return  # abort() already answered this batch and abandoned the instance
        try:
            self._settle(future, run)
        except Exception as exc:  # a bug in the bookkeeping: still answer, then tell the owner
            log.exception("model '%s': finishing a batch failed", self.name)
            error = ModelExecutionError(f"model '{self.name}' failed: {exc!r}")
            for batch in (run.requests, *(run.split.rest if run.split else ())):
                _deliver(batch, error)
            if self._on_crash is not None:
                self._on_crash(exc)

    def _settle(self, future: asyncio.Future[Outcome], run: _Batch) -> None:
        if run.timer is not None:
            run.timer.cancel()
        outcome, times, broken = self._outcome(future, run)
        if times is not None:
            if self._backoff_s:
                self._backoff_s.pop(run.instance.index, None)
            self._record(run.requests, run.start_ns, times)
        was_split = isinstance(outcome, OutOfMemoryError) and self._out_of_memory(run)
        continued = False
        if broken is not None:
            self._retire(run.instance, broken)
        else:
            continued = self._next_piece(run)
            if not continued:
                self.release(run.instance)
        if run.split is not None:
            self._finish_piece(run, None if was_split else outcome, broken, continued)
        elif self._ordered:
            self._finished[run.seq] = [(run.requests, outcome)]
            self._deliver_in_order()
        else:
            _deliver(run.requests, outcome)

    def _out_of_memory(self, run: _Batch) -> bool:
        """Lower the batch cap; queue the halves of a batch of several requests to run next on
        its instance (True), or leave a single request to fail (False)."""
        rows = sum(e.rows for e in run.requests)
        if len(run.requests) < 2:
            self._single_out_of_memory(run.instance, rows)
            return False
        if self.batch_cap is not None:
            self.batch_cap.lower(rows, time.perf_counter_ns())
        first, second = halves(run.requests)
        self.stats.oom_splits += 1
        log.warning(
            "model '%s' instance %d: out of memory on a batch of %d rows from %d requests; "
            "rerunning it as %d + %d requests",
            self.name,
            run.instance.index,
            rows,
            len(run.requests),
            len(first),
            len(second),
        )
        if run.split is None:
            run.split = _Split()
        run.split.rest[:0] = [first, second]
        return True

    def _single_out_of_memory(self, instance: Instance, rows: int) -> None:
        if self.batch_cap is not None:
            self.batch_cap.lower(rows, time.perf_counter_ns())
        log.warning(
            "model '%s' instance %d: a single request (%d rows) ran out of memory; it fails",
            self.name,
            instance.index,
            rows,
        )

    def direct_done(self, instance: Instance, rows: int, times: ExecutionTimes) -> None:
        """A request of `rows` rows ran on `instance` in the direct lane (direct.py): count
        it as a batch of its own that did not queue, and put the instance back."""
        if self._backoff_s:
            self._backoff_s.pop(instance.index, None)
        self._dispatched += 1
        self._peak_busy = max(self._peak_busy, len(self._running) + 1)
        self.stats.record_batch(rows, [0], times.input_ns, times.infer_ns, times.output_ns)
        self.release(instance)

    def direct_failed(self, instance: Instance, rows: int, exc: BaseException) -> BaseException:
        """A request of `rows` rows raised `exc` in the direct lane: put the instance back (a
        model that runs inline cannot break it); the error to raise, as a batch would get."""
        self._dispatched += 1
        error = self._error(exc, rows, 1)
        if isinstance(error, OutOfMemoryError):
            self._single_out_of_memory(instance, rows)
        self.release(instance)
        return error

    def _next_piece(self, run: _Batch) -> bool:
        """Start the next piece of a split batch on its instance; False when none is left."""
        split = run.split
        while split is not None and split.rest:
            piece = [e for e in split.rest.pop(0) if e.alive]  # skip requests given up on
            if piece:
                self._start(
                    _Batch(run.instance, piece, run.seq, time.perf_counter_ns(), split=split)
                )
                return True
        return False

    def _finish_piece(
        self,
        run: _Batch,
        outcome: Results | BaseException | None,
        broken: BaseException | None,
        continued: bool,
    ) -> None:
        """Answer one piece of a split batch (None: it was split again): at once, or, under
        `preserve_ordering`, all pieces together in the batch's turn once the last is done."""
        split = run.split
        assert split is not None  # only pieces get here
        pieces: list[Delivery] = [] if outcome is None else [(run.requests, outcome)]
        if broken is not None:  # its instance is gone: the pieces not run yet fail with it
            pieces += [(piece, broken) for piece in split.rest]
            split.rest.clear()
        if not self._ordered:
            for batch, answer in pieces:
                _deliver(batch, answer)
            return
        split.done += pieces
        if not continued:
            self._finished[run.seq] = split.done
            self._deliver_in_order()

    def _outcome(
        self, future: asyncio.Future[Outcome], run: _Batch
    ) -> tuple[Results | BaseException, ExecutionTimes | None, BaseException | None]:
        """(results or error, times when it ran, the error that retires the instance)."""
        if future.cancelled():
            if run.expired:
                error = DeadlineExceededError(
                    f"model '{self.name}' did not finish within its execution timeout of "
                    f"{self._timeout_s:g} s"
                )
                return error, None, error
            return ModelExecutionError(f"model '{self.name}': the batch was cancelled"), None, None
        exc = future.exception()
        if exc is None:
            results, times = future.result()
            return results, times, None
        if isinstance(exc, DeadlineExceededError | InstanceBrokenError):
            return exc, None, exc
        return self._error(exc, sum(e.rows for e in run.requests), len(run.requests)), None, None

    def _error(self, exc: BaseException, rows: int, requests: int) -> BaseException:
        """What a batch of `rows` rows from `requests` requests fails with when running it
        raised `exc` (an instance that is still good)."""
        if isinstance(exc, FnserveError):
            return exc
        if is_out_of_memory(exc):  # merging inputs or reading outputs, outside the model's code
            return OutOfMemoryError(scrub_paths(describe(self.name, rows, requests, exc)))
        # The runner already wraps model errors; this is a bug path.
        log.error("model '%s': batch execution failed", self.name, exc_info=exc)
        return ModelExecutionError(f"model '{self.name}' failed: {exc}")

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
        self.stats.record_batch(
            sum(e.rows for e in batch),
            [max(start_ns - e.enqueued_ns, 0) for e in batch],
            times.input_ns,
            times.infer_ns,
            times.output_ns,
        )

    def _deliver_in_order(self) -> None:
        while self._delivered in self._finished:
            deliveries = self._finished.pop(self._delivered)
            self._delivered += 1
            for batch, outcome in deliveries:
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
            for delivery in self._finished.pop(seq):
                _deliver(*delivery)
        running, self._running = self._running, {}  # answered now: no longer busy
        for future, run in running.items():
            if run.timer is not None:
                run.timer.cancel()
            rest: Sequence[list[PendingRequest]] = ()
            if run.split is not None:  # pieces already run keep their answers
                for delivery in run.split.done:
                    _deliver(*delivery)
                rest = run.split.rest
            for batch in (run.requests, *rest):
                _deliver(batch, error)
            run.instance.abandon()
            if run.instance in self.instances:
                self.instances.remove(run.instance)
            future.cancel()

    def close(self) -> None:
        """Release every instance in rotation (blocking: call it off the event loop)."""
        self._closed = True
        for instance in self.instances:
            instance.close()


def _deliver(batch: Sequence[PendingRequest], outcome: Results | BaseException) -> None:
    if isinstance(outcome, BaseException):
        for entry in batch:
            if entry.alive:
                entry.future.set_exception(outcome)
        return
    for entry, outputs in zip(batch, outcome, strict=False):
        if not entry.alive:
            continue
        if isinstance(outputs, Exception):  # this request alone failed (per-request models)
            entry.future.set_exception(outputs)
        else:
            entry.future.set_result(outputs)
