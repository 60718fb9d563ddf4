"""The job store seam. Every implementation gives the same guarantees:

- `submit` is atomic; with an idempotency key it returns the existing job (created=False), or
  raises JobConflictError when the key was used for a different request (`request_hash`).
- `claim` hands each claimable job to exactly one caller: QUEUED jobs, and RUNNING jobs whose
  lease expired (their worker died). Claiming increments `attempts`; a job whose lease expired
  after its last allowed attempt is not claimed again but FAILED with its last error (or "the
  worker running it stopped renewing its lease"). Oldest first.
- `succeed` stores the result and the SUCCEEDED state in one transaction, only while the caller
  still holds that attempt (same worker, same attempt, state RUNNING): never stored twice.
- `cancel` of a QUEUED or RUNNING job makes it CANCELLED at once; the worker's later outcome is
  refused. Terminal jobs are left as they are.
All methods are coroutines: the SQLite store runs its blocking calls off the event loop.
"""

from __future__ import annotations

import builtins
from collections.abc import Collection
from typing import Protocol

from fnserve.jobs.model import Claim, Job, JobState, ModelJobCounts, NewJob


class JobStore(Protocol):
    """Durable job records and results."""

    async def open(self) -> None:
        """Connect, and create or migrate the schema (idempotent; safe with several servers)."""
        ...

    async def close(self) -> None: ...

    async def submit(self, new: NewJob, now: float) -> tuple[Job, bool]:
        """Store a QUEUED job; (job, created). See the module doc for idempotency keys."""
        ...

    async def get(self, job_id: str) -> Job | None: ...

    async def result(self, job_id: str) -> bytes | None:
        """The stored result of a SUCCEEDED job (None otherwise, or once expired)."""
        ...

    async def list(
        self,
        *,
        model: str | None = None,
        state: JobState | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> builtins.list[Job]:
        """Jobs, newest first (created_at desc, id desc), filtered; `after` is the id of the
        last job of the previous page (paging is stable while jobs are added)."""
        ...

    async def cancel(self, job_id: str, now: float) -> Job | None:
        """Cancel a QUEUED or RUNNING job; returns the job as it is now (None: unknown id)."""
        ...

    async def claim(
        self,
        worker: str,
        limit: int,
        lease_s: float,
        now: float,
        models: Collection[str] | None = None,
    ) -> builtins.list[Claim]:
        """Take up to `limit` claimable jobs (of `models` when given) for `worker`."""
        ...

    async def renew(self, worker: str, held: Collection[tuple[str, int]], lease_s: float,
                    now: float) -> set[str]:  # fmt: skip
        """Extend the leases of (job id, attempt) pairs; returns the ids still held."""
        ...

    async def succeed(self, job_id: str, worker: str, attempt: int, result: bytes,
                      now: float) -> bool:  # fmt: skip
        """Store the result; False when the attempt is no longer this worker's."""
        ...

    async def fail(self, job_id: str, worker: str, attempt: int, error: str, retry: bool,
                   now: float) -> bool:  # fmt: skip
        """Record a failed attempt: back to QUEUED when `retry` and attempts remain, else
        FAILED. False when the attempt is no longer this worker's."""
        ...

    async def release(self, worker: str, held: Collection[tuple[str, int]]) -> None:
        """Give held jobs back to the queue at once (graceful shutdown); the attempt it had
        started does not count against max_attempts."""
        ...

    async def backlog(self, model: str) -> int:
        """QUEUED jobs of `model` (the submit limit counts these)."""
        ...

    async def counts(self) -> builtins.list[ModelJobCounts]:
        """Per model, jobs by state and the oldest queued job's time (metrics, `jobs ls`)."""
        ...

    async def expire(self, finished_before: float) -> int:
        """Delete terminal jobs (and results) finished before the given time; how many."""
        ...
