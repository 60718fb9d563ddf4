"""A job as the JSON document the HTTP API answers and completion callbacks carry, and the
per-model counts `GET /v2/jobs/counts` answers."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fnserve.jobs.model import Job, JobState, ModelJobCounts


def job_document(job: Job) -> dict[str, Any]:
    """`{"id", "model", "version", "state", ...}`; times as RFC 3339 UTC strings or null."""
    return {
        "id": job.id,
        "model": job.model,
        "version": job.version,
        "state": job.state.value,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "created_at": rfc3339(job.created_at),
        "started_at": rfc3339(job.started_at),
        "finished_at": rfc3339(job.finished_at),
        "error": job.error,
        "idempotency_key": job.idempotency_key,
        "callback_url": job.callback_url,
        "result_size": job.result_size,
    }


def rfc3339(epoch_s: float | None) -> str | None:
    """Seconds since the epoch as `2026-11-23T16:34:42.123456Z` (None stays None)."""
    if epoch_s is None:
        return None
    return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="microseconds")[:-6] + "Z"


def counts_document(counts: ModelJobCounts) -> dict[str, Any]:
    """One model's job counts as `GET /v2/jobs/counts` lists them."""
    return {
        "model": counts.model,
        **{state.value: counts.by_state.get(state, 0) for state in JobState},
        "oldest_queued_at": rfc3339(counts.oldest_queued_at),
    }
