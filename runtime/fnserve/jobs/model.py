"""The records of the jobs subsystem: a job, its state and what a worker holds while running it."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class JobState(enum.Enum):
    """Where a job is. QUEUED -> RUNNING -> SUCCEEDED | FAILED; CANCELLED from either of the first
    two. A RUNNING job whose lease expired is claimable again (its worker is presumed dead)."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})


@dataclass(frozen=True, slots=True)
class NewJob:
    """What `JobStore.submit` stores.

    Args:
        model: the model's name.
        version: a version number as a string, or "" for the latest ready version at run time.
        request: the encoded inference request (`jobs/codec.py`); opaque to the store.
        request_hash: hex digest of `request` (and model, version): an idempotency key reused
            with a different request is a conflict, not the same job.
        idempotency_key: the client's key; the same key returns the same job. None: no key.
        callback_url: where to POST the job when it ends. None: no callback.
        max_attempts: attempts before the job fails with its last error (>= 1).
    """

    model: str
    version: str
    request: bytes
    request_hash: str
    idempotency_key: str | None = None
    callback_url: str | None = None
    max_attempts: int = 3


@dataclass(frozen=True, slots=True)
class Job:
    """A job as stored. Times are seconds since the epoch (float); None until they happen."""

    id: str
    model: str
    version: str
    state: JobState
    attempts: int
    max_attempts: int
    created_at: float
    started_at: float | None  # when the current (last) attempt was claimed
    finished_at: float | None
    error: str | None  # the last attempt's error (kept on retry; the reason when FAILED)
    idempotency_key: str | None
    callback_url: str | None
    request_hash: str
    result_size: int | None  # bytes of the stored result, once SUCCEEDED


@dataclass(frozen=True, slots=True)
class Claim:
    """A job a worker holds: the request to run, and the attempt number that fences it.

    `succeed` / `fail` / `renew` name the attempt; once the lease expired and another worker
    claimed the job again (attempt + 1), the first worker's outcome is refused, so a result is
    never stored twice.
    """

    job: Job
    request: bytes
    attempt: int


@dataclass(frozen=True, slots=True)
class ModelJobCounts:
    """Per model: jobs by state, and the age of the oldest queued one (what autoscalers use)."""

    model: str
    by_state: dict[JobState, int]
    oldest_queued_at: float | None  # created_at of the oldest QUEUED job; None when none


class JobConflictError(Exception):
    """An idempotency key was reused with a different request (HTTP 409 / ALREADY_EXISTS)."""
