"""The embedded job store: one SQLite file (WAL) in the server's state directory.

One connection, used only from one dedicated thread (`sqlite_committer.py`): every call is a
function run on that thread, so the event loop never blocks on the disk and the connection
never needs a lock. Calls run in `BEGIN IMMEDIATE` transactions, which take SQLite's write lock
first, so what a call reads stays true until it commits: two stores on one file (two servers,
or a server and a tool) serialize there, and a job is claimed once. The busy timeout makes the
second writer wait for the lock instead of failing. Calls waiting together share a transaction
and its commit (group commit).

WAL with `synchronous=FULL`: a commit reaches the disk before it returns, so a job that was
acknowledged survives the process being killed, and an operating system crash or power loss
too, as with PostgreSQL's default. (NORMAL would be about 5x faster per commit but may lose
the last commits to a power loss: accepted jobs and stored results, which is what this store
is for.)
"""

from __future__ import annotations

import builtins
import sqlite3
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TypeVar

from fnserve.jobs.model import Claim, Job, JobState, ModelJobCounts, NewJob
from fnserve.jobs.store.rows import (
    ACTIVE,
    COLUMNS,
    LEASE_EXPIRED,
    TERMINAL,
    counts_from_rows,
    id_time,
    job_from_row,
    new_job_id,
    same_request,
)
from fnserve.jobs.store.sqlite_committer import SQLiteCommitter
from fnserve.jobs.store.sqlite_schema import migrate

T = TypeVar("T")
_QUEUED, _RUNNING = JobState.QUEUED.value, JobState.RUNNING.value


