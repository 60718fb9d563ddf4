"""Daemon threads for blocking calls into user code, which may never return.

`concurrent.futures.ThreadPoolExecutor` joins its workers at interpreter exit, so one model
stuck in `time.sleep(3600)` would keep the whole server process alive after shutdown. These
threads are daemons: a stuck one is left behind, and the process still exits.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")
_Call = tuple["Future[Any]", Callable[..., Any], tuple[Any, ...]]


class DaemonWorker:
    """One daemon thread that runs submitted calls in order (a one-thread executor).

    Args:
        name: the thread's name (shows in stack dumps and profilers).
    """

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Queue `fn(*args)`; the future holds its result or exception."""
        future: Future[T] = Future()
        self._calls.put((future, fn, args))
        return future

    def _work(self) -> None:
        while (call := self._calls.get()) is not None:
            future, fn, args = call
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # handed to the awaiting side, never lost
                future.set_exception(exc)

    def shutdown(self, wait: bool) -> None:
        """Stop after the calls already queued; `wait` joins the thread (never do that on
        a stuck one)."""
        self._calls.put(None)
        if wait:
            self._thread.join()


async def run_in_daemon_thread(fn: Callable[..., T], *args: Any) -> T:
    """Run blocking `fn(*args)` on a fresh daemon thread and await its result.

    For rare calls into user code (building or releasing an instance): unlike the loop's
    default executor, a call that hangs does not delay the process's exit.
    """
    worker = DaemonWorker(f"fnserve-{getattr(fn, '__name__', 'call')}")
    try:
        return await asyncio.wrap_future(worker.submit(fn, *args))
    finally:
        worker.shutdown(wait=False)
