"""Per-model-version statistics: the one record behind the statistics API and /metrics.

Counters are plain integers updated on the event loop thread (no locks needed); the
Prometheus collector and the statistics endpoints read the same record, so they agree.
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass, field, fields

# Upper bounds (µs) of the latency histogram buckets: 100 µs .. 60 s, roughly x2 apart.
LATENCY_BUCKETS_US: tuple[float, ...] = (
    100, 250, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000,
    1_000_000, 2_000_000, 5_000_000, 10_000_000, 30_000_000, 60_000_000,
)  # fmt: skip
FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")


@dataclass(slots=True)
class Duration:
    """A cumulative {count, ns} pair, as Triton reports every duration."""

    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        """Count `count` durations totalling `ns`."""
        self.count += count
        self.ns += ns


@dataclass(slots=True)
class BatchStats:
    """Executions of one batch size."""

    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


# Slots: updated on every request, so the fewer memory lines they touch the better (most of a
# small step's serving cost is cache misses right after a large model evicted the caches).
@dataclass(slots=True)
class ModelStats:
    """Everything counted for one model version since it was (re)loaded."""

    name: str
    version: str
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAILURE_REASONS, 0))
    inference_count: int = 0
    execution_count: int = 0
    pending: int = 0
    execution_timeouts: int = 0  # executions past execution_timeout_s (fnserve-only metric)
    oom_splits: int = 0  # batches rerun in halves after running out of memory (fnserve only)
    last_inference_ms: int = 0
    load_ns: int = 0  # how long building the instances took (fnserve only)
    warmup_ns: int = 0  # how long the warmup samples took (fnserve only)
    batches: dict[int, BatchStats] = field(default_factory=dict)
    latency_buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_US) + 1))

    def carry_from(self, previous: ModelStats) -> None:
        """Continue `previous`'s counters (a cold start serves the same version again),
        keeping this load's timings."""
        for f in fields(self):
            if f.name not in ("load_ns", "warmup_ns", "pending"):
                setattr(self, f.name, getattr(previous, f.name))

    def reset_counters(self) -> None:
        """Forget every request and execution counted so far (warmup's), keeping the load
        timings: clients' statistics start at the first real request."""
        fresh = ModelStats(self.name, self.version, load_ns=self.load_ns, warmup_ns=self.warmup_ns)
        for f in fields(self):
            setattr(self, f.name, getattr(fresh, f.name))

    def record_success(self, duration_ns: int) -> None:
        self.success.add(duration_ns)
        self.latency_buckets[bisect.bisect_left(LATENCY_BUCKETS_US, duration_ns / 1000)] += 1
        self.last_inference_ms = time.time_ns() // 1_000_000

    def record_failure(self, reason: str, duration_ns: int) -> None:
        self.fail.add(duration_ns)
        self.failures[reason] += 1

    def record_batch(
        self, rows: int, queue_ns: list[int], input_ns: int, infer_ns: int, output_ns: int
    ) -> None:
        """One model execution over `rows` batch rows, for requests that waited `queue_ns`:
        the execution, and each request's queue wait and share of the batch's durations."""
        self.execution_count += 1
        self.inference_count += rows
        batch = self.batches.get(rows)
        if batch is None:
            batch = self.batches[rows] = BatchStats()
        batch.compute_input.add(input_ns)
        batch.compute_infer.add(infer_ns)
        batch.compute_output.add(output_ns)
        n = len(queue_ns)  # every request counts the whole batch's durations, as Triton does
        self.queue.add(sum(queue_ns), n)
        self.compute_input.add(n * input_ns, n)
        self.compute_infer.add(n * infer_ns, n)
        self.compute_output.add(n * output_ns, n)


# Upper bounds (s) of the cold-start duration histogram buckets.
COLD_START_BUCKETS_S: tuple[float, ...] = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


@dataclass
class LifecycleStats:
    """What happened to one model version over the server's life (kept across its loads)."""

    cold_starts: int = 0
    cold_start_s: float = 0.0  # their summed durations
    cold_start_buckets: list[int] = field(
        default_factory=lambda: [0] * (len(COLD_START_BUCKETS_S) + 1)
    )
    idle_unloads: int = 0  # scaled to zero after its idle timeout
    evictions: int = 0  # scaled to zero to make room under the memory budget
    reloads: int = 0  # new code or files swapped in while serving

    def record_cold_start(self, duration_ns: int) -> None:
        seconds = duration_ns / 1e9
        self.cold_starts += 1
        self.cold_start_s += seconds
        self.cold_start_buckets[bisect.bisect_left(COLD_START_BUCKETS_S, seconds)] += 1
