"""The shared job store: one PostgreSQL database that every server of a fleet claims jobs from.

asyncpg (the `fnserve[postgres]` extra) with a connection pool. A claim picks jobs with
`FOR UPDATE SKIP LOCKED` and marks them RUNNING in the same statement, so concurrent claimers
on any number of servers each take different jobs and none waits for another. Every outcome
(`succeed`, `fail`, `renew`, `release`) names the attempt it belongs to and changes the job
only while that attempt still holds it: a worker whose lease expired cannot overwrite the
attempt that replaced it. Times are the callers' clocks (seconds since the epoch), so the
servers of a fleet need synchronized clocks, as any lease does.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections.abc import Collection

from fnserve.jobs.model import Claim, Job, JobState, ModelJobCounts, NewJob
from fnserve.jobs.store.rows import (
    LEASE_EXPIRED,
    counts_from_rows,
    job_from_row,
    new_job_id,
    same_request,
)

try:
    import asyncpg
except ImportError as exc:  # the driver is an extra: say how to install it
    raise ImportError(
        "a postgresql:// jobs database needs the asyncpg driver: "
        "pip install 'fnserve[postgres]' (or: pip install asyncpg)"
    ) from exc

from fnserve.jobs.store.postgres_schema import fold_counts, migrate

log = logging.getLogger(__name__)
_CLOSE_TIMEOUT_S = 5.0

_COLUMNS = (
    "j.id, j.model, j.version, j.state, j.attempts, j.max_attempts, j.created_at, j.started_at,"
    " j.finished_at, j.error, j.idempotency_key, j.callback_url, j.request_hash, j.result_size"
)

_SUBMIT = f"""
WITH j AS (
    INSERT INTO fnserve_jobs (id, model, version, state, attempts, max_attempts, created_at,
                              idempotency_key, callback_url, request_hash)
    VALUES ($1, $2, $3, 'queued', 0, $4, $5, $6, $7, $8)
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING *
), r AS (
    INSERT INTO fnserve_job_requests (job_id, request) SELECT id, $9::bytea FROM j
)
SELECT {_COLUMNS} FROM j
"""

# Dead workers' jobs that used their last attempt fail, with their last error.
_FAIL_EXPIRED = """
UPDATE fnserve_jobs SET state = 'failed', finished_at = $1, error = COALESCE(error, $2),
                        worker = NULL, lease_until = NULL
WHERE id IN (SELECT id FROM fnserve_jobs
             WHERE state = 'running' AND lease_until <= $1 AND attempts >= max_attempts
             FOR UPDATE SKIP LOCKED)
"""

# Two index scans, oldest first each (queued jobs; running ones whose lease expired), rather
# than one OR that sorts the whole queue; with `models`, one ordered scan per model (a scan of
# `model = ANY(...)` would sort every queued job of them). Rows locked beyond `limit` are let
# go at commit.
_CLAIM = """
WITH queued AS ({queued}), expired AS (
    SELECT id, created_at FROM fnserve_jobs
    WHERE state = 'running' AND lease_until <= $3 AND attempts < max_attempts{of_models}
    ORDER BY created_at, id LIMIT $4 FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT id FROM (SELECT * FROM queued UNION ALL SELECT * FROM expired) c
    ORDER BY created_at, id LIMIT $4
)
UPDATE fnserve_jobs j SET state = 'running', attempts = j.attempts + 1, worker = $1,
                          lease_until = $3::double precision + $2::double precision,
                          started_at = $3
FROM picked, fnserve_job_requests r
WHERE j.id = picked.id AND r.job_id = j.id
RETURNING {columns}, r.request
"""
_CLAIM_ANY = _CLAIM.format(
    queued="SELECT id, created_at FROM fnserve_jobs WHERE state = 'queued'"
    " ORDER BY created_at, id LIMIT $4 FOR UPDATE SKIP LOCKED",
    of_models="",
    columns=_COLUMNS,
)
_CLAIM_OF_MODELS = _CLAIM.format(
    queued="SELECT q.id, q.created_at FROM unnest($5::text[]) m (name), LATERAL ("
    " SELECT id, created_at FROM fnserve_jobs WHERE state = 'queued' AND model = m.name"
    " ORDER BY created_at, id LIMIT $4 FOR UPDATE SKIP LOCKED) q",
    of_models=" AND model = ANY($5::text[])",
    columns=_COLUMNS,
)

_SUCCEED = """
WITH done AS (
    UPDATE fnserve_jobs SET state = 'succeeded', finished_at = $5, error = NULL,
                            result_size = length($4::bytea), worker = NULL, lease_until = NULL
    WHERE id = $1 AND attempts = $3 AND worker = $2 AND state = 'running'
    RETURNING id
)
INSERT INTO fnserve_job_results (job_id, result) SELECT id, $4::bytea FROM done RETURNING job_id
"""

_FAIL = """
UPDATE fnserve_jobs SET error = $4, worker = NULL, lease_until = NULL,
    state = CASE WHEN $5 AND attempts < max_attempts THEN 'queued' ELSE 'failed' END,
    finished_at = CASE WHEN $5 AND attempts < max_attempts THEN NULL ELSE $6::double precision END
