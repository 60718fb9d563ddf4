"""Where jobs live: `base.JobStore` is the seam; `sqlite.py` (embedded default) and `postgres.py`
(shared by a fleet) implement it with the same semantics, checked by one test suite."""

from __future__ import annotations

from pathlib import Path

from fnserve.jobs.store.base import JobStore

__all__ = ["JobStore", "open_store"]

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def open_store(target: str | Path) -> JobStore:
    """The store `target` names (not yet opened: call and await `open()`).

    Args:
        target: a `postgresql://` (or `postgres://`) URL for a PostgreSQL database shared by
            several servers; anything else is the path of a SQLite file, created with its
            parent folders when opened.

    Raises:
        ImportError: a PostgreSQL URL, and the driver is not installed (the message says how).
    """
    if isinstance(target, str) and target.startswith(_POSTGRES_SCHEMES):
        from fnserve.jobs.store.postgres import PostgresJobStore  # the driver is an extra

        return PostgresJobStore(target)
    from fnserve.jobs.store.sqlite import SQLiteJobStore

    return SQLiteJobStore(target)
