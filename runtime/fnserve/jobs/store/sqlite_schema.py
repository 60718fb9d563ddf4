"""The SQLite store's schema, as numbered migrations applied by `migrate` when a store opens.

A migration is appended, never edited: a database records the number it reached in
`fnserve_jobs_schema`, and `migrate` applies the ones after it, in one write transaction, so two
servers opening one file at once apply each exactly once.
"""

from __future__ import annotations

import sqlite3

# Requests and results live in their own tables: listing, claiming and counting jobs then scan
# small rows, and a result is written once, by the transaction that makes the job SUCCEEDED.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE fnserve_jobs (
            id TEXT PRIMARY KEY,
            model TEXT NOT NULL,
            version TEXT NOT NULL,
            state TEXT NOT NULL,
            attempts INTEGER NOT NULL,
            max_attempts INTEGER NOT NULL,
            created_at REAL NOT NULL,
            started_at REAL,
            finished_at REAL,
            error TEXT,
            idempotency_key TEXT UNIQUE,
            callback_url TEXT,
            request_hash TEXT NOT NULL,
            result_size INTEGER,
            worker TEXT,
            lease_until REAL
        )""",
        "CREATE TABLE fnserve_job_requests (job_id TEXT PRIMARY KEY, request BLOB NOT NULL)",
        "CREATE TABLE fnserve_job_results (job_id TEXT PRIMARY KEY, result BLOB NOT NULL)",
        # claim (oldest queued first; running ones, few, for dead workers), counts by state
        "CREATE INDEX fnserve_jobs_by_state ON fnserve_jobs (state, created_at, id)",
        # backlog, claim and list of some models
        "CREATE INDEX fnserve_jobs_by_model ON fnserve_jobs (model, state, created_at, id)",
        # list, newest first
        "CREATE INDEX fnserve_jobs_by_time ON fnserve_jobs (created_at, id)",
        # expiry of finished jobs
        "CREATE INDEX fnserve_jobs_by_finish ON fnserve_jobs (finished_at)",
    ),
)


class SchemaVersionError(RuntimeError):
    """The database was migrated by a newer fnserve than this one."""


def migrate(db: sqlite3.Connection) -> int:
    """Bring the schema to the newest version; returns it. Idempotent.

    Raises:
        SchemaVersionError: the database's schema is newer than this code knows.
    """
    db.execute("BEGIN IMMEDIATE")
    try:
        version = _apply(db)
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return version


def _apply(db: sqlite3.Connection) -> int:
    db.execute("CREATE TABLE IF NOT EXISTS fnserve_jobs_schema (version INTEGER NOT NULL)")
    row = db.execute("SELECT version FROM fnserve_jobs_schema").fetchone()
    current = 0 if row is None else int(row[0])
    if current > len(MIGRATIONS):
        raise SchemaVersionError(
            f"the jobs database has schema version {current}, newer than this fnserve knows "
            f"({len(MIGRATIONS)}): upgrade fnserve, or use another --jobs-db"
        )
    for statements in MIGRATIONS[current:]:
        for statement in statements:
            db.execute(statement)
    if row is None:
        db.execute("INSERT INTO fnserve_jobs_schema (version) VALUES (?)", (len(MIGRATIONS),))
    else:
        db.execute("UPDATE fnserve_jobs_schema SET version = ?", (len(MIGRATIONS),))
    return len(MIGRATIONS)
