"""Prometheus metrics with Triton's family names, read from the runtime's statistics records.

A collector reads the same `ModelStats` records the statistics API serves at scrape time, so
the two always agree and the request path pays nothing extra for metrics.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from fnserve.runtime import Runtime
from fnserve.stats import FAILURE_REASONS, LATENCY_BUCKETS_US, ModelStats

_LABELS = ["model", "version"]


class RuntimeCollector(Collector):
    """Exports every model version's statistics as `nv_*` metric families."""

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
        yield _latency_histogram(stats)


def _counters(stats: list[ModelStats]) -> Iterator[CounterMetricFamily]:
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
            "Number of model executions performed",
            lambda s: s.execution_count,
        ),
        "nv_inference_request_duration_us": (
            "Cumulative inference request duration in microseconds",
            lambda s: (s.success.ns + s.fail.ns) // 1000,
        ),
        "nv_inference_queue_duration_us": (
            "Cumulative inference queuing duration in microseconds",
            lambda s: s.queue.ns // 1000,
        ),
        "nv_inference_compute_input_duration_us": (
            "Cumulative compute input duration in microseconds",
            lambda s: s.compute_input.ns // 1000,
        ),
        "nv_inference_compute_infer_duration_us": (
            "Cumulative compute inference duration in microseconds",
            lambda s: s.compute_infer.ns // 1000,
        ),
        "nv_inference_compute_output_duration_us": (
            "Cumulative inference compute output duration in microseconds",
            lambda s: s.compute_output.ns // 1000,
        ),
        # fnserve only (Triton has no execution timeout): their requests count as BACKEND.
        "fnserve_inference_exec_timeout": (
            "Number of model executions stopped by the execution timeout",
            lambda s: s.execution_timeouts,
        ),
    }
    for name, (doc, value) in families.items():
        family = CounterMetricFamily(name, doc, labels=_LABELS)
        for s in stats:
            family.add_metric([s.name, s.version], value(s))  # type: ignore[no-untyped-call]
        yield family


def _failures(stats: list[ModelStats]) -> CounterMetricFamily:
    family = CounterMetricFamily(
        "nv_inference_request_failure",
        "Number of failed inference requests, all batch sizes",
        labels=[*_LABELS, "reason"],
    )
    for s in stats:
        for reason in FAILURE_REASONS:
            family.add_metric([s.name, s.version, reason], s.failures[reason])
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


def metrics_app(runtime: Runtime) -> Starlette:
    """An ASGI app serving `GET /metrics` (Prometheus text format) for this runtime."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RuntimeCollector(runtime))

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return Starlette(routes=[Route("/metrics", metrics, methods=["GET"])])
