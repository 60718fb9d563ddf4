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
# What a call hands its outcome to: (result, None) or (None, exception). Runs on the worker.
_Settle = Callable[[Any, BaseException | None], None]
_Call = tuple[Callable[[], bool], _Settle, Callable[..., Any], tuple[Any, ...]]


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

        def settle(result: Any, error: BaseException | None) -> None:
            if error is None:
                future.set_result(result)
            else:
                future.set_exception(error)

        self._calls.put((future.set_running_or_notify_cancel, settle, fn, args))
        return future

    def call(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Queue `fn(*args)` and return a future of the running loop that gets its outcome.

        The hot path of every batch: the worker resolves the loop's own future with one
        `call_soon_threadsafe`, which saves the concurrent future, its chaining callbacks and
        a loop turn that `asyncio.wrap_future(submit(...))` costs (about 10 us per call here).
        A future cancelled before the call starts skips the call.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()

        def settle(result: Any, error: BaseException | None) -> None:
            try:
                loop.call_soon_threadsafe(_resolve, future, result, error)
            except RuntimeError:  # the loop is closed: the server is gone, nobody waits
                pass

        self._calls.put((lambda: not future.cancelled(), settle, fn, args))
        return future

    def _work(self) -> None:
        while (call := self._calls.get()) is not None:
            self._run(*call)
            # Nothing of a finished call may stay referenced from this frame while it waits:
            # a released model's instance would stay in memory until the next call.
            del call

    @staticmethod
    def _run(
        start: Callable[[], bool], settle: _Settle, fn: Callable[..., Any], args: tuple[Any, ...]
    ) -> None:
        if not start():
            return
        try:
            result = fn(*args)
        except BaseException as exc:  # handed to the awaiting side, never lost
            settle(None, exc)
        else:
            settle(result, None)

    def shutdown(self, wait: bool) -> None:
        """Stop after the calls already queued; `wait` joins the thread (never do that on
        a stuck one)."""
        self._calls.put(None)
        if wait:
            self._thread.join()


def _resolve(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    """On the loop: hand a worker's outcome over, unless the awaiting side gave up."""
    if future.cancelled():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


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
