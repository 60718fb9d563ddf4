"""The SQLite store's group commit: shared transactions, one savepoint per call."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from fnserve.jobs.store.sqlite_committer import SQLiteCommitter


class Connector:
    """Makes the committer's connection and counts the commits it runs."""

    def __init__(self, path: Path, busy_timeout_ms: int = 5000) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self.commits = 0

    def __call__(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute(f"PRAGMA busy_timeout = {self.busy_timeout_ms}")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("CREATE TABLE IF NOT EXISTS t (v INTEGER)")
        db.set_trace_callback(self._trace)
        return db

    def _trace(self, statement: str) -> None:
        if statement == "COMMIT":
            self.commits += 1


@pytest.fixture
def connector(tmp_path: Path) -> Connector:
    return Connector(tmp_path / "c.db", busy_timeout_ms=200)


@pytest.fixture
async def committer(connector: Connector) -> AsyncIterator[SQLiteCommitter]:
    committer = SQLiteCommitter(connector, "test-committer")
    await committer.start()
    yield committer
    await committer.stop()


def insert(value: int) -> Callable[[sqlite3.Connection], int]:
    return lambda db: db.execute("INSERT INTO t VALUES (?)", (value,)).rowcount


def values(db: sqlite3.Connection) -> list[int]:
    return [row[0] for row in db.execute("SELECT v FROM t ORDER BY v")]


async def test_concurrent_calls_share_commits(
    committer: SQLiteCommitter, connector: Connector
) -> None:
    results = await asyncio.gather(*(committer.call(insert(i)) for i in range(200)))
    assert results == [1] * 200
    assert await committer.call(values) == list(range(200))
    assert connector.commits < 100  # one commit per call would be 201


async def test_a_failing_call_is_rolled_back_alone(committer: SQLiteCommitter) -> None:
    def insert_then_fail(db: sqlite3.Connection) -> None:
        db.execute("INSERT INTO t VALUES (2)")
        raise ValueError("boom")

    outcomes = await asyncio.gather(
        committer.call(insert(1)),
        committer.call(insert_then_fail),
        committer.call(insert(3)),
        return_exceptions=True,
    )
    assert [outcomes[0], outcomes[2]] == [1, 1]
    assert isinstance(outcomes[1], ValueError)
    assert await committer.call(values) == [1, 3]


async def test_a_call_cancelled_while_it_waits_is_dropped(committer: SQLiteCommitter) -> None:
    release = threading.Event()
    ran: list[str] = []
    blocker = asyncio.ensure_future(committer.call(lambda db: release.wait(10)))
    await asyncio.sleep(0.05)  # the thread now runs the blocker
    waiting = asyncio.ensure_future(committer.call(lambda db: ran.append("dropped")))
    await asyncio.sleep(0.05)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await asyncio.sleep(0.01)  # the cancellation reaches the call's future
    release.set()
    assert await blocker is True
    await committer.call(lambda db: ran.append("later"))
    assert ran == ["later"]


async def test_a_batch_that_cannot_lock_fails_and_the_thread_goes_on(
    committer: SQLiteCommitter, connector: Connector
) -> None:
    other = sqlite3.connect(connector.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # holds the write lock past the 0.2 s busy timeout
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            await committer.call(insert(1))
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert await committer.call(insert(2)) == 1
    assert await committer.call(values) == [2]


async def test_a_connection_that_fails_fails_start(tmp_path: Path) -> None:
    def broken() -> sqlite3.Connection:
        raise sqlite3.OperationalError("unable to open database file")

    with pytest.raises(sqlite3.OperationalError, match="unable to open"):
        await SQLiteCommitter(broken, "test-committer").start()


async def test_calls_after_stop_are_refused(connector: Connector) -> None:
    committer = SQLiteCommitter(connector, "test-committer")
    await committer.start()
    pending = asyncio.ensure_future(committer.call(insert(1)))
    await asyncio.sleep(0)  # queued
    await committer.stop()
    assert await pending == 1  # made before the stop: finished
    with pytest.raises(RuntimeError, match="closed"):
        await committer.call(insert(2))
    await committer.stop()  # twice is fine
