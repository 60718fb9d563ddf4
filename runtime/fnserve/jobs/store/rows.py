"""What the SQL stores share: job ids, the jobs table's columns and a row as a `Job`."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterable, Sequence

from fnserve.jobs.model import Job, JobConflictError, JobState, ModelJobCounts, NewJob

LEASE_EXPIRED = "the worker running it stopped renewing its lease"

# The order `job_from_row` reads; both stores select exactly these columns.
COLUMNS = (
    "id, model, version, state, attempts, max_attempts, created_at, started_at, finished_at, "
    "error, idempotency_key, callback_url, request_hash, result_size"
)

ACTIVE = (JobState.QUEUED.value, JobState.RUNNING.value)
TERMINAL = tuple(state.value for state in JobState if state.terminal)


def new_job_id(now: float) -> str:
    """A random, URL-safe id that sorts by creation time (to the millisecond).

    12 hex digits of milliseconds since the epoch, then 80 random bits in lower-case base32:
    `0196a3c2e4f1k3v9q0z8m2xw7hbd4n`. Sorting ids keeps index pages of new jobs together.
    """
    millis = max(0, int(now * 1000))
    random = base64.b32encode(os.urandom(10)).decode().lower()
    return f"{millis:012x}{random}"


def id_time(job_id: str) -> float | None:
    """The creation time an id carries (to the millisecond; None when it carries none)."""
    prefix = job_id[:12]
    if len(prefix) < 12 or prefix.strip("0123456789abcdef"):
        return None
    return int(prefix, 16) / 1000


def job_from_row(row: Sequence[object]) -> Job:
    """A `Job` from the values of `COLUMNS`, in that order."""
    (id_, model, version, state, attempts, max_attempts, created_at, started_at, finished_at,
     error, idempotency_key, callback_url, request_hash, result_size) = row  # fmt: skip
    return Job(
        id=str(id_),
        model=str(model),
        version=str(version),
        state=JobState(state),
        attempts=int(attempts),  # type: ignore[call-overload]
        max_attempts=int(max_attempts),  # type: ignore[call-overload]
        created_at=float(created_at),  # type: ignore[arg-type]
        started_at=_float(started_at),
        finished_at=_float(finished_at),
        error=None if error is None else str(error),
        idempotency_key=None if idempotency_key is None else str(idempotency_key),
        callback_url=None if callback_url is None else str(callback_url),
        request_hash=str(request_hash),
        result_size=None if result_size is None else int(result_size),  # type: ignore[call-overload]
    )


def _float(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def counts_from_rows(rows: Iterable[Sequence[object]]) -> list[ModelJobCounts]:
    """`ModelJobCounts` per model from (model, state, count, oldest created_at) rows."""
    by_model: dict[str, dict[JobState, int]] = {}
    oldest: dict[str, float] = {}
    for model, state, count, first in rows:
        name = str(model)
        by_model.setdefault(name, dict.fromkeys(JobState, 0))[JobState(state)] = int(count)  # type: ignore[call-overload]
        if state == JobState.QUEUED.value:
            oldest[name] = float(first)  # type: ignore[arg-type]
    return [ModelJobCounts(m, by_state, oldest.get(m)) for m, by_state in sorted(by_model.items())]


def same_request(job: Job, new: NewJob) -> Job:
    """`job`, the one `new`'s idempotency key names, when `new` asks for the same request.

    Raises:
        JobConflictError: the key was used for a different request.
    """
    if job.request_hash != new.request_hash:
        raise JobConflictError(
            f"idempotency key {new.idempotency_key!r} was used for a different request "
            f"(job {job.id}); use a new key for a new request"
        )
    return job
