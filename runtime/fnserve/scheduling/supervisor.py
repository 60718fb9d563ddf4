"""Supervised background work: every long-lived task of the core has an owner that hears of it
when the task dies.

The runtime owns one `Supervisor`; schedulers and instance pools start their tasks through it.
A task that ends with an exception, or that is cancelled by anyone but its owner, is a crash:
the supervisor logs it and calls the owner's `on_crash` (a model handle turns FAILED and fails
its queued requests), instead of leaving a model READY whose requests would wait forever.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)
OnCrash = Callable[[BaseException], None]


class TaskCrashedError(Exception):
    """A supervised task was cancelled by someone other than its owner."""


class Supervisor:
    """Starts, watches and stops the background tasks of one runtime."""

    def __init__(self) -> None:
        self._tasks: dict[asyncio.Task[Any], OnCrash | None] = {}
        self._stopping: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(
        self,
        coro: Coroutine[Any, Any, Any],
        name: str,
        on_crash: OnCrash | None = None,
    ) -> asyncio.Task[Any]:
        """Run `coro` as a task; `on_crash(error)` is called if it dies (on the loop thread)."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks[task] = on_crash
        task.add_done_callback(self._finished)
        return task

    def stop(self, task: asyncio.Task[Any]) -> None:
        """Cancel `task` on purpose: its end is not a crash."""
        if not task.done():
            self._stopping.add(task)
            task.cancel()

    async def stop_and_wait(self, task: asyncio.Task[Any]) -> None:
        """Cancel `task` on purpose and wait until it has ended."""
        self.stop(task)
        await asyncio.gather(task, return_exceptions=True)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        on_crash = self._tasks.pop(task, None)
        stopped = task in self._stopping
        self._stopping.discard(task)
        if task.cancelled():
            if stopped:
                return
            error: BaseException = TaskCrashedError(f"task '{task.get_name()}' was cancelled")
        else:
            exc = task.exception()
            if exc is None:
                return
            if stopped:  # its owner already gave up on it
                log.warning("task '%s' failed while stopping: %r", task.get_name(), exc)
                return
            error = exc
        log.error("background task '%s' died: %r", task.get_name(), error, exc_info=error)
        if on_crash is not None:
            try:
                on_crash(error)
            except Exception:
                log.exception("handling the death of task '%s' failed", task.get_name())

    async def aclose(self) -> None:
        """Stop every task still running and wait for them."""
        tasks = list(self._tasks)
        for task in tasks:
            self.stop(task)
        await asyncio.gather(*tasks, return_exceptions=True)
