"""How long jobs take from submission to their end, per model and outcome (a histogram the
metrics exporter reads; this server's jobs only)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from fnserve.jobs.model import JobState

DURATION_BUCKETS_S: tuple[float, ...] = (
    0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600,
)  # fmt: skip


@dataclass(slots=True)
class DurationHistogram:
    """Counts per bucket (the last one: past every bound), their sum and count."""

    buckets: list[int] = field(default_factory=lambda: [0] * (len(DURATION_BUCKETS_S) + 1))
    sum_s: float = 0.0
    count: int = 0


class JobDurations:
    """Histograms of job durations keyed by (model, final state)."""

    def __init__(self) -> None:
        self.histograms: dict[tuple[str, str], DurationHistogram] = {}

    def observe(self, model: str, state: JobState, seconds: float) -> None:
        key = (model, state.value)
        histogram = self.histograms.get(key)
        if histogram is None:
            histogram = self.histograms[key] = DurationHistogram()
        seconds = max(seconds, 0.0)
        histogram.buckets[bisect.bisect_left(DURATION_BUCKETS_S, seconds)] += 1
        histogram.sum_s += seconds
        histogram.count += 1
