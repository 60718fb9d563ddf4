"""Turn measured steps into perf_analyzer's report, the integrity check, and a CSV table.

Client figures (throughput, percentiles) cover the measurement window of each step; server
figures are statistics deltas over the whole step (warm-up and drain included), which is also
the span over which sent requests are counted for the integrity check.
"""

from __future__ import annotations

import csv
import math
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from fnserve.bench.options import BenchOptions
from fnserve.bench.probe import ServerCounters

PERCENTILES = (50, 90, 95, 99)
# Shares of a core (one process) or of all the cores the load generator may use. Past about
# half a core a Locust process already adds its own queueing to the latencies and holds the
# throughput down (README: the comparison with h2load); at 90 % it is saturated.
CPU_BUSY_SHARE = 0.5
CPU_BOUND_SHARE = 0.9


@dataclass(frozen=True)
class ClientSummary:
    """What the load generator saw in the window: counts and latencies in milliseconds."""

    requests: int
    errors: int
    window_s: float
    p50_ms: float | None = None
    p90_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    avg_ms: float | None = None


def summarize(
    starts: np.ndarray,
    latencies_ms: np.ndarray,
    failure_starts: np.ndarray,
    window: tuple[float, float],
) -> ClientSummary:
    """Requests that started inside `window` (epoch s): counts and nearest-rank percentiles."""
    begin, end = window
    inside = (starts >= begin) & (starts < end)
    lat = np.sort(latencies_ms[inside])
    failures = int(np.count_nonzero((failure_starts >= begin) & (failure_starts < end)))
    if not lat.size:
        return ClientSummary(0, failures, end - begin)
    p50, p90, p95, p99 = (
        round(float(lat[max(0, math.ceil(q / 100 * lat.size) - 1)]), 4) for q in PERCENTILES
    )
    avg = round(float(lat.mean()), 4)
    return ClientSummary(int(lat.size), failures, end - begin, p50, p90, p95, p99, avg)


@dataclass(frozen=True)
class LoadCpu:
    """CPU the load generator used in the window, in cores."""

    busiest: float
    total: float
    cores: int
    processes: int

    @property
    def bound(self) -> bool:
        """True when the client, not the server, limited the figures."""
        return self._over(CPU_BOUND_SHARE)

    @property
    def busy(self) -> bool:
        """True when the client was busy enough to distort the figures."""
        return self._over(CPU_BUSY_SHARE)

    @property
    def verdict(self) -> str:
        """ "CPU-bound", "busy", or "" when the client kept out of the way."""
        return "CPU-bound" if self.bound else "busy" if self.busy else ""

    def _over(self, share: float) -> bool:
        return self.busiest >= share or self.total >= share * self.cores


@dataclass(frozen=True)
class StepResult:
    """One concurrency level: client summary, requests sent, server delta, client CPU."""

    concurrency: int
    client: ClientSummary
    sent: int
    server: ServerCounters
    cpu: LoadCpu

    def to_json(self) -> dict[str, Any]:
        """Plain data for the driver's event stream."""
        data = asdict(self)
        data["server"] = self.server._asdict()
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepResult:
        """Inverse of `to_json`."""
        return cls(
            data["concurrency"],
            ClientSummary(**data["client"]),
            data["sent"],
            ServerCounters(**data["server"]),
            LoadCpu(**data["cpu"]),
        )

    def infer_per_s(self, batch_size: int) -> float:
        """Inferences (batch rows) per second, perf_analyzer's throughput."""
        return self.client.requests * batch_size / self.client.window_s

    @property
    def avg_batch(self) -> float | None:
        """Rows per model execution the server formed (its dynamic batching)."""
        s = self.server
        return s.inference_count / s.execution_count if s.execution_count else None

    @property
    def integrity_ok(self) -> bool:
        """The server finished exactly the requests the harness sent."""
        return self.sent == self.server.requests


@dataclass
class Sweep:
    """A whole run: its settings, what the driver found out, and the steps that finished."""

    options: BenchOptions
    started: datetime
    inputs: list[dict[str, Any]] = field(default_factory=list)
    max_batch_size: int = 0
    locust_version: str = ""
    processes: int = 1
    steps: list[StepResult] = field(default_factory=list)
    stopped: str = ""  # why the sweep ended early ("" when every step ran)


