"""Group commit for the SQLite store: one thread, one connection, calls batched into shared
transactions.

With `synchronous=FULL` every commit waits for the disk (an fsync, about 0.5 ms); a server
submitting, claiming and finishing jobs from many coroutines would spend its store thread on
fsyncs, one per call. Here the thread takes every call waiting when it is free, runs them in
one `BEGIN IMMEDIATE` transaction, each in its own savepoint (a call that raises is rolled
back alone, its caller gets the exception), commits once, and only then answers the callers:
an answer always means the change is on disk. The thread holds SQLite's write lock only while
it runs a batch, so other processes on the file interleave with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

_MAX_BATCH = 128  # calls per transaction: bounds how long the write lock is held
_Call = tuple[Callable[[sqlite3.Connection], Any], Future[Any]]


class SQLiteCommitter:
    """Runs functions of a connection on its own thread, batched into group commits.

    Args:
        connect: makes the connection (run on the thread, which keeps it).
        name: the thread's name.
    """

    def __init__(self, connect: Callable[[], sqlite3.Connection], name: str) -> None:
        self._connect = connect
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._started: Future[None] = Future()
        self._closing = threading.Lock()  # no call is queued behind the stop marker
        self._closed = False

    async def start(self) -> None:
        """Start the thread and connect; raises what connecting raised."""
        self._thread.start()
        await asyncio.wrap_future(self._started)

    async def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn(connection)` inside a transaction, answered once that transaction committed.

        A caller cancelled while its call waits drops the call; once it runs, it completes.
        """
        future: Future[T] = Future()
        with self._closing:
            if self._closed:
                raise RuntimeError("the job store is closed")
            self._calls.put((fn, future))
        return await asyncio.wrap_future(future)

    async def stop(self) -> None:
        """Finish the calls already made, close the connection and end the thread."""
        with self._closing:
            if self._closed:
                return
            self._closed = True
            self._calls.put(None)
        if self._thread.is_alive():
            await asyncio.to_thread(self._thread.join)

    def _main(self) -> None:
        # Running from here on: `start`'s future can no longer be cancelled under the result
        # (a caller that gave up before this point leaves nothing to connect).
        if not self._started.set_running_or_notify_cancel():
            return
        try:
            db = self._connect()
        except BaseException as exc:
            self._started.set_exception(exc)
            return
        self._started.set_result(None)
        try:
            while (batch := self._next_batch()) is not None:
                self._run(db, batch)
        finally:
            db.close()

    def _next_batch(self) -> list[_Call] | None:
        first = self._calls.get()
        if first is None:
            return None
        batch = [first]
        while len(batch) < _MAX_BATCH:
            try:
                call = self._calls.get_nowait()
            except queue.Empty:
                break
            if call is None:  # stop after this batch
                self._calls.put(None)
                break
            batch.append(call)
        return batch

    def _run(self, db: sqlite3.Connection, batch: list[_Call]) -> None:
        # A call whose caller was cancelled while it waited is dropped: nobody waits for it.
        live = [(fn, future) for fn, future in batch if future.set_running_or_notify_cancel()]
        if not live:
            return
        outcomes: list[tuple[Future[Any], Any, BaseException | None]] = []
        try:
            db.execute("BEGIN IMMEDIATE")
            for fn, future in live:
                outcomes.append((future, *_in_savepoint(db, fn)))
            db.execute("COMMIT")
        except Exception as exc:  # the batch failed whole (locked past the busy timeout, disk)
            with contextlib.suppress(sqlite3.Error):  # the thread must go on answering
                db.execute("ROLLBACK")
            for _, future in live:
                future.set_exception(exc)
            return
        for future, value, error in outcomes:
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(value)


def _in_savepoint(
    db: sqlite3.Connection, fn: Callable[[sqlite3.Connection], Any]
) -> tuple[Any, BaseException | None]:
    db.execute("SAVEPOINT call")
    try:
        value = fn(db)
    except Exception as exc:
        db.execute("ROLLBACK TO call")
        db.execute("RELEASE call")
        return None, exc
    db.execute("RELEASE call")
    return value, None
