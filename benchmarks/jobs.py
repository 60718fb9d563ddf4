"""Durable jobs: jobs/s and submit latency, on SQLite and on PostgreSQL.

    python benchmarks/jobs.py [--jobs 2000] [--store sqlite|postgres|both]

Two measurements per store:
- store: the JobStore alone, in this process: submit p50/p99 from one caller, the submit rate
  from 8 concurrent callers, and the claim + succeed cycle's jobs/s (claims of 64, outcomes
  written concurrently): the store's own ceiling.
- server: `fnserve serve benchmarks/anchor_models.py --jobs-db ...`: submit p50/p99 and rate
  over HTTP (8 keep-alive connections), and jobs/s from the first submit to the last job
  succeeded (the `identity` model, max batch 64: the cost is the jobs machinery, not a model).
PostgreSQL is a throwaway local server (tests/jobs/postgres.py) with fsync on; SQLite is a
file in a temporary folder (WAL, synchronous=NORMAL).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fnserve.jobs.model import NewJob  # noqa: E402
from fnserve.jobs.store import JobStore, open_store  # noqa: E402
from tests.jobs.postgres import PostgresServer  # noqa: E402
from tests.serverproc import ServerProcess  # noqa: E402

BODY = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": [0.5] * 16}]}
REQUEST = b"\x00" * 512  # about what a small encoded request weighs


def percentiles(seconds: list[float]) -> str:
    ordered = sorted(seconds)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {statistics.median(ordered) * 1000:.2f} ms  p99 {p99 * 1000:.2f} ms"


def new_job(i: int) -> NewJob:
    return NewJob("identity", "", REQUEST, f"hash{i}")


async def store_figures(target: str, count: int) -> None:
    store = open_store(target)
    await store.open()
    try:
        latencies = []
        for i in range(count // 4):
            start = time.perf_counter()
            await store.submit(new_job(i), time.time())
            latencies.append(time.perf_counter() - start)
        print(f"  store  submit, 1 caller  : {percentiles(latencies)}")
        start = time.perf_counter()
        await asyncio.gather(*(_submit_many(store, count // 8) for _ in range(8)))
        rate = (count // 8 * 8) / (time.perf_counter() - start)
        print(f"  store  submit, 8 callers : {rate:.0f} jobs/s")
        start, done = time.perf_counter(), 0
        while claims := await store.claim("bench", 64, 60, time.time()):
            now = time.time()
            outcomes = [
                store.succeed(c.job.id, "bench", c.attempt, b"r" * 256, now) for c in claims
            ]
            done += sum(await asyncio.gather(*outcomes))
        print(f"  store  claim + succeed   : {done / (time.perf_counter() - start):.0f} jobs/s")
    finally:
        await store.close()


async def _submit_many(store: JobStore, count: int) -> None:
    for i in range(count):
        await store.submit(new_job(i), time.time())


async def server_figures(target: str, count: int, state_dir: Path) -> None:
    server = await asyncio.to_thread(
        ServerProcess.start, ROOT / "benchmarks" / "anchor_models.py", "--state-dir", state_dir,
        "--jobs-db", target, "--log-level", "warning",
    )  # fmt: skip
    store = open_store(target)
    await store.open()
    try:
        start = time.perf_counter()
        latencies = await _submit_over_http(server.http, count)
        submitted = time.perf_counter()
        while True:
            if await _succeeded(store) >= count:
                break
            await asyncio.sleep(0.05)
        finished = time.perf_counter()
    finally:
        server.stop()
        await store.close()
    print(f"  server submit over HTTP  : {percentiles(latencies)}  "
          f"{count / (submitted - start):.0f} jobs/s (8 connections)")  # fmt: skip
    print(f"  server jobs run          : {count / (finished - start):.0f} jobs/s "
          f"(first submit to last success, {count} jobs)")  # fmt: skip


async def _submit_over_http(base: str, count: int) -> list[float]:
    latencies: list[float] = []

    async def connection(client: httpx.AsyncClient, n: int) -> None:
        for _ in range(n):
            start = time.perf_counter()
            response = await client.post("/v2/models/identity/jobs", json=BODY)
            latencies.append(time.perf_counter() - start)
            if response.status_code != 202:
                raise SystemExit(f"submit answered {response.status_code}: {response.text}")

    limits = httpx.Limits(max_connections=8)
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as client:
        await asyncio.gather(*(connection(client, count // 8) for _ in range(8)))
    return latencies


async def _succeeded(store: JobStore) -> int:
    from fnserve.jobs.model import JobState

    return sum(c.by_state[JobState.SUCCEEDED] for c in await store.counts())


async def run(name: str, target: str, count: int, folder: Path) -> None:
    print(f"{name}:")
    await store_figures(target, count)
    server_target = target if name == "postgres" else str(folder / "server-jobs.db")
    if name == "postgres":  # a clean database for the server run
        await _recreate(target)
    await server_figures(server_target, count - count % 8, folder / "state")


async def _recreate(url: str) -> None:
    import asyncpg

    db = await asyncpg.connect(url)
    try:
        await db.execute("DROP TABLE fnserve_job_results, fnserve_job_requests, fnserve_jobs,"
                         " fnserve_jobs_schema")  # fmt: skip
    finally:
        await db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--store", choices=("sqlite", "postgres", "both"), default="both")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if args.store in ("sqlite", "both"):
            asyncio.run(run("sqlite", str(folder / "jobs.db"), args.jobs, folder / "sqlite"))
        if args.store in ("postgres", "both"):
            with PostgresServer.start(durable=True) as server:
                asyncio.run(run("postgres", server.url, args.jobs, folder / "postgres"))


if __name__ == "__main__":
    main()
