"""The command side of a sweep: start the driver process, follow its events, show progress.

Locust never loads here (its gevent patching would change this process under the server
code `fnserve` imports); it runs in `python -m fnserve.bench.driver`, or in `locust` itself
for the web UI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from fnserve.bench.children import run_group
from fnserve.bench.options import BenchOptions
from fnserve.bench.report import StepResult, Sweep

# users.py's classes, named here so this side need not import Locust to pick one
USER_CLASSES = {
    "grpc": "KServeGrpcUser",
    "binary": "KServeHttpBinaryUser",
    "json": "KServeHttpJsonUser",
}


class Progress:
    """One status line per step on a terminal (redrawn in place); plain lines otherwise."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def ready(self, sweep: Sweep) -> None:
        o = sweep.options
        steps = ",".join(map(str, o.concurrency))
        self._write(
            f"fnserve bench: '{o.model}' at {o.url} over {o.encoding}, concurrency "
            f"{steps}, {o.warmup_s:g}+{o.duration_s:g} s per step, Locust "
            f"{sweep.locust_version} x{sweep.processes}\n"
        )

    def update(self, event: dict[str, Any]) -> None:
        if not self.tty:
            return
        done = min(event["elapsed_s"] / event["total_s"], 1.0)
        bar = "#" * int(done * 20)
        rate = event["requests"] / event["elapsed_s"] if event["elapsed_s"] else 0.0
        self._write(
            f"\r  c={event['concurrency']:<4} [{bar:<20}] {event['elapsed_s']:5.1f}/"
            f"{event['total_s']:.1f} s {event['requests']:>8} ok {event['errors']:>5} "
            f"errors ~{rate:,.0f}/s "
        )

    def step(self, step: StepResult, batch_size: int) -> None:
        c = step.client
        latency = f"p50 {c.p50_ms:.2f} ms, p99 {c.p99_ms:.2f} ms" if c.p50_ms is not None else ""
        bound = f", load generator {step.cpu.verdict}" if step.cpu.verdict else ""
        clear = "\r\033[K" if self.tty else ""
        self._write(
            f"{clear}  c={step.concurrency}: {step.infer_per_s(batch_size):,.1f} infer/s, "
            f"{latency}, {c.errors} errors{bound}\n"
        )


def run_sweep(options: BenchOptions, progress: Progress) -> Sweep:
    """Run the driver over every concurrency and collect its steps.

    A failure or Ctrl-C ends the sweep early: `sweep.stopped` then says why, and `steps`
    holds the steps that finished.
    """
    sweep = Sweep(options, datetime.now())
    with tempfile.TemporaryDirectory(prefix="fnserve-bench-") as folder:
        spec = Path(folder, "options.json")
        spec.write_text(options.to_json())
        command = [sys.executable, "-m", "fnserve.bench.driver", str(spec)]
        with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as driver:
            try:
                sweep.stopped = _follow(driver.stdout or (), sweep, progress)
            except KeyboardInterrupt:  # the driver got the same SIGINT and stops too
                driver.wait(30)
                sweep.stopped = "interrupted"
    if driver.returncode and not sweep.stopped:
        sweep.stopped = f"the load generator exited with status {driver.returncode} (see above)"
    return sweep


def _follow(lines: Any, sweep: Sweep, progress: Progress) -> str:
    """Apply the driver's events to `sweep`; returns its error message, if any."""
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:  # not ours (a library printing): pass it on
            sys.stderr.write(line)
            continue
        kind = event.pop("event", None)
        if kind == "ready":
            sweep.inputs, sweep.max_batch_size = event["inputs"], event["max_batch_size"]
            sweep.locust_version, sweep.processes = event["locust_version"], event["processes"]
            progress.ready(sweep)
        elif kind == "progress":
            progress.update(event)
        elif kind == "step":
            sweep.steps.append(StepResult.from_json(event["step"]))
            progress.step(sweep.steps[-1], sweep.options.batch_size)
        elif kind == "error":
            return str(event["message"])
    return ""


def run_ui(options: BenchOptions) -> int:
    """Locust's own web UI with the same users and model options; returns Locust's status.

    Locust runs in its own process group that is taken down with this process (see
    `children.run_group`).
    """
    locustfile = Path(__file__).with_name("locustfile.py")
    kind = "grpc" if options.protocol == "grpc" else "binary" if options.binary else "json"
    host = options.grpc_target if options.protocol == "grpc" else options.http_base
    shapes = " ".join(f"{n}:{','.join(map(str, d))}" for n, d in options.shapes)
    command = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(locustfile),
        USER_CLASSES[kind],
        "--host",
        host,
        "--web-host",
        "127.0.0.1",
        "--model",
        options.model,
        "--model-version",
        options.model_version,
        "--input-data",
        options.input_data,
        "--shape",
        shapes,
        "--batch-size",
        str(options.batch_size),
        "--users",
        str(max(options.concurrency)),
        "--spawn-rate",
        str(max(options.concurrency)),
    ]
    if options.workers:
        command += ["--processes", str(options.workers)]
    port = os.environ.get("LOCUST_WEB_PORT", "8089")  # Locust's own setting
    sys.stderr.write(
        f"Locust web UI for '{options.model}' on http://127.0.0.1:{port} (Ctrl-C stops it)\n"
    )
    return run_group(command)
