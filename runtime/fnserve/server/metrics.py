"""Prometheus metrics exactly as Triton writes them, read from the runtime's statistics records.

A collector reads the same `ModelStats` records the statistics API serves at scrape time, so
the two always agree and the request path pays nothing extra for metrics.

Triton (prometheus-cpp) names a counter family and its samples `nv_inference_count`, while
prometheus_client's text writer always appends `_total` to counters; Triton dashboards and
alerts would find nothing. So the families are prometheus_client `Metric`s with samples named
exactly as Triton names them, written by `exposition` below (the reference it is tested
against: tests/server/triton_metrics_reference.txt, scraped from a real Triton 2.51).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import psutil
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from fnserve import custom_metrics
from fnserve.jobs.service import JobService
from fnserve.runtime import LifecycleRecord, Runtime
from fnserve.server.jobs_metrics import JobsCollector
from fnserve.stats import COLD_START_BUCKETS_S, FAILURE_REASONS, LATENCY_BUCKETS_US, ModelStats
from fnserve.types import IndexEntry, ModelState

_LABELS = ["model", "version"]
# What Triton sends (prometheus-cpp's text format 0.0.4).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class RuntimeCollector(Collector):
    """Exports every model version's statistics as Triton's `nv_*` metric families (HELP texts
    included) plus fnserve's own `fnserve_*` ones."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    def collect(self) -> Iterator[Any]:
        stats = self._runtime.version_stats()
        yield from _counters(stats)
        yield _failures(stats)
        pending = GaugeMetricFamily(
            "nv_inference_pending_request_count",
            "Instantaneous number of pending requests awaiting execution per-model.",
            labels=_LABELS,
        )
        for s in stats:
            pending.add_metric([s.name, s.version], s.pending)
        yield pending
        yield from _host()
        yield _latency_histogram(stats)
        yield _states(self._runtime.repository_index())
        yield _load_durations(stats)
        yield from _lifecycles(self._runtime.lifecycles())


def _load_durations(stats: list[ModelStats]) -> GaugeMetricFamily:
    """fnserve only: how long the last load of each version took, building and warming."""
    family = GaugeMetricFamily(
        "fnserve_model_load_duration_seconds",
        "Duration of the last load of each model version, by phase (build, warmup)",
        labels=[*_LABELS, "phase"],
    )
    for s in stats:
        family.add_metric([s.name, s.version, "build"], s.load_ns / 1e9)
        family.add_metric([s.name, s.version, "warmup"], s.warmup_ns / 1e9)
    return family


def _lifecycles(records: list[LifecycleRecord]) -> Iterator[Metric]:
    """fnserve only: cold starts, scale-to-zero, evictions, reloads, memory and instances."""
    cold = HistogramMetricFamily(
        "fnserve_model_cold_start_duration_seconds",
        "Time from the first request to a scaled-to-zero model until it served (load + warmup)",
        labels=_LABELS,
    )
    counters = {
        "fnserve_model_cold_starts": ("Number of cold starts", lambda r: r.stats.cold_starts),
        "fnserve_model_idle_unloads": (
            "Number of times the model scaled to zero after its idle timeout",
            lambda r: r.stats.idle_unloads,
        ),
        "fnserve_model_evictions": (
            "Number of times the model scaled to zero to make room under the memory budget",
            lambda r: r.stats.evictions,
        ),
        "fnserve_model_reloads": (
            "Number of times new code or files replaced the model while it served",
            lambda r: r.stats.reloads,
        ),
    }
    memory = GaugeMetricFamily(
        "fnserve_model_memory_bytes",
        "Memory the model's instances hold, measured at load (0 when scaled to zero)",
        labels=[*_LABELS, "device"],
    )
    instances = GaugeMetricFamily(
        "fnserve_model_instances", "Instances the model runs now", labels=_LABELS
    )
    families = {name: _counter(name, doc) for name, (doc, _) in counters.items()}
    for r in records:
        labels = {"model": r.name, "version": r.version}
        buckets = list(itertools.accumulate(r.stats.cold_start_buckets))
        bounds = [f"{b:g}" for b in COLD_START_BUCKETS_S] + ["+Inf"]
        cold.add_metric([r.name, r.version], list(zip(bounds, buckets, strict=True)),
                        r.stats.cold_start_s)  # fmt: skip
        for name, (_, value) in counters.items():
            families[name].add_sample(name, labels, value(r))  # type: ignore[no-untyped-call]
        memory.add_metric([r.name, r.version, "host"], r.memory.host_bytes)
        for index, used in r.memory.gpu_bytes:
            memory.add_metric([r.name, r.version, f"gpu{index}"], used)
        instances.add_metric([r.name, r.version], r.instances)
    yield cold
    yield from families.values()
    yield memory
    yield instances


