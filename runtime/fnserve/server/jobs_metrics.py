"""Durable jobs on the metrics port: jobs by state, queue depth and the age of the oldest queued
job per model (what an autoscaler scales on), and how long jobs took.

Counts come from the job store, so with a shared PostgreSQL store every server reports the
whole fleet's queue; durations are those of the jobs this server finished. The store is read
(asynchronously) once per scrape, before the text is written.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from fnserve.jobs.durations import DURATION_BUCKETS_S
from fnserve.jobs.model import JobState, ModelJobCounts
from fnserve.jobs.service import JobService


class JobsCollector(Collector):
    """Exports `fnserve_jobs*` families from the last `refresh`.

    Args:
        service: the jobs service.
    """

    def __init__(self, service: JobService) -> None:
        self._service = service
        self._counts: list[ModelJobCounts] = []

    async def refresh(self) -> None:
        """Read the store's counts (call before each scrape is written)."""
        self._counts = await self._service.counts()

    def collect(self) -> Iterator[Metric]:
        yield from self._states()
        yield self._durations()

    def _states(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily(
            "fnserve_jobs", "Durable jobs by model and state", labels=["model", "state"]
        )
        depth = GaugeMetricFamily(
            "fnserve_jobs_queue_depth", "Jobs queued (not yet running) per model", labels=["model"]
        )
        oldest = GaugeMetricFamily(
            "fnserve_jobs_oldest_queued_age_seconds",
            "Age of the oldest queued job per model (0 when none is queued)",
            labels=["model"],
        )
        now = time.time()
        for counts in self._counts:
            for state in JobState:
                jobs.add_metric([counts.model, state.value], counts.by_state.get(state, 0))
            depth.add_metric([counts.model], counts.by_state.get(JobState.QUEUED, 0))
            queued_at = counts.oldest_queued_at
            oldest.add_metric([counts.model], 0.0 if queued_at is None else now - queued_at)
        yield from (jobs, depth, oldest)

    def _durations(self) -> HistogramMetricFamily:
        family = HistogramMetricFamily(
            "fnserve_job_duration_seconds",
            "Time from submission to the end of jobs this server finished, by final state",
            labels=["model", "state"],
        )
        for (model, state), histogram in self._service.durations.histograms.items():
            cumulative, buckets = 0, []
            bounds = (*DURATION_BUCKETS_S, float("inf"))
            for bound, count in zip(bounds, histogram.buckets, strict=True):
                cumulative += count
                buckets.append(("+Inf" if bound == float("inf") else f"{bound:g}", cumulative))
            family.add_metric([model, state], buckets, histogram.sum_s)
        return family
