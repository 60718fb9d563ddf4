"""What composing steps costs: the MLP as a three-step ensemble vs one fused function.

    python benchmarks/pipeline.py [--seconds 8] [--rounds 2] [--server-cpu 0] [--client-cpu 1]

Starts `fnserve serve benchmarks/pipeline_models.py` pinned to one core, drives it with h2load
(HTTP/1.1 JSON, one keep-alive connection per concurrent client) pinned to the other, at
concurrency 1 and 64, alternating the two models in every round, and prints requests/s and
p50 latency (from h2load's per-request log) with the ensemble's share of the fused figure.
Both run in the same server in the same run, so the fused function is the baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import numpy as np

HERE = Path(__file__).parent
MODELS = ("mlp_fused", "mlp3")
_ENDPOINT = re.compile(r"^\s+HTTP\s+http://([\d.]+):(\d+)")


def serve_pinned(
    models: Sequence[Path], cpu: int, *flags: str, entry: Sequence[str] = ("-m", "fnserve")
) -> tuple[subprocess.Popen[str], str]:
    """`fnserve serve MODELS... FLAGS...` on core `cpu`; the process and its HTTP base URL.
    `entry`: what follows the interpreter instead of `-m fnserve` (a wrapper script)."""
    command = [
        "taskset", "-c", str(cpu), sys.executable, *entry, "serve",
        *map(str, models), "--http-port", "0", "--grpc-port", "0",
        "--metrics-port", "0", "--log-level", "warning", *flags,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    for line in proc.stderr:
        match = _ENDPOINT.match(line)
        if match:
            return proc, f"http://{match.group(1)}:{match.group(2)}"
    raise SystemExit("the server did not start")


def h2load(url: str, body: Path, clients: int, seconds: float, cpu: int) -> tuple[float, float]:
    """(requests/s, p50 ms) of one h2load run."""
    with tempfile.NamedTemporaryFile(suffix=".log") as log:
        command = [
            "taskset", "-c", str(cpu), "h2load", "--h1", f"-c{clients}", "-m1", "-t1",
            f"-D{seconds:g}", "--warm-up-time=2", "-d", str(body),
            "-H", "content-type: application/json", "--log-file", log.name, url,
        ]  # fmt: skip
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        rows = [line.split("\t") for line in Path(log.name).read_text().splitlines() if line]
    ok = [int(r[2]) for r in rows if r[1] == "200"]
    match = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    rate = float(match.group(1)) if match else len(ok) / seconds
    return rate, statistics.median(ok) / 1000 if ok else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    args = parser.parse_args()
    if shutil.which("h2load") is None:
        raise SystemExit("needs h2load (Debian package nghttp2-client)")
    x = np.random.default_rng(1).standard_normal(256).astype(np.float32)
    doc = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 256],
                       "data": x.tolist()}]}  # fmt: skip
    proc, base = serve_pinned([HERE / "pipeline_models.py"], args.server_cpu)
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".json") as body:
            json.dump(doc, body)
            body.flush()
            for name in MODELS:  # same answer both ways, and warm
                answer = httpx.post(f"{base}/v2/models/{name}/infer", json=doc).json()
                print(f"{name}: OUTPUT0[:3] = {answer['outputs'][0]['data'][:3]}")
            for _ in range(args.rounds):
                for clients in (1, 64):
                    for name in MODELS:
                        url = f"{base}/v2/models/{name}/infer"
                        run = h2load(url, Path(body.name), clients, args.seconds, args.client_cpu)
                        results.setdefault((name, clients), []).append(run)
                        time.sleep(0.5)
    finally:
        proc.terminate()
        proc.wait(30)
    print(f"\n{'model':10} {'c':>3} {'req/s (median)':>15} {'p50 ms':>8}  runs")
    for clients in (1, 64):
        medians = {}
        for name in MODELS:
            runs = results[(name, clients)]
            rate = statistics.median(r for r, _ in runs)
            p50 = statistics.median(p for _, p in runs)
            medians[name] = (rate, p50)
            shown = ", ".join(f"{r:.0f}" for r, _ in runs)
            print(f"{name:10} {clients:>3} {rate:>15.0f} {p50:>8.3f}  {shown}")
        (fused, fused_p50), (steps, steps_p50) = medians["mlp_fused"], medians["mlp3"]
        print(
            f"{'':10} {clients:>3} ensemble = {steps / fused:.1%} of fused, "
            f"p50 {1000 * (steps_p50 - fused_p50):+.0f} us"
        )


if __name__ == "__main__":
    main()
