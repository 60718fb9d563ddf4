"""Crash tests: real `fnserve serve` processes killed with SIGKILL while they run jobs.

Every submitted job must end SUCCEEDED with the right result, none lost and none stored twice:
after a restart on the same SQLite file or PostgreSQL database, and, with two servers sharing
one PostgreSQL database, when one of them dies and the other takes over its jobs once their
leases expire. The database is read directly to see what each server holds.
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import time
from pathlib import Path

import httpx
import pytest

from tests.serverproc import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

MODELS = Path(__file__).with_name("crash_models.py")
JOBS = 1000
LEASE_S = 2.0


class Database:
    """Read-only SQL on the servers' job store, beside them."""

    def __init__(self, target: str) -> None:
        self.target = target

    async def rows(self, sql: str) -> list[tuple[object, ...]]:
        if self.target.startswith("postgresql://"):
            import asyncpg

            db = await asyncpg.connect(self.target)
            try:
                return [tuple(row) for row in await db.fetch(sql)]
            finally:
                await db.close()
        return await asyncio.to_thread(self._sqlite_rows, sql)

    def _sqlite_rows(self, sql: str) -> list[tuple[object, ...]]:
        db = sqlite3.connect(self.target, timeout=30)
        try:
            return db.execute(sql).fetchall()
        finally:
            db.close()

    async def states(self) -> dict[str, int]:
        rows = await self.rows("SELECT state, count(*) FROM fnserve_jobs GROUP BY state")
        return {str(state): int(count) for state, count in rows}  # type: ignore[call-overload]


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "jobs.db")
    return str(request.getfixturevalue("postgres_database"))


async def serve(target: str, state_dir: Path) -> ServerProcess:
    return await asyncio.to_thread(
        ServerProcess.start, MODELS, "--state-dir", state_dir, "--jobs-db", target,
        "--jobs-lease", str(LEASE_S),
    )  # fmt: skip


async def submit(server: ServerProcess, count: int) -> dict[str, float]:
    """Submit `count` jobs over HTTP; their ids and inputs."""
    jobs: dict[str, float] = {}
    limit = asyncio.Semaphore(16)

    async def one(client: httpx.AsyncClient, value: float) -> None:
        body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1, 1], "data": [value]}]}
        async with limit:
            response = await client.post("/v2/models/slow_double/jobs", json=body)
        assert response.status_code == 202, response.text
        jobs[response.json()["id"]] = value

    async with httpx.AsyncClient(base_url=server.http, timeout=30) as client:
        await asyncio.gather(*(one(client, float(i)) for i in range(count)))
    return jobs


async def kill_mid_run(server: ServerProcess, db: Database) -> set[str]:
    """SIGKILL `server` once some jobs are done and it runs others; the ids it was running.

    The server is paused (SIGSTOP) while the database is read, so that a job seen running
    cannot finish between the look and the kill: a batch ends and the next one is claimed
    within milliseconds, and a kill that landed in that gap left nothing to take over.
    """
    mine = f"SELECT id FROM fnserve_jobs WHERE worker LIKE '%:{server.proc.pid}:%'"
    deadline = time.monotonic() + 60
    while True:
        assert time.monotonic() < deadline, f"no moment to kill: {await db.states()}"
        if (await db.states()).get("succeeded", 0) >= 100:
            server.proc.send_signal(signal.SIGSTOP)
            await asyncio.sleep(0.05)  # statements it already sent to the database finish
            if await db.rows(mine):
                break
            server.proc.send_signal(signal.SIGCONT)
        await asyncio.sleep(0.01)
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait(10)
    held = {str(row[0]) for row in await db.rows(mine)}
    assert held, "the server ran no job when it was killed"
    assert (await db.states()).get("succeeded", 0) < JOBS, "every job ended before the kill"
    return held