class SQLiteJobStore:
    """Jobs in a SQLite file; see `base.JobStore` for what each method guarantees.

    Args:
        path: the database file (created, with its parent folders, by `open`).
        busy_timeout_s: how long a write waits for another connection's write lock.
    """

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self._busy_timeout_ms = int(busy_timeout_s * 1000)
        self._committer: SQLiteCommitter | None = None

    async def open(self) -> None:
        if self._committer is not None:
            return
        committer = SQLiteCommitter(self._connect, "fnserve-jobs-sqlite")
        await committer.start()
        self._committer = committer

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: no implicit transactions; each method says where its own begin.
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            db.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
            _enter_wal(db, self._busy_timeout_ms / 1000)
            db.execute("PRAGMA synchronous = FULL")
            migrate(db)
        except BaseException:
            db.close()
            raise
        return db

    async def close(self) -> None:
        if self._committer is not None:
            committer, self._committer = self._committer, None
            await committer.stop()

    async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._committer is None:
            raise RuntimeError("the job store is not open")
        return await self._committer.call(fn)

    async def submit(self, new: NewJob, now: float) -> tuple[Job, bool]:
        return await self._call(lambda db: _submit(db, new, now))

    async def get(self, job_id: str) -> Job | None:
        return await self._call(lambda db: _get(db, job_id))

    async def result(self, job_id: str) -> bytes | None:
        def read(db: sqlite3.Connection) -> bytes | None:
            row = db.execute(
                "SELECT r.result FROM fnserve_job_results r JOIN fnserve_jobs j ON j.id = r.job_id"
                " WHERE r.job_id = ? AND j.state = ?",
                (job_id, JobState.SUCCEEDED.value),
            ).fetchone()
            return None if row is None else bytes(row[0])

        return await self._call(read)

    async def list(
        self,
        *,
        model: str | None = None,
        state: JobState | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> builtins.list[Job]:
        return await self._call(lambda db: _list(db, model, state, limit, after))

    async def cancel(self, job_id: str, now: float) -> Job | None:
        def cancel(db: sqlite3.Connection) -> Job | None:
            db.execute(
                "UPDATE fnserve_jobs SET state = ?, finished_at = ?, worker = NULL,"
                " lease_until = NULL WHERE id = ? AND state IN (?, ?)",
                (JobState.CANCELLED.value, now, job_id, *ACTIVE),
            )
            return _get(db, job_id)

        return await self._call(cancel)

    async def claim(
        self,
        worker: str,
        limit: int,
        lease_s: float,
        now: float,
        models: Collection[str] | None = None,
    ) -> builtins.list[Claim]:
        return await self._call(lambda db: _claim(db, worker, limit, lease_s, now, models))

    async def renew(self, worker: str, held: Collection[tuple[str, int]], lease_s: float,
                    now: float) -> set[str]:  # fmt: skip
        def renew(db: sqlite3.Connection) -> set[str]:
            kept = set()
            for job_id, attempt in held:
                cursor = db.execute(
                    "UPDATE fnserve_jobs SET lease_until = ?"
                    " WHERE id = ? AND attempts = ? AND worker = ? AND state = ?",
                    (now + lease_s, job_id, attempt, worker, _RUNNING),
                )
                if cursor.rowcount:
                    kept.add(job_id)
            return kept

        return await self._call(renew)

    async def succeed(self, job_id: str, worker: str, attempt: int, result: bytes,
                      now: float) -> bool:  # fmt: skip
        def succeed(db: sqlite3.Connection) -> bool:
            cursor = db.execute(
                "UPDATE fnserve_jobs SET state = ?, finished_at = ?, error = NULL,"
                " result_size = ?, worker = NULL, lease_until = NULL"
                " WHERE id = ? AND attempts = ? AND worker = ? AND state = ?",
                (JobState.SUCCEEDED.value, now, len(result), job_id, attempt, worker, _RUNNING),
            )
            if not cursor.rowcount:
                return False
            db.execute(
                "INSERT INTO fnserve_job_results (job_id, result) VALUES (?, ?)",
                (job_id, result),
            )
            return True

        return await self._call(succeed)

    async def fail(self, job_id: str, worker: str, attempt: int, error: str, retry: bool,
                   now: float) -> bool:  # fmt: skip
        def fail(db: sqlite3.Connection) -> bool:
            cursor = db.execute(
                "UPDATE fnserve_jobs SET error = ?, worker = NULL, lease_until = NULL,"
                " state = CASE WHEN ? AND attempts < max_attempts THEN ? ELSE ? END,"
                " finished_at = CASE WHEN ? AND attempts < max_attempts THEN NULL ELSE ? END"
                " WHERE id = ? AND attempts = ? AND worker = ? AND state = ?",
                (
                    error,
                    retry,
                    _QUEUED,
                    JobState.FAILED.value,
                    retry,
                    now,
                    job_id,
                    attempt,
                    worker,
                    _RUNNING,
                ),  # fmt: skip
            )
            return bool(cursor.rowcount)

        return await self._call(fail)

    async def release(self, worker: str, held: Collection[tuple[str, int]]) -> None:
        def release(db: sqlite3.Connection) -> None:
            db.executemany(
                "UPDATE fnserve_jobs SET state = ?, attempts = attempts - 1, worker = NULL,"
                " lease_until = NULL"
                " WHERE id = ? AND attempts = ? AND worker = ? AND state = ?",
                [(_QUEUED, job_id, attempt, worker, _RUNNING) for job_id, attempt in held],
            )

        await self._call(release)

    async def backlog(self, model: str) -> int:
        def count(db: sqlite3.Connection) -> int:
            row = db.execute(
                "SELECT jobs FROM fnserve_job_counts WHERE model = ? AND state = ?",
                (model, _QUEUED),
            ).fetchone()
            return 0 if row is None else int(row[0])

        return await self._call(count)

    async def counts(self) -> builtins.list[ModelJobCounts]:
        return await self._call(_counts)

    async def expire(self, finished_before: float) -> int:
        def expire(db: sqlite3.Connection) -> int:
            done = "SELECT id FROM fnserve_jobs WHERE finished_at < ? AND state IN (?, ?, ?)"
            args = (finished_before, *TERMINAL)
            db.execute(f"DELETE FROM fnserve_job_results WHERE job_id IN ({done})", args)
            db.execute(f"DELETE FROM fnserve_job_requests WHERE job_id IN ({done})", args)
            return db.execute(f"DELETE FROM fnserve_jobs WHERE id IN ({done})", args).rowcount

        return await self._call(expire)


def _get(db: sqlite3.Connection, job_id: str) -> Job | None:
    row = db.execute(f"SELECT {COLUMNS} FROM fnserve_jobs WHERE id = ?", (job_id,)).fetchone()
    return None if row is None else job_from_row(row)


def _submit(db: sqlite3.Connection, new: NewJob, now: float) -> tuple[Job, bool]:
    if new.idempotency_key is not None:
        row = db.execute(
            f"SELECT {COLUMNS} FROM fnserve_jobs WHERE idempotency_key = ?",
            (new.idempotency_key,),
        ).fetchone()
        if row is not None:
            return same_request(job_from_row(row), new), False
    job_id = new_job_id(now)
    db.execute(
        "INSERT INTO fnserve_jobs (id, model, version, state, attempts, max_attempts,"
        " created_at, idempotency_key, callback_url, request_hash)"
        " VALUES (?, ?, ?, ?, 0, ?, ?, ?, ?, ?)",
        (
            job_id,
            new.model,
            new.version,
            _QUEUED,
            new.max_attempts,
            now,
            new.idempotency_key,
            new.callback_url,
            new.request_hash,
        ),  # fmt: skip
    )
    db.execute(
        "INSERT INTO fnserve_job_requests (job_id, request) VALUES (?, ?)",
        (job_id, new.request),
    )
    job = _get(db, job_id)
    assert job is not None  # inserted in this transaction
    return job, True


def _list(
    db: sqlite3.Connection, model: str | None, state: JobState | None, limit: int, after: str | None
) -> builtins.list[Job]:
    where, args = ["1"], list[object]()
    if model is not None:
        where.append("model = ?")
        args.append(model)
    if state is not None:
        where.append("state = ?")
        args.append(state.value)
    if after is not None:
        row = db.execute("SELECT created_at FROM fnserve_jobs WHERE id = ?", (after,)).fetchone()
        # The previous page's last job may have expired since: its id still carries its time.
        created = row[0] if row is not None else id_time(after)
        if created is None:
            return []  # not a job id
        where.append("(created_at < ? OR (created_at = ? AND id < ?))")
        args += [created, created, after]
    rows = db.execute(
        f"SELECT {COLUMNS} FROM fnserve_jobs WHERE {' AND '.join(where)}"
        " ORDER BY created_at DESC, id DESC LIMIT ?",
        [*args, max(0, limit)],
    ).fetchall()
    return [job_from_row(row) for row in rows]


def _claim(
    db: sqlite3.Connection,
    worker: str,
    limit: int,
    lease_s: float,
    now: float,
    models: Collection[str] | None,
) -> builtins.list[Claim]:
    of_models, model_args = "", list[object]()
    if models is not None:
        if not models:
            return []
        of_models = f" AND model IN ({', '.join('?' * len(models))})"
        model_args = list(models)
    # Dead workers' jobs that used their last attempt fail now, with their last error.
    db.execute(
        "UPDATE fnserve_jobs SET state = ?, finished_at = ?, error = COALESCE(error, ?),"
        " worker = NULL, lease_until = NULL"
        f" WHERE state = ? AND lease_until <= ? AND attempts >= max_attempts{of_models}",
        [JobState.FAILED.value, now, LEASE_EXPIRED, _RUNNING, now, *model_args],
    )
    # Ordered index scans, each stopping at `limit` (queued jobs, of each model when given;
    # running ones whose lease expired), rather than one query that sorts the whole queue.
    queued = "SELECT created_at, id FROM fnserve_jobs WHERE state = ?"
    candidates = []
    for model in [None] if models is None else models:
        candidates += db.execute(
            queued
            + ("" if model is None else " AND model = ?")
            + " ORDER BY created_at, id LIMIT ?",
            [_QUEUED, *([] if model is None else [model]), max(0, limit)],
        ).fetchall()
    candidates += db.execute(
        f"SELECT created_at, id FROM fnserve_jobs WHERE state = ? AND lease_until <= ?"
        f"{of_models} ORDER BY created_at, id LIMIT ?",
        [_RUNNING, now, *model_args, max(0, limit)],
    ).fetchall()
    ids = [job_id for _, job_id in sorted(candidates)[: max(0, limit)]]
    db.executemany(
        "UPDATE fnserve_jobs SET state = ?, attempts = attempts + 1, worker = ?,"
        " lease_until = ?, started_at = ? WHERE id = ?",
        [(_RUNNING, worker, now + lease_s, now, job_id) for job_id in ids],
    )
    claims = []
    for job_id in ids:
        row = db.execute(
            f"SELECT {COLUMNS}, r.request FROM fnserve_jobs j"
            " JOIN fnserve_job_requests r ON r.job_id = j.id WHERE j.id = ?",
            (job_id,),
        ).fetchone()
        job = job_from_row(row[:-1])
        claims.append(Claim(job=job, request=bytes(row[-1]), attempt=job.attempts))
    return claims


def _counts(db: sqlite3.Connection) -> builtins.list[ModelJobCounts]:
    rows = db.execute(
        "SELECT c.model, c.state, c.jobs, CASE c.state WHEN ? THEN"
        " (SELECT MIN(created_at) FROM fnserve_jobs j WHERE j.model = c.model AND j.state = ?)"
        " END FROM fnserve_job_counts c"
        " WHERE c.model IN (SELECT model FROM fnserve_job_counts WHERE jobs > 0)",
        (_QUEUED, _QUEUED),
    ).fetchall()
    return counts_from_rows(rows)


def _enter_wal(db: sqlite3.Connection, timeout_s: float) -> None:
    """Switch the database to WAL, retrying within `timeout_s` while it is locked: the switch
    needs the file to itself, and SQLite answers "database is locked" at once instead of
    calling the busy handler when other connections are opening the same new file (seen with
    six stores opening one new database together)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)
