"""Hot reload under load: no failed request, and p99 during reloads against steady p99.

    python benchmarks/reload.py [--seconds 60] [--rewrites 10] [--concurrency 64]
                                [--server-cpu 0] [--client-cpu 1] [--protocols http,grpc]

Serves one @model file with `fnserve serve --watch`, pinned to one core, and loads it from the
other core at concurrency 64, over HTTP/1.1 JSON with h2load (`--h1`, one keep-alive connection
per client, per-request log) and over gRPC with `fnserve bench --protocol grpc` (Locust, which
counts every failed call; it reports a statistics MISMATCH on reload runs because each reload
starts the model's statistics afresh, which is expected here). Per protocol: a steady run first
(the baseline, same server, same run), then a run during which the served file is rewritten
`--rewrites` times, evenly spread (each rewrite changes the model's answer, so each is a real
reload: import, build, warmup, atomic swap, drain). Prints failed requests and p99 steady vs
during the reloads (whole run; for HTTP also the requests started within 1 s of a rewrite), the
reloads the server logged, and checks that the last code answers.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

MODEL = "reloaded"
SOURCE = """
import numpy as np
from fnserve import DynamicBatching, Tensor, Warmup, WarmupInput, model

OFFSET = {offset}

@model(inputs=[Tensor("INPUT0", "FP32", [16])], outputs=[Tensor("OUTPUT0", "FP32", [16])],
       max_batch_size=64, dynamic_batching=DynamicBatching(),
       warmup=[Warmup("rows", {{"INPUT0": WarmupInput("FP32", [16], "random")}}, batch_size=8)])
def reloaded(INPUT0: np.ndarray) -> np.ndarray:
    return INPUT0 + OFFSET
