"""Model instances: where one model's batches run.

An `Instance` is the seam between scheduling and where a model runs. `ThreadInstance` runs a
synchronous model on its own daemon thread (an async model on the loop), or, with an
`InlinePolicy`, its short batches on the loop's thread (inline.py); `ProcessInstance`
(process/instance.py) runs it in a worker process. The pool (pool.py) hands instances their
batches and replaces the ones that break.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from fnserve.scheduling.inline import INLINE_RUN, InlinePolicy, NeedsOwnThread
from fnserve.scheduling.request import PendingRequest
from fnserve.scheduling.runner import BatchRunner, ExecutionTimes, Results
from fnserve.scheduling.threads import DaemonWorker
from fnserve.types import Array

Outcome = tuple[Results, ExecutionTimes]  # what one batch gives back: results and timings
_T = TypeVar("_T")


class Instance(Protocol):
    """One loaded model instance, wherever it runs.

    `start` begins one batch and returns a future of the loop thread holding its outcome
    (raising `FnserveError`s; `InstanceBrokenError` when the instance itself died); cancelling
    that future gives up on the batch. `close` releases the instance gracefully and may block
    (called off the event loop, once no batch runs). `abandon` gives up on a stuck or broken
    instance: it releases what can be released without waiting and never blocks; nothing it
    leaves behind may keep the process alive at exit.
    """

    index: int

    def start(self, batch: Sequence[PendingRequest]) -> asyncio.Future[Outcome]: ...

    def runs_inline(self) -> bool:
        """Whether `start` would run the next batch on the loop's thread (see inline.py)."""
        ...

    def close(self) -> None: ...

    def abandon(self) -> None: ...


InstanceFactory = Callable[[int], Instance]  # builds the instance for an index (blocking)


class ThreadInstance:
    """An in-process instance: a sync model on its own daemon thread, an async one on the loop.

    With an `InlinePolicy`, a sync model whose batches are all short runs them on the loop's
    thread instead (see `inline.py`).
    """

    def __init__(
        self,
        index: int,
        runner: BatchRunner,
        thread_name: str,
        inline: InlinePolicy | None = None,
    ) -> None:
        self.index = index
        self.runner = runner
        self._worker = None if runner.is_async else DaemonWorker(thread_name)
        self._inline = None if runner.is_async else inline

    def start(self, batch: Sequence[PendingRequest]) -> asyncio.Future[Outcome]:
        if self._worker is None:
            return asyncio.ensure_future(self.runner.arun(batch))
        if self._inline is None:
            return self._worker.call(self.runner.run, batch)
        if self._inline.allows():
            future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
            try:
                future.set_result(self.run_inline(batch))
            except NeedsOwnThread:
                return self._worker.call(self.runner.run, batch)
            except BaseException as exc:  # handed over as the thread would (never up the loop)
                future.set_exception(exc)
            return future
        return self._worker.call(self._run_observed, batch)

    def runs_inline(self) -> bool:
        return self._inline is not None and self._inline.allows()

    def run_inline(self, batch: Sequence[PendingRequest]) -> Outcome:
        """Run `batch` on the loop's thread now (only when `runs_inline()` said so); raises
        what `start`'s future would, or `NeedsOwnThread` (the batch must go to `start`)."""
        return self._inline_call(self.runner.run, batch)

    def run_inline_one(
        self, inputs: dict[str, Array], rows: int
    ) -> tuple[dict[str, Array], ExecutionTimes]:
        """`BatchRunner.run_one` on the loop's thread now (only when `runs_inline()` said so),
        for the direct lane (direct.py); raises as `run_inline` does."""
        return self._inline_call(self.runner.run_one, inputs, rows)

    def _inline_call(self, run: Callable[..., _T], *args: Any) -> _T:
        inline = self._inline
        assert inline is not None
        running = INLINE_RUN
        running.active = True
        start_ns = time.perf_counter_ns()
        try:
            return run(*args)
        except NeedsOwnThread:  # it calls models synchronously: from now on on its thread
            inline.disable()
            raise
        finally:
            running.active = False
            inline.observe(time.perf_counter_ns() - start_ns)

    def _run_observed(self, batch: Sequence[PendingRequest]) -> Outcome:
        """`runner.run` on the thread, timed for the inline policy."""
        start_ns = time.perf_counter_ns()
        try:
            return self.runner.run(batch)
        finally:
            if self._inline is not None:
                self._inline.observe(time.perf_counter_ns() - start_ns)

    def close(self) -> None:
        if self._worker is not None:
            self._worker.shutdown(wait=True)
        self.runner.backend.unload()

    def abandon(self) -> None:
        # The thread may be stuck in user code: let it go (a daemon), unload nothing it uses.
        if self._worker is not None:
            self._worker.shutdown(wait=False)