def _states(entries: list[IndexEntry]) -> GaugeMetricFamily:
    """fnserve only: each model version's lifecycle state, one series per state (1 for the
    current one), so a dashboard can alert on FAILED models."""
    family = GaugeMetricFamily(
        "fnserve_model_state",
        "Lifecycle state of each model version (1 for its current state, else 0)",
        labels=[*_LABELS, "state"],
    )
    for entry in entries:
        for state in ModelState:
            family.add_metric([entry.name, entry.version, state.value], int(entry.state is state))
    return family


def _counter(name: str, documentation: str) -> Metric:
    """A counter family whose samples carry the family's own name, as in Triton (no `_total`)."""
    return Metric(name, documentation, "counter")


def _counters(stats: list[ModelStats]) -> Iterator[Metric]:
    families = {
        "nv_inference_request_success": (
            "Number of successful inference requests, all batch sizes",
            lambda s: s.success.count,
        ),
        "nv_inference_count": (
            "Number of inferences performed (does not include cached requests)",
            lambda s: s.inference_count,
        ),
        "nv_inference_exec_count": (
            "Number of model executions performed (does not include cached requests)",
            lambda s: s.execution_count,
        ),
        # Triton sums successful requests only: its `failing` model reported 0 after failures.
        "nv_inference_request_duration_us": (
            "Cumulative inference request duration in microseconds (includes cached requests)",
            lambda s: s.success.ns // 1000,
        ),
        "nv_inference_queue_duration_us": (
            "Cumulative inference queuing duration in microseconds (includes cached requests)",
            lambda s: s.queue.ns // 1000,
        ),
        "nv_inference_compute_input_duration_us": (
            "Cumulative compute input duration in microseconds (does not include cached requests)",
            lambda s: s.compute_input.ns // 1000,
        ),
        "nv_inference_compute_infer_duration_us": (
            "Cumulative compute inference duration in microseconds (does not include cached "
            "requests)",
            lambda s: s.compute_infer.ns // 1000,
        ),
        "nv_inference_compute_output_duration_us": (
            "Cumulative inference compute output duration in microseconds (does not include "
            "cached requests)",
            lambda s: s.compute_output.ns // 1000,
        ),
        # fnserve only (Triton has no execution timeout): their requests count as BACKEND.
        "fnserve_inference_exec_timeout": (
            "Number of model executions stopped by the execution timeout",
            lambda s: s.execution_timeouts,
        ),
        # fnserve only: a request that runs out of memory even alone counts as BACKEND.
        "fnserve_inference_oom_split": (
            "Number of batches split in halves and rerun after running out of memory",
            lambda s: s.oom_splits,
        ),
    }
    for name, (doc, value) in families.items():
        family = _counter(name, doc)
        for s in stats:
            family.add_sample(name, {"model": s.name, "version": s.version}, value(s))  # type: ignore[no-untyped-call]
        yield family


def _host() -> Iterator[GaugeMetricFamily]:
    """Triton's CPU families: system-wide utilization since the previous scrape (Triton: since
    its previous poll) and RAM as total and total minus available, like Triton's /proc reads."""
    memory = psutil.virtual_memory()
    for name, doc, value in (
        ("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", psutil.cpu_percent() / 100),
        ("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", memory.total),
        (
            "nv_cpu_memory_used_bytes",
            "CPU used memory (RAM), in bytes",
            memory.total - memory.available,
        ),
    ):
        yield GaugeMetricFamily(name, doc, value=value)


