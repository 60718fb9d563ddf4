"""Density: many more models offered than fit in memory, with LRU eviction under a budget.

    python benchmarks/density.py [--seconds 30] [--budget 200MiB] [--server-cpu 0] [--client-cpu 1]

`fnserve serve benchmarks/density_models.py --memory-budget 200MiB` (24 models of 40 MiB:
about 5 fit) pinned to one core; one client on the other sends requests one at a time to a
model drawn from a Zipf distribution (a few hot models, a long tail), and splits the
latencies into requests that found their model loaded (warm) and the ones that cold-started
it (the answer's CALLS is 2: its warmup, then this request). Prints how many models were
offered, how many stayed resident, the cold fraction and p50 / p99 of both.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from density_models import COUNT
from pipeline import serve_pinned

HERE = Path(__file__).parent


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--budget", default="200MiB")
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    args = parser.parse_args()
    proc, base = serve_pinned(
        [HERE / "density_models.py"], args.server_cpu, "--memory-budget", args.budget
    )
    os.sched_setaffinity(0, {args.client_cpu})
    rng = np.random.default_rng(0)
    weights = 1 / np.arange(1, COUNT + 1) ** 1.1  # Zipf-like popularity
    weights /= weights.sum()
    warm: list[float] = []
    cold: list[float] = []
    resident_peak = 0
    try:
        with httpx.Client(timeout=60) as client:
            end = time.perf_counter() + args.seconds
            while time.perf_counter() < end:
                name = f"dense_{rng.choice(COUNT, p=weights):02d}"
                body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1, 1],
                                    "data": [1.0]}]}  # fmt: skip
                start = time.perf_counter()
                response = client.post(f"{base}/v2/models/{name}/infer", json=body)
                elapsed_ms = (time.perf_counter() - start) * 1000
                assert response.status_code == 200, response.text
                calls = next(o for o in response.json()["outputs"] if o["name"] == "CALLS")
                (cold if calls["data"][0] == 2 else warm).append(elapsed_ms)
                if (len(warm) + len(cold)) % 50 == 0:
                    resident_peak = max(resident_peak, _resident(client, base))
            resident_peak = max(resident_peak, _resident(client, base))
    finally:
        proc.terminate()
        proc.wait(30)
    total = len(warm) + len(cold)
    print(f"{COUNT} models offered under a {args.budget} budget (at most {resident_peak} "
          f"resident); {total} requests, {len(cold) / total:.1%} cold starts")  # fmt: skip
    for label, values in (("warm", warm), ("cold", cold)):
        print(f"  {label}: {len(values)} requests, p50 {statistics.median(values):.2f} ms, "
              f"p99 {_percentile(values, 99):.2f} ms")  # fmt: skip


def _resident(client: httpx.Client, base: str) -> int:
    """Models holding instances now: READY in the index and not scaled to zero."""
    rows = client.post(f"{base}/v2/repository/index", json={}).json()
    return sum(1 for r in rows if r.get("state") == "READY" and not r.get("reason"))


if __name__ == "__main__":
    main()