def _us(ns: int, count: int) -> float:
    return ns / count / 1000 if count else 0.0


def _step_lines(step: StepResult, batch_size: int) -> list[str]:
    c = step.client
    lines = [
        f"Request concurrency: {step.concurrency}",
        "  Client:",
        f"    Request count: {c.requests} ({c.errors} errors) in {c.window_s:.1f} s",
        f"    Throughput: {step.infer_per_s(batch_size):.1f} infer/sec",
    ]
    for name, value in (
        *((f"p{q}", getattr(c, f"p{q}_ms")) for q in PERCENTILES),
        ("Avg", c.avg_ms),
    ):
        if value is not None:
            lines.append(f"    {name} latency: {value * 1000:.0f} usec")
    bound = f"  {step.cpu.verdict.upper()}" if step.cpu.verdict else ""
    lines.append(
        f"    Load generator CPU: busiest process {step.cpu.busiest:.0%} of a core, "
        f"{step.cpu.total:.2f} of {step.cpu.cores} core(s){bound}"
    )
    return lines + _server_lines(step)


def _server_lines(step: StepResult) -> list[str]:
    s = step.server
    parts = [
        ("queue", s.queue_ns, s.queue_count),
        ("compute input", s.compute_input_ns, s.compute_input_count),
        ("compute infer", s.compute_infer_ns, s.compute_infer_count),
        ("compute output", s.compute_output_ns, s.compute_output_count),
    ]
    breakdown = " + ".join(f"{name} {_us(ns, n):.0f} usec" for name, ns, n in parts)
    lines = [
        "  Server:",
        f"    Inference count: {s.inference_count}",
        f"    Execution count: {s.execution_count}",
        f"    Successful request count: {s.success_count}",
        f"    Avg request latency: {_us(s.success_ns, s.success_count):.0f} usec ({breakdown})",
    ]
    if step.avg_batch is not None:
        lines.append(f"    Avg batch size: {step.avg_batch:.2f}")
    verdict = "OK" if step.integrity_ok else "MISMATCH"
    lines.append(
        f"  Integrity: {step.sent} requests sent, {s.requests} counted by the server: {verdict}"
    )
    return lines


def format_report(sweep: Sweep) -> str:
    """perf_analyzer's report: settings, one block per concurrency, then a summary table."""
    o = sweep.options
    inputs = ", ".join(f"{i['name']} {i['datatype']} {i['dims']}" for i in sweep.inputs)
    lines = [
        "*** Measurement Settings ***",
        f"  Model: {o.model} (version {o.model_version or 'latest'}), inputs: {inputs}",
        f"  Server: {o.url}, {o.encoding}",
        f"  Batch size: {o.batch_size}, input data: {o.input_data}",
        f"  Measurement window: {o.duration_s:g} s per step after {o.warmup_s:g} s warm-up "
        f"(server statistics: deltas over the whole step)",
        f"  Load generator: Locust {sweep.locust_version}, {sweep.processes} process(es), "
        f"closed loop (concurrency = users)",
        "",
    ]
    for step in sweep.steps:
        lines += [*_step_lines(step, o.batch_size), ""]
    lines += summary_table(sweep)
    return "\n".join(lines)


def summary_table(sweep: Sweep) -> list[str]:
    """One row per concurrency, the figures to compare at a glance."""
    header = (
        f"{'Concurrency':>11} {'Infer/s':>9} {'p50 ms':>8} {'p90 ms':>8} {'p95 ms':>8} "
        f"{'p99 ms':>8} {'Avg ms':>8} {'Errors':>6} {'Avg batch':>9}  Client CPU"
    )
    rows = [header]
    for step in sweep.steps:
        c = step.client
        ms = [
            f"{v:8.2f}" if v is not None else f"{'-':>8}"
            for v in (c.p50_ms, c.p90_ms, c.p95_ms, c.p99_ms, c.avg_ms)
        ]
        batch = f"{step.avg_batch:9.2f}" if step.avg_batch is not None else f"{'-':>9}"
        cpu = f"{step.cpu.busiest:.0%} {step.cpu.verdict}".strip()
        rows.append(
            f"{step.concurrency:>11} {step.infer_per_s(sweep.options.batch_size):9.1f} "
            f"{' '.join(ms)} {c.errors:>6} {batch}  {cpu}"
        )
    return rows


