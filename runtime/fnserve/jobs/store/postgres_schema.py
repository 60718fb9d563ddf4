"""The PostgreSQL store's schema, as numbered migrations applied by `migrate` when a store opens.

Several servers of a fleet start at once and each opens the store: `migrate` runs in one
transaction holding a transaction-level advisory lock, so one of them applies the migrations
and the others then find the schema current. A migration is appended, never edited.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from asyncpg import Record
    from asyncpg.pool import PoolConnectionProxy

# An arbitrary constant naming fnserve's schema lock among the database's advisory locks.
_LOCK_KEY = 0x666E_7365_7276_6A01

# Requests and results live in their own tables: listing, claiming and counting jobs then scan
# small rows, and a result is written once, by the statement that makes the job SUCCEEDED.
# The partial indexes hold only the few rows a claim looks at, however many jobs have finished.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE fnserve_jobs (
            id text PRIMARY KEY,
            model text NOT NULL,
            version text NOT NULL,
            state text NOT NULL,
            attempts integer NOT NULL,
            max_attempts integer NOT NULL,
            created_at double precision NOT NULL,
            started_at double precision,
            finished_at double precision,
            error text,
            idempotency_key text UNIQUE,
            callback_url text,
            request_hash text NOT NULL,
            result_size bigint,
            worker text,
            lease_until double precision
        )""",
        """CREATE TABLE fnserve_job_requests (
            job_id text PRIMARY KEY REFERENCES fnserve_jobs (id) ON DELETE CASCADE,
            request bytea NOT NULL
        )""",
        """CREATE TABLE fnserve_job_results (
            job_id text PRIMARY KEY REFERENCES fnserve_jobs (id) ON DELETE CASCADE,
            result bytea NOT NULL
        )""",
        # claim, oldest first; backlog and claim of some models
        "CREATE INDEX fnserve_jobs_queued ON fnserve_jobs (created_at, id) WHERE state = 'queued'",
        "CREATE INDEX fnserve_jobs_queued_by_model ON fnserve_jobs (model, created_at, id)"
        " WHERE state = 'queued'",
        # claim of jobs whose worker died
        "CREATE INDEX fnserve_jobs_running ON fnserve_jobs (lease_until) WHERE state = 'running'",
        # list: all, of a model, in a state; counts
        "CREATE INDEX fnserve_jobs_by_time ON fnserve_jobs (created_at, id)",
        "CREATE INDEX fnserve_jobs_by_model ON fnserve_jobs (model, created_at, id)",
        "CREATE INDEX fnserve_jobs_by_state ON fnserve_jobs (state, model, created_at, id)",
        # expiry of finished jobs
        "CREATE INDEX fnserve_jobs_finished ON fnserve_jobs (finished_at)"
        " WHERE finished_at IS NOT NULL",
    ),
)


class SchemaVersionError(RuntimeError):
    """The database was migrated by a newer fnserve than this one."""


async def migrate(db: PoolConnectionProxy[Record]) -> int:
    """Bring the schema to the newest version; returns it. Idempotent, and safe to run from
    several servers at once.

    Raises:
        SchemaVersionError: the database's schema is newer than this code knows.
    """
    async with db.transaction():
        await db.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY)
        await db.execute(
            "CREATE TABLE IF NOT EXISTS fnserve_jobs_schema (version integer NOT NULL)"
        )
        current = await db.fetchval("SELECT version FROM fnserve_jobs_schema")
        if current is not None and current > len(MIGRATIONS):
            raise SchemaVersionError(
                f"the jobs database has schema version {current}, newer than this fnserve knows "
                f"({len(MIGRATIONS)}): upgrade fnserve, or use another --jobs-db"
            )
        for statements in MIGRATIONS[current or 0 :]:
            for statement in statements:
                await db.execute(statement)
        if current is None:
            await db.execute("INSERT INTO fnserve_jobs_schema VALUES ($1)", len(MIGRATIONS))
        else:
            await db.execute("UPDATE fnserve_jobs_schema SET version = $1", len(MIGRATIONS))
    return len(MIGRATIONS)
