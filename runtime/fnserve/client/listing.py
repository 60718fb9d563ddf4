"""What `fnserve jobs ls` prints: per-model statistics (jobs by state, the age of the oldest
queued job), then the newest jobs as a table, or both as one JSON document.

The HTTP API has no counts endpoint, so the statistics are counted over the newest
`SCAN_LIMIT` jobs of the listing; past that the header says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fnserve.client.jobs import JobsClient
from fnserve.client.wire import Job
from fnserve.jobs.model import JobState

SCAN_LIMIT = 10_000
_SCAN_PAGE = 1000
_ERROR_CHARS = 60


@dataclass
class ModelStatistics:
    """One model's jobs by state, and when its oldest queued job was submitted."""

    model: str
    by_state: dict[JobState, int] = field(default_factory=lambda: dict.fromkeys(JobState, 0))
    oldest_queued_at: datetime | None = None

    def add(self, job: Job) -> None:
        self.by_state[job.state] += 1
        if job.state is JobState.QUEUED and (
            self.oldest_queued_at is None or job.created_at < self.oldest_queued_at
        ):
            self.oldest_queued_at = job.created_at

    def oldest_queued_age_s(self, now: datetime) -> float | None:
        if self.oldest_queued_at is None:
            return None
        return (now - self.oldest_queued_at).total_seconds()

    def to_json(self, now: datetime) -> dict[str, Any]:
        return {
            "model": self.model,
            **{state.value: count for state, count in self.by_state.items()},
            "oldest_queued_age_s": self.oldest_queued_age_s(now),
        }


def statistics(jobs: Iterable[Job]) -> list[ModelStatistics]:
    """Per model (by name), the jobs counted by state."""
    found: dict[str, ModelStatistics] = {}
    for job in jobs:
        found.setdefault(job.model, ModelStatistics(job.model)).add(job)
    return [found[name] for name in sorted(found)]


def listing_lines(
    client: JobsClient, model: str | None, state: str | None, limit: int, as_json: bool
) -> list[str]:
    """The statistics of `model` (every model: None) and its newest `limit` jobs in `state`."""
    scanned = list(client.list(model, limit=SCAN_LIMIT + 1, page_size=_SCAN_PAGE))
    capped = len(scanned) > SCAN_LIMIT
    stats = statistics(scanned[:SCAN_LIMIT])
    jobs = list(client.list(model, state, limit=limit, page_size=min(max(limit, 1), _SCAN_PAGE)))
    now = datetime.now(UTC)
    if as_json:
        doc = {
            "models": [s.to_json(now) for s in stats],
            "counted_jobs": min(len(scanned), SCAN_LIMIT),
            "jobs": [j.to_json() for j in jobs],
        }
        return [json.dumps(doc, indent=2)]
    lines = _statistics_table(stats, now)
    if capped:
        lines.append(f"(counted over the newest {SCAN_LIMIT} jobs)")
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