def _failures(stats: list[ModelStats]) -> Metric:
    name = "nv_inference_request_failure"
    family = _counter(name, "Number of failed inference requests, all batch sizes")
    for s in stats:
        for reason in FAILURE_REASONS:
            labels = {"model": s.name, "reason": reason, "version": s.version}
            family.add_sample(name, labels, s.failures[reason])
    return family


def _latency_histogram(stats: list[ModelStats]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(
        "fnserve_inference_request_latency_us",
        "Latency of successful inference requests in microseconds (read p50..p99 with "
        "histogram_quantile)",
        labels=_LABELS,
    )
    for s in stats:
        cumulative, buckets = 0, []
        for bound, count in zip(
            (*LATENCY_BUCKETS_US, float("inf")), s.latency_buckets, strict=False
        ):
            cumulative += count
            buckets.append(("+Inf" if bound == float("inf") else f"{bound:g}", cumulative))
        family.add_metric([s.name, s.version], buckets, s.success.ns / 1000)
    return family


def exposition(registry: CollectorRegistry) -> bytes:
    """Prometheus text format (0.0.4) with every sample named as its family built it.

    prometheus_client's `generate_latest` renames counters to `<name>_total`; Triton does not.
    """
    lines: list[str] = []
    for metric in registry.collect():
        lines.append(f"# HELP {metric.name} {_escape_help(metric.documentation)}")
        lines.append(f"# TYPE {metric.name} {metric.type}")
        for sample in metric.samples:
            labels = ",".join(f'{k}="{_escape_label(v)}"' for k, v in sample.labels.items())
            labels = f"{{{labels}}}" if labels else ""
            lines.append(f"{sample.name}{labels} {_number(sample.value)}")
    lines.append("")
    return "\n".join(lines).encode()


def _number(value: float) -> str:
    # Triton writes counts as integers ("6", not "6.0"); both parse the same.
    return str(value) if isinstance(value, int) else floatToGoString(value)  # type: ignore[no-untyped-call]


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class CustomCollector(Collector):
    """The families model code defines (`pb_utils.MetricFamily`), named as defined (a counter
    without `_total`, as Triton writes it)."""

    def collect(self) -> Iterator[Any]:
        for family in custom_metrics.families():
            if family.kind is custom_metrics.MetricKind.HISTOGRAM:
                yield _custom_histogram(family)
                continue
            kind = "counter" if family.kind is custom_metrics.MetricKind.COUNTER else "gauge"
            metric = Metric(family.name, family.description, kind)
            for one in family.metrics.values():
                metric.add_sample(family.name, one.labels, one.snapshot()[0])
            yield metric


def _custom_histogram(family: custom_metrics.CustomFamily) -> Metric:
    metric = Metric(family.name, family.description, "histogram")
    for one in family.metrics.values():
        total, counts = one.snapshot()
        cumulative = 0
        for bound, count in zip((*one.buckets, float("inf")), counts, strict=True):
            cumulative += count
            le = "+Inf" if bound == float("inf") else f"{bound:g}"
            metric.add_sample(f"{family.name}_bucket", {**one.labels, "le": le}, cumulative)
        metric.add_sample(f"{family.name}_count", one.labels, cumulative)
        metric.add_sample(f"{family.name}_sum", one.labels, total)
    return metric


def metrics_app(runtime: Runtime, jobs: JobService | None = None) -> Starlette:
    """An ASGI app serving `GET /metrics` (Prometheus text format) for this runtime (and its
    durable jobs, when given)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RuntimeCollector(runtime))
    registry.register(CustomCollector())
    jobs_collector = None if jobs is None else JobsCollector(jobs)
    if jobs_collector is not None:
        registry.register(jobs_collector)

    async def metrics(request: Request) -> Response:
        if jobs_collector is not None:
            await jobs_collector.refresh()
        return Response(exposition(registry), headers={"content-type": CONTENT_TYPE})

    return Starlette(routes=[Route("/metrics", metrics, methods=["GET"])])
