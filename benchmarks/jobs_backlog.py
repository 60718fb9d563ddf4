"""Online latency under a durable-job backlog: p99 at concurrency 8 with 10,000 jobs queued on
the same model, against p99 without them (goal: within 1.5x).

    python benchmarks/jobs_backlog.py [--jobs 10000] [--seconds 8] [--server-cpu 0] [--client-cpu 1]

Starts `fnserve serve benchmarks/anchor_models.py` (the anchors' numpy MLP, max batch 64,
dynamic batching) pinned to one core with its job store in a temporary --state-dir, and drives
`/v2/models/mlp/infer` with h2load (HTTP/1.1 JSON, 8 keep-alive connections, one request
each in flight) pinned to the other core, without jobs. It also submits 2,000 jobs over HTTP
from 8 threads (submit rate, p50/p99) and lets them run. The MLP runs jobs about as fast as
HTTP can submit them, so a backlog submitted over HTTP never builds up; to measure under a
real backlog the server is stopped, `--jobs` jobs for the same model are written into its
store, and it is started again on that store: the loaded run starts with them all queued and
measures while the worker runs them in the background lane. Prints p50/p99/requests/s of both
runs, their p99 ratio, the backlog at the start and end of the loaded run, and the jobs/s the
server ran meanwhile (a backlog that emptied early is reported).
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    args = parser.parse_args()
    body = _body()
    with tempfile.TemporaryDirectory() as state, tempfile.NamedTemporaryFile(suffix=".json") as f:
        Path(f.name).write_bytes(body)
        flags = ("--state-dir", state, "--jobs-max-backlog", str(args.jobs * 2))
        proc, base = serve_pinned([HERE / "anchor_models.py"], args.server_cpu, *flags)
        try:
            url = f"{base}/v2/models/mlp/infer"
            h2load(url, Path(f.name), 2, args.client_cpu)  # warm up
            quiet = h2load(url, Path(f.name), args.seconds, args.client_cpu)
            submit = submit_jobs(base, body, 2000)
        finally:
            proc.terminate()
            proc.wait(30)
        written = asyncio.run(prefill(Path(state) / "jobs.db", args.jobs))
        proc, base = serve_pinned([HERE / "anchor_models.py"], args.server_cpu, *flags)
        try:
            metrics = _metrics_url(proc)
            url = f"{base}/v2/models/mlp/infer"
            queued_before, done_before = job_counts(metrics)
            loaded = h2load(url, Path(f.name), args.seconds, args.client_cpu)
            queued_after, done_after = job_counts(metrics)
        finally:
            proc.terminate()
            proc.wait(30)
    ran = done_after - done_before
    print(f"online, no jobs       : p50 {quiet['p50_ms']:.2f} ms  p99 {quiet['p99_ms']:.2f} ms  "
          f"{quiet['rps']:.0f} req/s")  # fmt: skip
    print(f"submit 2000 jobs (HTTP): {submit['rate']:.0f} jobs/s  p50 {submit['p50_ms']:.2f} ms"
          f"  p99 {submit['p99_ms']:.2f} ms (8 threads, jobs running meanwhile)")  # fmt: skip
    print(f"prefill {args.jobs} jobs : {written:.0f} jobs/s written into the stopped server's "
          f"store")  # fmt: skip
    print(f"online, jobs queued   : p50 {loaded['p50_ms']:.2f} ms  p99 {loaded['p99_ms']:.2f} ms  "
          f"{loaded['rps']:.0f} req/s  (backlog {queued_before} -> {queued_after}, "
          f"{ran / args.seconds:.0f} jobs/s ran meanwhile)")  # fmt: skip
    if queued_after == 0:
        print("note: the backlog emptied before the loaded run ended; try more --jobs")
    ratio = loaded["p99_ms"] / quiet["p99_ms"]
    verdict = "within" if ratio <= 1.5 else "OVER"
    print(f"p99 ratio             : {ratio:.2f}x ({verdict} the 1.5x goal)")


if __name__ == "__main__":
    main()
