"""Online latency under a durable-job backlog: p99 at concurrency 8 with 10,000 jobs queued on
the same model, against p99 without them (goal: within 1.5x).

    python benchmarks/jobs_backlog.py [--jobs 10000] [--seconds 8] [--rounds 2]
                                      [--server-cpu 0] [--client-cpu 1]

Serves `benchmarks/anchor_models.py` (the anchors' numpy MLP, max batch 64, dynamic
batching) with `fnserve serve` pinned to one core, its job store in a temporary --state-dir,
and drives `/v2/models/mlp/infer` with h2load (HTTP/1.1 JSON, 8 keep-alive connections, one
request each in flight) pinned to the other core.

First, 2,000 jobs submitted over HTTP from 8 threads give the submit rate and p50/p99. The MLP
runs jobs about as fast as HTTP submits them, so a backlog never builds up that way; so each
round measures online traffic without jobs, stops the server, writes `--jobs` jobs for the same
model into its store, starts it again on that store and measures while they run in the
background lane (the backlog at the start and end of the run is printed), lets the backlog
drain (jobs/s with no online traffic) and measures without jobs once more. The baseline p99 is
the mean of the two quiet runs around the loaded one; the verdict compares medians over rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from pipeline import serve_pinned

from fnserve.jobs.codec import encode_request, request_hash
from fnserve.jobs.model import NewJob
from fnserve.jobs.store import open_store
from fnserve.types import InferInput, InferRequest

HERE = Path(__file__).parent
_QUEUED = re.compile(r'^fnserve_jobs_queue_depth\{model="mlp"\} (\S+)$', re.M)
_SUCCEEDED = re.compile(r'^fnserve_jobs\{model="mlp",state="succeeded"\} (\S+)$', re.M)


def _input() -> np.ndarray:
    return np.random.default_rng(0).standard_normal(256).astype(np.float32)


def _body() -> bytes:
    x = _input()
    doc = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 256],
                       "data": x.tolist()}]}  # fmt: skip
    return json.dumps(doc).encode()


def h2load(url: str, body: Path, seconds: float, cpu: int) -> dict[str, float]:
    """p50 / p99 (ms) and requests/s of one h2load run at concurrency 8."""
    with tempfile.NamedTemporaryFile(suffix=".log") as log:
        command = [
            "taskset", "-c", str(cpu), "h2load", "--h1", "-c8", "-m1", "-t1",
            f"-D{seconds:g}", "--warm-up-time=1", "-d", str(body),
            "-H", "content-type: application/json", "--log-file", log.name, url,
        ]  # fmt: skip
        subprocess.run(command, capture_output=True, text=True, check=True)
        rows = [line.split("\t") for line in Path(log.name).read_text().splitlines() if line]
    ok = sorted(int(r[2]) / 1000 for r in rows if r[1] == "200")
    if not ok:
        raise SystemExit(f"h2load got no 200 answers ({len(rows)} requests)")
    return {
        "p50_ms": statistics.median(ok),
        "p99_ms": ok[min(int(len(ok) * 0.99), len(ok) - 1)],
        "rps": len(ok) / seconds,
        "errors": len(rows) - len(ok),
    }


def submit_jobs(base: str, body: bytes, count: int, threads: int = 8) -> dict[str, float]:
    """Submit `count` jobs from `threads` keep-alive connections; submit latency and rate."""
    parts = urlsplit(base)
    host, port = parts.hostname or "127.0.0.1", parts.port
    latencies: list[float] = []
    lock = threading.Lock()
    per_thread = [count // threads + (i < count % threads) for i in range(threads)]

    def run(n: int) -> None:
        conn = http.client.HTTPConnection(host, port, timeout=60)
        mine = []
        for _ in range(n):
            start = time.perf_counter()
            conn.request("POST", "/v2/models/mlp/jobs", body,
                         {"content-type": "application/json"})  # fmt: skip
            response = conn.getresponse()
            response.read()
            if response.status != 202:
                raise SystemExit(f"submit answered {response.status}")
            mine.append(time.perf_counter() - start)
        conn.close()
        with lock:
            latencies.extend(mine)

    start = time.perf_counter()
    workers = [threading.Thread(target=run, args=(n,)) for n in per_thread]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - start
    latencies.sort()
    return {
        "rate": count / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    }


def job_counts(metrics_url: str) -> tuple[int, int]:
    """(queued, succeeded) jobs of the mlp model, from the metrics port."""
    parts = urlsplit(metrics_url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    queued = _QUEUED.search(text)
    succeeded = _SUCCEEDED.search(text)
    return (int(float(queued.group(1))) if queued else 0,
            int(float(succeeded.group(1))) if succeeded else 0)  # fmt: skip


async def prefill(db: Path, count: int) -> float:
    """Write `count` queued mlp jobs into the store at `db`; jobs/s written."""
    request = InferRequest("mlp", (InferInput("INPUT0", "FP32", _input().reshape(1, 256)),))
    data = encode_request(request)
    new = NewJob("mlp", "", data, request_hash("mlp", "", data))
    store = open_store(str(db))
    await store.open()
    start = time.perf_counter()
    try:
        for _ in range(count):
            await store.submit(new, time.time())
    finally:
        await store.close()
    return count / (time.perf_counter() - start)


def _metrics_url(proc: subprocess.Popen[str]) -> str:
    assert proc.stderr is not None
    for line in proc.stderr:
        match = re.search(r"metrics\s+(http://\S+)", line)
        if match:
            return match.group(1)
    raise SystemExit("no metrics endpoint in the server's summary")


def _wait_drained(metrics: str, timeout_s: float = 120) -> float:
    """Wait until no mlp job is queued; jobs/s the idle server ran meanwhile."""
    queued, done = job_counts(metrics)
    start = time.perf_counter()
    while queued and time.perf_counter() - start < timeout_s:
        time.sleep(0.2)
        queued, _ = job_counts(metrics)
    elapsed = time.perf_counter() - start
    return (job_counts(metrics)[1] - done) / elapsed if elapsed > 0 else 0.0


def one_round(args: argparse.Namespace, body: Path, state: str) -> dict[str, float]:
    """Quiet run, prefill, loaded run, drain, quiet run again; the figures of the round."""
    flags = ("--state-dir", state, "--jobs-max-backlog", str(args.jobs * 2))
    models = [HERE / "anchor_models.py"]
    proc, base = serve_pinned(models, args.server_cpu, *flags)
    try:
        url = f"{base}/v2/models/mlp/infer"
        h2load(url, body, 2, args.client_cpu)  # warm up
        quiet = h2load(url, body, args.seconds, args.client_cpu)
    finally:
        proc.terminate()
        proc.wait(30)
    written = asyncio.run(prefill(Path(state) / "jobs.db", args.jobs))
    proc, base = serve_pinned(models, args.server_cpu, *flags)
    try:
        metrics = _metrics_url(proc)
        url = f"{base}/v2/models/mlp/infer"
        queued_before, done_before = job_counts(metrics)
        loaded = h2load(url, body, args.seconds, args.client_cpu)
        queued_after, done_after = job_counts(metrics)
        drain_rate = _wait_drained(metrics)
        after = h2load(url, body, args.seconds, args.client_cpu)
    finally:
        proc.terminate()
        proc.wait(30)
    baseline = statistics.mean([quiet["p99_ms"], after["p99_ms"]])
    print(f"  online, no jobs (before / after): p50 {quiet['p50_ms']:.2f} / {after['p50_ms']:.2f} "
          f"ms  p99 {quiet['p99_ms']:.2f} / {after['p99_ms']:.2f} ms  "
          f"{quiet['rps']:.0f} / {after['rps']:.0f} req/s")  # fmt: skip
    jobs_rate = (done_after - done_before) / args.seconds
    print(f"  online, jobs queued            : p50 {loaded['p50_ms']:.2f} ms  p99 "
          f"{loaded['p99_ms']:.2f} ms  {loaded['rps']:.0f} req/s  (backlog {queued_before} -> "
          f"{queued_after}, {jobs_rate:.0f} jobs/s meanwhile)")  # fmt: skip
    print(f"  jobs/s with no online traffic  : {drain_rate:.0f}; prefill wrote {written:.0f} "
          f"jobs/s into the stopped server's store")  # fmt: skip
    if queued_after == 0:
        print("  note: the backlog emptied before the loaded run ended; try more --jobs")
    return {"baseline_p99": baseline, "loaded_p99": loaded["p99_ms"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    args = parser.parse_args()
    body = _body()
    rounds = []
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        Path(f.name).write_bytes(body)
        with tempfile.TemporaryDirectory() as state:
            proc, base = serve_pinned([HERE / "anchor_models.py"], args.server_cpu,
                                      "--state-dir", state)  # fmt: skip
            try:
                submit = submit_jobs(base, body, 2000)
            finally:
                proc.terminate()
                proc.wait(30)
        print(f"submit 2000 jobs over HTTP: {submit['rate']:.0f} jobs/s  p50 "
              f"{submit['p50_ms']:.2f} ms  p99 {submit['p99_ms']:.2f} ms (8 threads)")  # fmt: skip
        for number in range(1, args.rounds + 1):
            print(f"round {number}:")
            with tempfile.TemporaryDirectory() as state:
                rounds.append(one_round(args, Path(f.name), state))
    baseline = statistics.median(r["baseline_p99"] for r in rounds)
    loaded = statistics.median(r["loaded_p99"] for r in rounds)
    ratio = loaded / baseline
    verdict = "within" if ratio <= 1.5 else "OVER"
    print(f"p99 at concurrency 8: {baseline:.2f} ms without jobs, {loaded:.2f} ms with "
          f"{args.jobs} queued: {ratio:.2f}x ({verdict} the 1.5x goal; medians of "
          f"{args.rounds} rounds)")  # fmt: skip


if __name__ == "__main__":
    main()