WHERE id = $1 AND attempts = $3 AND worker = $2 AND state = 'running'
RETURNING id
"""


class PostgresJobStore:
    """Jobs in a PostgreSQL database; see `base.JobStore` for what each method guarantees.

    Args:
        url: a libpq connection URL, `postgresql://user:password@host:port/database`.
        max_connections: the pool's size (each concurrent call holds one for its duration).
    """

    def __init__(self, url: str, *, max_connections: int = 10) -> None:
        self.url = url
        self._max_connections = max_connections
        self._pool: asyncpg.Pool | None = None

    async def open(self) -> None:
        if self._pool is not None:
            return
        pool = await asyncpg.create_pool(self.url, min_size=1, max_size=self._max_connections)
        try:
            async with pool.acquire() as db:
                await migrate(db)
                await fold_counts(db)
        except BaseException:
            await pool.close()
            raise
        self._pool = pool

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            try:  # a connection still held (a query cut off by shutdown) must not hang it
                await asyncio.wait_for(pool.close(), _CLOSE_TIMEOUT_S)
            except TimeoutError:
                log.warning("jobs: PostgreSQL connections still busy at shutdown; closed hard")
                pool.terminate()

    @property
    def _db(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError("the job store is not open")
        return self._pool

    async def submit(self, new: NewJob, now: float) -> tuple[Job, bool]:
        while True:
            row = await self._db.fetchrow(
                _SUBMIT, new_job_id(now), new.model, new.version, new.max_attempts, now,
                new.idempotency_key, new.callback_url, new.request_hash, new.request,
            )  # fmt: skip
            if row is not None:
                return job_from_row(tuple(row)), True
            # The key is taken: ON CONFLICT waited for its transaction, so the job is visible
            # now, unless it expired in between (then the insert is tried again).
            existing = await self._db.fetchrow(
                f"SELECT {_COLUMNS} FROM fnserve_jobs j WHERE idempotency_key = $1",
                new.idempotency_key,
            )
            if existing is not None:
                return same_request(job_from_row(tuple(existing)), new), False

    async def get(self, job_id: str) -> Job | None:
        row = await self._db.fetchrow(
            f"SELECT {_COLUMNS} FROM fnserve_jobs j WHERE id = $1", job_id
        )
        return None if row is None else job_from_row(tuple(row))

    async def result(self, job_id: str) -> bytes | None:
        value = await self._db.fetchval(
            "SELECT r.result FROM fnserve_job_results r JOIN fnserve_jobs j ON j.id = r.job_id"
            " WHERE r.job_id = $1 AND j.state = 'succeeded'",
            job_id,
        )
        return None if value is None else bytes(value)

    async def list(
        self,
        *,
        model: str | None = None,
        state: JobState | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> builtins.list[Job]:
        # Only the filters given, so each query shape gets the plan (and index) that fits it.
        where, args = ["true"], builtins.list[object]()
        if model is not None:
            args.append(model)
            where.append(f"model = ${len(args)}")
        if state is not None:
            args.append(state.value)
            where.append(f"state = ${len(args)}")
        if after is not None:
            args.append(after)
            where.append(_after(f"${len(args)}"))
        args.append(max(0, limit))
        rows = await self._db.fetch(
            f"SELECT {_COLUMNS} FROM fnserve_jobs j WHERE {' AND '.join(where)}"
            f" ORDER BY created_at DESC, id DESC LIMIT ${len(args)}",
            *args,
        )
        return [job_from_row(tuple(row)) for row in rows]

    async def cancel(self, job_id: str, now: float) -> Job | None:
        async with self._db.acquire() as db, db.transaction():
            await db.execute(
                "UPDATE fnserve_jobs SET state = 'cancelled', finished_at = $2, worker = NULL,"
                " lease_until = NULL WHERE id = $1 AND state IN ('queued', 'running')",
                job_id,
                now,
            )
            row = await db.fetchrow(f"SELECT {_COLUMNS} FROM fnserve_jobs j WHERE id = $1", job_id)
        return None if row is None else job_from_row(tuple(row))

    async def claim(
        self,
        worker: str,
        limit: int,
        lease_s: float,
        now: float,
        models: Collection[str] | None = None,
    ) -> builtins.list[Claim]:
        names = None if models is None else builtins.list(models)
        if limit <= 0 or names == []:
            return []
        async with self._db.acquire() as db, db.transaction():
            await db.execute(_FAIL_EXPIRED, now, LEASE_EXPIRED)
            if names is None:
                rows = await db.fetch(_CLAIM_ANY, worker, lease_s, now, limit)
            else:
                rows = await db.fetch(_CLAIM_OF_MODELS, worker, lease_s, now, limit, names)
        claims = [
            Claim(job_from_row(tuple(row)[:-1]), bytes(row[-1]), row["attempts"]) for row in rows
        ]
        return sorted(claims, key=lambda claim: (claim.job.created_at, claim.job.id))

    async def renew(self, worker: str, held: Collection[tuple[str, int]], lease_s: float,
                    now: float) -> set[str]:  # fmt: skip
        if not held:
            return set()
        rows = await self._db.fetch(
            "UPDATE fnserve_jobs j SET lease_until = $2 FROM unnest($3::text[], $4::int[]) h(id, n)"
            " WHERE j.id = h.id AND j.attempts = h.n AND j.worker = $1 AND j.state = 'running'"
            " RETURNING j.id",
            worker, now + lease_s, [i for i, _ in held], [n for _, n in held],
        )  # fmt: skip
        return {row["id"] for row in rows}

    async def succeed(self, job_id: str, worker: str, attempt: int, result: bytes,
                      now: float) -> bool:  # fmt: skip
        done = await self._db.fetchval(_SUCCEED, job_id, worker, attempt, result, now)
        return done is not None

    async def fail(self, job_id: str, worker: str, attempt: int, error: str, retry: bool,
                   now: float) -> bool:  # fmt: skip
        done = await self._db.fetchval(_FAIL, job_id, worker, attempt, error, retry, now)
        return done is not None

    async def release(self, worker: str, held: Collection[tuple[str, int]]) -> None:
        if held:
            await self._db.execute(
                "UPDATE fnserve_jobs j SET state = 'queued', attempts = j.attempts - 1,"
                " worker = NULL, lease_until = NULL FROM unnest($2::text[], $3::int[]) h(id, n)"
                " WHERE j.id = h.id AND j.attempts = h.n AND j.worker = $1 AND j.state = 'running'",
                worker, [i for i, _ in held], [n for _, n in held],
            )  # fmt: skip

    async def backlog(self, model: str) -> int:
        count = await self._db.fetchval(
            "SELECT coalesce(sum(jobs), 0) FROM fnserve_job_counts"
            " WHERE model = $1 AND state = 'queued'",
            model,
        )
        return int(count)

    async def counts(self) -> builtins.list[ModelJobCounts]:
        rows = await self._db.fetch(
            """
            WITH c AS (
                SELECT model, state, sum(jobs) AS jobs FROM fnserve_job_counts
                GROUP BY model, state
            )
            SELECT model, state, jobs, CASE WHEN state = 'queued' THEN
                (SELECT min(created_at) FROM fnserve_jobs j
                 WHERE j.state = 'queued' AND j.model = c.model) END
            FROM c WHERE model IN (SELECT model FROM c WHERE jobs > 0)
            """
        )
        return counts_from_rows(tuple(row) for row in rows)

    async def expire(self, finished_before: float) -> int:
        # The requests and results go with their jobs (ON DELETE CASCADE).
        async with self._db.acquire() as db:
            status = await db.execute(
                "DELETE FROM fnserve_jobs WHERE finished_at < $1"
                " AND state IN ('succeeded', 'failed', 'cancelled')",
                finished_before,
            )
            await fold_counts(db)  # now and then, as expiry runs
        return int(status.split()[-1])  # "DELETE 42"


def _after(param: str) -> str:
    """The condition for jobs listed after the job `param` names.

    The previous page's last job may have expired since: its id still carries its time
    (milliseconds, its first 12 hex digits). A token that is no job id gives no page.
    """
    created = f"(SELECT created_at FROM fnserve_jobs WHERE id = {param})"
    from_id = f"('x' || lpad(left({param}, 12), 16, '0'))::bit(64)::bigint / 1000.0"
    return (
        f"(created_at, id) < (COALESCE({created},"
        f" CASE WHEN {param} ~ '^[0-9a-f]{{12}}' THEN {from_id} END), {param})"
    )