def integrity_errors(sweep: Sweep) -> list[str]:
    """One message per step where the server's count differs from the requests sent."""
    errors = []
    for step in sweep.steps:
        if step.integrity_ok:
            continue
        diff = step.sent - step.server.requests
        what = f"{diff} lost" if diff > 0 else f"{-diff} extra"
        errors.append(
            f"concurrency {step.concurrency}: the harness sent {step.sent} requests but "
            f"the server's statistics for '{sweep.options.model}' count "
            f"{step.server.requests} ({what}; was another client using the model?)"
        )
    return errors


def cpu_warnings(sweep: Sweep) -> list[str]:
    """One message per step where the load generator was busy enough to distort the figures."""
    warnings = []
    for s in sweep.steps:
        used = (
            f"busiest process {s.cpu.busiest:.0%} of a core, {s.cpu.total:.2f} of "
            f"{s.cpu.cores} core(s)"
        )
        if s.cpu.bound:
            effect = "these figures measure the client, not the server"
        elif s.cpu.busy:
            effect = "its own queueing adds to the latencies and holds the throughput down"
        else:
            continue
        warnings.append(
            f"concurrency {s.concurrency}: the load generator was {s.cpu.verdict} "
            f"({used}): {effect}; add --workers N with N free cores"
        )
    return warnings


CSV_COLUMNS = (
    "model",
    "protocol",
    "concurrency",
    "batch_size",
    "window_s",
    "requests",
    "errors",
    "infer_per_s",
    "p50_ms",
    "p90_ms",
    "p95_ms",
    "p99_ms",
    "avg_ms",
    "sent",
    "server_requests",
    "server_inferences",
    "server_executions",
    "avg_batch",
    "server_request_us",
    "queue_us",
    "compute_input_us",
    "compute_infer_us",
    "compute_output_us",
    "client_cpu_busiest",
    "client_cpu_total",
    "client_cpu_busy",
    "client_cpu_bound",
    "integrity_ok",
)


def csv_rows(sweep: Sweep) -> list[dict[str, Any]]:
    """The CSV table as dicts keyed by CSV_COLUMNS."""
    o, rows = sweep.options, []
    for step in sweep.steps:
        c, s = step.client, step.server
        rows.append(
            {
                "model": o.model,
                "protocol": o.encoding,
                "concurrency": step.concurrency,
                "batch_size": o.batch_size,
                "window_s": round(c.window_s, 3),
                "requests": c.requests,
                "errors": c.errors,
                "infer_per_s": round(step.infer_per_s(o.batch_size), 2),
                "p50_ms": c.p50_ms,
                "p90_ms": c.p90_ms,
                "p95_ms": c.p95_ms,
                "p99_ms": c.p99_ms,
                "avg_ms": c.avg_ms,
                "sent": step.sent,
                "server_requests": s.requests,
                "server_inferences": s.inference_count,
                "server_executions": s.execution_count,
                "avg_batch": round(step.avg_batch, 3) if step.avg_batch is not None else None,
                "server_request_us": round(_us(s.success_ns, s.success_count), 1),
                "queue_us": round(_us(s.queue_ns, s.queue_count), 1),
                "compute_input_us": round(_us(s.compute_input_ns, s.compute_input_count), 1),
                "compute_infer_us": round(_us(s.compute_infer_ns, s.compute_infer_count), 1),
                "compute_output_us": round(_us(s.compute_output_ns, s.compute_output_count), 1),
                "client_cpu_busiest": round(step.cpu.busiest, 3),
                "client_cpu_total": round(step.cpu.total, 3),
                "client_cpu_busy": step.cpu.busy,
                "client_cpu_bound": step.cpu.bound,
                "integrity_ok": step.integrity_ok,
            }
        )
    return rows


def write_csv(sweep: Sweep, path: Path) -> None:
    """Write one row per concurrency step."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(csv_rows(sweep))
