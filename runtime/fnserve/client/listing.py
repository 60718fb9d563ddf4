"""What `fnserve jobs ls` prints: per-model statistics (jobs by state, the age of the oldest
queued job), then the newest jobs as a table, or both as one JSON document.

The statistics come from `GET /v2/jobs/counts`: every job of the store, counted by the server.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from fnserve.client.jobs import JobsClient
from fnserve.client.wire import Job, ModelStatistics
from fnserve.jobs.model import JobState

_PAGE = 1000
_ERROR_CHARS = 60


def listing_lines(
    client: JobsClient, model: str | None, state: str | None, limit: int, as_json: bool
) -> list[str]:
    """The statistics of `model` (every model: None) and its newest `limit` jobs in `state`."""
    stats = [s for s in client.counts() if model is None or s.model == model]
    jobs = list(client.list(model, state, limit=limit, page_size=min(max(limit, 1), _PAGE)))
    now = datetime.now(UTC)
    if as_json:
        doc = {"models": [s.to_json(now) for s in stats], "jobs": [j.to_json() for j in jobs]}
        return [json.dumps(doc, indent=2)]
    lines = _statistics_table(stats, now)
    return [*lines, "", *_jobs_table(jobs, now)]


def _statistics_table(stats: list[ModelStatistics], now: datetime) -> list[str]:
    if not stats:
        return ["no jobs"]
    head = ["MODEL", *(s.value.upper() for s in JobState), "OLDEST QUEUED"]
    rows = [[s.model, *(str(s.by_state[state]) for state in JobState), _age(s, now)] for s in stats]
    return _table(head, rows)


def _age(stats: ModelStatistics, now: datetime) -> str:
    age_s = stats.oldest_queued_age_s(now)
    return "-" if age_s is None else _duration(age_s) + " ago"


def _jobs_table(jobs: list[Job], now: datetime) -> list[str]:
    if not jobs:
        return ["no jobs match"]
    head = ["ID", "MODEL", "VERSION", "STATE", "ATTEMPTS", "CREATED (UTC)", "TOOK", "ERROR"]
    rows = [
        [
            job.id,
            job.model,
            job.version or "latest",
            job.state.value,
            f"{job.attempts}/{job.max_attempts}",
            job.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            _took(job, now),
            _short(job.error or ""),
        ]
        for job in jobs
    ]
    return _table(head, rows)


def _took(job: Job, now: datetime) -> str:
    if job.started_at is None:
        return "-"
    end = job.finished_at or now
    return _duration((end - job.started_at).total_seconds())


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _ERROR_CHARS else text[: _ERROR_CHARS - 3] + "..."


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [head, *rows]
    ]