"""
WARMUP_S = 2
WINDOW_S = 1.0  # "during a reload": requests started within this long after a rewrite
_RELOADED = re.compile(rf"reload: model '{MODEL}' reloaded in ([\d.]+) s")
_ENDPOINT = re.compile(r"^\s+(HTTP|gRPC)\s+(?:http://)?([\d.]+:\d+)")


@dataclass
class Server:
    """The pinned `fnserve serve --watch` process and everything it logged."""

    proc: subprocess.Popen[str]
    http: str
    grpc: str
    log: list[str] = field(default_factory=list)

    def drain(self) -> None:
        """Keep reading the log (the server must never block on a full pipe)."""
        for line in self.proc.stderr or ():
            self.log.append(line)

    def reloads(self) -> list[float]:
        """How long each reload logged so far took, in seconds."""
        found = (_RELOADED.search(line) for line in list(self.log))
        return [float(match.group(1)) for match in found if match]

    def answer(self) -> float:
        body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16],
                            "data": [0.0] * 16}]}  # fmt: skip
        doc = httpx.post(f"http://{self.http}/v2/models/{MODEL}/infer", json=body).json()
        return float(doc["outputs"][0]["data"][0])


@dataclass
class Run:
    """One load run: its requests, failures and latencies."""

    requests: int
    failed: int
    p99_ms: float
    window_p99_ms: float | None = None  # requests started within WINDOW_S of a rewrite
    reloads_s: list[float] = field(default_factory=list)  # each reload the server logged


def serve(folder: Path, cpu: int) -> Server:
    command = [
        "taskset", "-c", str(cpu), sys.executable, "-m", "fnserve", "serve", str(folder),
        "--watch", "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    log: list[str] = []
    found: dict[str, str] = {}
    for line in proc.stderr:
        log.append(line)
        match = _ENDPOINT.match(line)
        if match:
            found[match.group(1)] = match.group(2)
        if len(found) == 2:
            break
    if len(found) < 2:
        raise SystemExit("the server did not start:\n" + "".join(log))
    server = Server(proc, found["HTTP"], found["gRPC"], log)
    threading.Thread(target=server.drain, daemon=True).start()
    return server


def rewrite(file: Path, at: list[float], offsets: list[float]) -> threading.Thread:
    """Rewrite `file` at each wall-clock time of `at` (in a thread, started)."""

    def run() -> None:
        for when, offset in zip(at, offsets, strict=True):
            time.sleep(max(when - time.time(), 0))
            file.write_text(SOURCE.format(offset=offset))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def schedule(start: float, seconds: float, count: int) -> list[float]:
    """`count` times spread over the measured window that opens at `start`."""
    return [start + (i + 0.5) * seconds / count for i in range(count)]


def h2load(server: Server, body: Path, args: argparse.Namespace, at: list[float]) -> Run:
    with tempfile.NamedTemporaryFile(suffix=".log") as log:
        command = [
            "taskset", "-c", str(args.client_cpu), "h2load", "--h1", f"-c{args.concurrency}",
            "-m1", "-t1", f"-D{args.seconds:g}", f"--warm-up-time={WARMUP_S}", "-d", str(body),
            "-H", "content-type: application/json", "--log-file", log.name,
            f"http://{server.http}/v2/models/{MODEL}/infer",
        ]  # fmt: skip
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        rows = [line.split("\t") for line in Path(log.name).read_text().splitlines() if line]
    errored = re.search(r"(\d+) errored, (\d+) timeout", out)
    lost = int(errored.group(1)) + int(errored.group(2)) if errored else 0
    started = np.array([int(r[0]) / 1e6 for r in rows])
    latency_ms = np.array([int(r[2]) / 1000 for r in rows])
    failed = sum(r[1] != "200" for r in rows) + lost
    in_window = np.zeros(len(rows), bool)
    for when in at:
        in_window |= (started >= when) & (started < when + WINDOW_S)
    window = float(np.percentile(latency_ms[in_window], 99)) if in_window.any() else None
    return Run(len(rows), failed, float(np.percentile(latency_ms, 99)), window)


def bench_grpc(server: Server, args: argparse.Namespace) -> Run:
    with tempfile.TemporaryDirectory() as tmp:
        table = Path(tmp) / "grpc.csv"
        command = [
            "taskset", "-c", str(args.client_cpu), sys.executable, "-m", "fnserve", "bench",
            MODEL, "--protocol", "grpc", "--url", server.grpc, "--concurrency",
            str(args.concurrency), "--duration", f"{args.seconds:g}", "--warmup", str(WARMUP_S),
            "--csv", str(table),
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True)
        if not table.exists():
            raise SystemExit(f"fnserve bench failed:\n{done.stdout}\n{done.stderr}")
        (row,) = csv.DictReader(table.open())
    return Run(int(row["requests"]), int(row["errors"]), float(row["p99_ms"]))


def measure(server: Server, file: Path, body: Path, args: argparse.Namespace, proto: str) -> Run:
    """One run over `proto`, with `args.rewrites` rewrites of `file` when that is > 0."""
    before = len(server.reloads())
    # The measured window opens after the warm-up (and, for Locust, its users' start).
    opens = time.time() + WARMUP_S + (0.0 if proto == "http" else 1.0)
    at = schedule(opens, args.seconds * 0.95, args.rewrites) if args.rewrites else []
    offsets = [float(10 * (before + i + 1)) for i in range(len(at))]  # a new answer each
    writer = rewrite(file, at, offsets)
    run = h2load(server, body, args, at) if proto == "http" else bench_grpc(server, args)
    writer.join()
    if offsets:
        deadline = time.monotonic() + 30
        while server.answer() != offsets[-1] and time.monotonic() < deadline:
            time.sleep(0.05)
        if server.answer() != offsets[-1]:
            raise SystemExit("the last rewrite is not serving")
    run.reloads_s = server.reloads()[before:]
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rewrites", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--protocols", default="http,grpc")
    args = parser.parse_args()
    if shutil.which("h2load") is None:
        raise SystemExit("needs h2load (Debian package nghttp2-client)")
    rewrites = args.rewrites
    print(f"load average before: {os.getloadavg()[0]:.2f} (shared machine: expect noise)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "models"
        folder.mkdir()
        file = folder / "reloaded.py"
        file.write_text(SOURCE.format(offset=1.0))
        x = np.random.default_rng(1).standard_normal(16).astype(np.float32)
        body = Path(tmp) / "body.json"
        tensor = {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": x.tolist()}
        body.write_text(json.dumps({"inputs": [tensor]}))
        server = serve(folder, args.server_cpu)
        results: dict[tuple[str, str], Run] = {}
        try:
            for proto in args.protocols.split(","):
                args.rewrites = 0
                results[proto, "steady"] = measure(server, file, body, args, proto)
                args.rewrites = rewrites
                results[proto, "reloads"] = measure(server, file, body, args, proto)
        finally:
            server.proc.terminate()
            server.proc.wait(30)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    report(results, rewrites, args)


def report(results: dict[tuple[str, str], Run], rewrites: int, args: argparse.Namespace) -> None:
    print(f"\nc={args.concurrency}, {args.seconds:g} s per run, {rewrites} rewrites per reload run")
    print(f"{'protocol':8} {'run':8} {'requests':>9} {'failed':>7} {'p99 ms':>8} "
          f"{'p99 ms <1 s after a rewrite':>28} {'reloads (longest s)':>20}")  # fmt: skip
    for (proto, kind), run in results.items():
        window = f"{run.window_p99_ms:.2f}" if run.window_p99_ms is not None else "-"
        reloads = f"{len(run.reloads_s)} ({max(run.reloads_s, default=0):.2f})"
        print(f"{proto:8} {kind:8} {run.requests:>9} {run.failed:>7} {run.p99_ms:>8.2f} "
              f"{window:>28} {reloads:>20}")  # fmt: skip
    for proto in dict.fromkeys(p for p, _ in results):
        steady, during = results[proto, "steady"], results[proto, "reloads"]
        ratio = during.p99_ms / steady.p99_ms
        line = f"{proto}: failed {steady.failed + during.failed}, p99 {ratio:.2f}x of steady"
        if during.window_p99_ms is not None:
            line += f" ({during.window_p99_ms / steady.p99_ms:.2f}x within 1 s of a rewrite)"
        verdict = "OK" if steady.failed + during.failed == 0 and ratio <= 2 else "NOT MET"
        print(f"{line}; goal 0 failed and <= 2x: {verdict}")


if __name__ == "__main__":
    main()
