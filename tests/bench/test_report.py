"""Percentiles, the perf_analyzer-style report, integrity and CPU messages, CSV and chart."""

from __future__ import annotations

import csv
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from fnserve.bench.options import BenchOptions
from fnserve.bench.probe import ServerCounters
from fnserve.bench.report import (
    ClientSummary,
    LoadCpu,
    StepResult,
    Sweep,
    cpu_warnings,
    format_report,
    integrity_errors,
    summarize,
    write_csv,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def step(concurrency: int, sent: int = 100, served: int = 100, busiest: float = 0.3) -> StepResult:
    client = ClientSummary(90, 1, 2.0, 1.0, 2.0, 3.0, 4.0, 1.5)
    server = ServerCounters(
        inference_count=served * 2,
        execution_count=served,
        success_count=served,
        success_ns=served * 500_000,
        queue_count=served,
        queue_ns=served * 1000,
    )
    return StepResult(concurrency, client, sent, server, LoadCpu(busiest, busiest, 2, 1))


def sweep(*steps: StepResult) -> Sweep:
    options = BenchOptions("mlp", "127.0.0.1:8000", protocol="grpc", concurrency=(1, 8))
    return Sweep(
        options,
        datetime(2026, 11, 22, 4, 30),
        inputs=[{"name": "INPUT0", "datatype": "FP32", "dims": [256]}],
        max_batch_size=64,
        locust_version="2.47.0",
        steps=list(steps),
    )


class TestSummarize:
    def test_nearest_rank_percentiles_inside_the_window(self) -> None:
        latencies = np.arange(1, 101, dtype=np.float64)  # 1..100 ms, started at t=10
        starts = np.full(100, 10.0)
        outside = summarize(
            np.append(starts, 99.0), np.append(latencies, 1e6), np.array([10.5, 50.0]), (10.0, 12.0)
        )
        assert (outside.p50_ms, outside.p90_ms, outside.p95_ms, outside.p99_ms) == (50, 90, 95, 99)
        assert (outside.requests, outside.errors, outside.avg_ms) == (100, 1, 50.5)

    def test_empty_window(self) -> None:
        summary = summarize(np.empty(0), np.empty(0), np.empty(0), (0.0, 1.0))
        assert (summary.requests, summary.p50_ms) == (0, None)

    def test_percentiles_are_ordered_on_random_data(self) -> None:
        latencies = np.random.default_rng(0).lognormal(0, 1, 5000)
        s = summarize(np.zeros(5000), latencies, np.empty(0), (0.0, 1.0))
        assert s.p50_ms is not None
        assert s.p90_ms is not None
        assert s.p95_ms is not None
        assert s.p50_ms <= s.p90_ms <= s.p95_ms <= (s.p99_ms or 0)


class TestReport:
    def test_step_round_trips_through_json(self) -> None:
        result = step(8)
        assert StepResult.from_json(result.to_json()) == result

    def test_report_has_perf_analyzer_blocks(self) -> None:
        text = format_report(sweep(step(1), step(8)))
        assert "Request concurrency: 8" in text
        assert "p99 latency: 4000 usec" in text
        assert "Throughput: 45.0 infer/sec" in text
        assert "Avg request latency: 500 usec (queue 1 usec + compute input 0 usec" in text
        assert "Avg batch size: 2.00" in text
        assert "Integrity: 100 requests sent, 100 counted by the server: OK" in text

    def test_integrity_mismatch_is_an_error(self) -> None:
        report = sweep(step(1), step(8, sent=100, served=97), step(64, sent=10, served=12))
        errors = integrity_errors(report)
        assert len(errors) == 2
        assert (
            "sent 100 requests but the server's statistics for 'mlp' count 97 (3 lost" in errors[0]
        )
        assert "(2 extra" in errors[1]
        assert "MISMATCH" in format_report(report)

    def test_busy_and_cpu_bound_steps_warn(self) -> None:
        warnings = cpu_warnings(sweep(step(1), step(8, busiest=0.7), step(64, busiest=0.97)))
        assert len(warnings) == 2
        assert "concurrency 8: the load generator was busy (busiest process 70%" in warnings[0]
        assert "concurrency 64: the load generator was CPU-bound" in warnings[1]
        assert "measure the client, not the server" in warnings[1]
        assert all("--workers" in w for w in warnings)
        assert LoadCpu(0.5, 1.85, 2, 3).bound  # three processes filling both allowed cores
        assert "CPU-BOUND" in format_report(sweep(step(64, busiest=0.97)))

    def test_csv(self, tmp_path: Path) -> None:
        path = tmp_path / "out" / "sweep.csv"
        write_csv(sweep(step(1), replace(step(8), sent=99)), path)
        rows = list(csv.DictReader(path.open()))
        assert [r["concurrency"] for r in rows] == ["1", "8"]
        assert rows[0]["p99_ms"] == "4.0"
        assert rows[0]["avg_batch"] == "2.0"
        assert [r["integrity_ok"] for r in rows] == ["True", "False"]


def test_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from fnserve.bench.plot import save_plot

    path = tmp_path / "chart.png"
    save_plot(sweep(step(1), step(8)), path)
    assert path.read_bytes()[:8] == PNG_SIGNATURE