async def wait_all_succeeded(db: Database, total: int = JOBS, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while (states := await db.states()).get("succeeded", 0) < total:
        assert time.monotonic() < deadline, f"jobs did not all succeed: {states}"
        assert states.keys() <= {"queued", "running", "succeeded"}, states
        await asyncio.sleep(0.2)


async def check_every_job(server: ServerProcess, db: Database, jobs: dict[str, float],
                          held: set[str]) -> None:  # fmt: skip
    """Every job succeeded once, with the right result; the killed server's ones retried."""
    stored = {
        str(job_id): (str(state), int(attempts))  # type: ignore[call-overload]
        for job_id, state, attempts in await db.rows("SELECT id, state, attempts FROM fnserve_jobs")
    }
    assert set(stored) == set(jobs)  # none lost, none made up
    assert {state for state, _ in stored.values()} == {"succeeded"}
    assert all(stored[job_id][1] >= 2 for job_id in held)  # taken over after the lease
    (results,) = await db.rows("SELECT count(*), count(DISTINCT job_id) FROM fnserve_job_results")
    assert results == (len(jobs), len(jobs))
    await check_results(server, jobs)


async def check_results(server: ServerProcess, jobs: dict[str, float]) -> None:
    """Each job's result over HTTP is 2 * its input."""
    limit = asyncio.Semaphore(16)

    async def check(client: httpx.AsyncClient, job_id: str, value: float) -> None:
        async with limit:
            response = await client.get(f"/v2/jobs/{job_id}/result")
        assert response.status_code == 200, response.text
        (output,) = response.json()["outputs"]
        assert (output["name"], output["data"]) == ("Y", [2 * value])

    async with httpx.AsyncClient(base_url=server.http, timeout=30) as client:
        await asyncio.gather(*(check(client, i, v) for i, v in jobs.items()))


async def test_killed_server_restarted_finishes_every_job(target: str, tmp_path: Path) -> None:
    db = Database(target)
    with await serve(target, tmp_path / "state") as server:
        jobs = await submit(server, JOBS)
        held = await kill_mid_run(server, db)
    with await serve(target, tmp_path / "state") as restarted:
        await wait_all_succeeded(db)
        await check_every_job(restarted, db, jobs, held)


async def test_second_server_finishes_the_jobs_of_a_killed_one(
    postgres_database: str, tmp_path: Path
) -> None:
    db = Database(postgres_database)
    with (
        await serve(postgres_database, tmp_path / "a") as doomed,
        await serve(postgres_database, tmp_path / "b") as survivor,
    ):
        jobs = await submit(doomed, JOBS)
        held = await kill_mid_run(doomed, db)
        await wait_all_succeeded(db)
        assert survivor.proc.poll() is None
        await check_every_job(survivor, db, jobs, held)


async def test_jobs_acknowledged_before_a_kill_survive_it(target: str, tmp_path: Path) -> None:
    """Killed while 16 clients submit: every job answered 202 was stored and runs."""
    db = Database(target)
    acknowledged: dict[str, float] = {}
    enough = asyncio.Event()

    async def submitter(client: httpx.AsyncClient, value: float) -> None:
        while True:
            body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1, 1], "data": [value]}]}
            try:
                response = await client.post("/v2/models/slow_double/jobs", json=body)
            except httpx.HTTPError:
                return  # the server died with this request in flight: not acknowledged
            assert response.status_code == 202, response.text
            acknowledged[response.json()["id"]] = value
            if len(acknowledged) >= 300:
                enough.set()
            value += 16

    with await serve(target, tmp_path / "state") as server:
        async with httpx.AsyncClient(base_url=server.http, timeout=30) as client:
            submitters = [asyncio.create_task(submitter(client, float(i))) for i in range(16)]
            await asyncio.wait_for(enough.wait(), 60)
            server.proc.send_signal(signal.SIGKILL)
            server.proc.wait(10)
            await asyncio.gather(*submitters)
    stored = {str(row[0]) for row in await db.rows("SELECT id FROM fnserve_jobs")}
    assert set(acknowledged) <= stored  # none acknowledged was lost
    with await serve(target, tmp_path / "state") as restarted:
        await wait_all_succeeded(db, total=len(stored))
        await check_results(restarted, acknowledged)
    (results,) = await db.rows("SELECT count(*), count(DISTINCT job_id) FROM fnserve_job_results")
    assert results == (len(stored), len(stored))
