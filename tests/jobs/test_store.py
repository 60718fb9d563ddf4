"""Every guarantee of `JobStore` (jobs/store/base.py), checked on SQLite and on a real PostgreSQL.

Times are passed in (`now`), so leases expire by the clock the test gives, without sleeping.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from fnserve.jobs.model import Claim, JobConflictError, JobState, NewJob
from fnserve.jobs.store import JobStore, open_store
from fnserve.jobs.store.rows import LEASE_EXPIRED

Opener = Callable[[], Awaitable[JobStore]]
T0 = 1_700_000_000.0


def new(
    model: str = "m", *, key: str | None = None, request: bytes = b"req", max_attempts: int = 3
) -> NewJob:
    return NewJob(
        model=model,
        version="",
        request=request,
        request_hash=f"{model}:{request.hex()}",
        idempotency_key=key,
        callback_url=None,
        max_attempts=max_attempts,
    )


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the stores of one test live: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "state" / "jobs.db")
    return str(request.getfixturevalue("postgres_database"))


@pytest.fixture
async def open_another(target: str) -> AsyncIterator[Opener]:
    """Opens more stores on the test's database (as more servers would); closes them all."""
    stores: list[JobStore] = []

    async def opener() -> JobStore:
        store = open_store(target)
        await store.open()
        stores.append(store)
        return store

    yield opener
    for store in stores:
        await store.close()


@pytest.fixture
async def store(open_another: Opener) -> JobStore:
    return await open_another()


async def claim_one(store: JobStore, now: float, worker: str = "w1", lease_s: float = 10) -> Claim:
    claims = await store.claim(worker, 1, lease_s, now)
    assert len(claims) == 1, claims
    return claims[0]


class TestSubmit:
    async def test_submit_stores_a_queued_job(self, store: JobStore) -> None:
        job, created = await store.submit(new(request=b"\x00binary\xff"), T0)
        assert created
        assert job.state is JobState.QUEUED
        assert (job.model, job.version, job.attempts, job.max_attempts) == ("m", "", 0, 3)
        assert job.created_at == T0
        assert (job.started_at, job.finished_at, job.error, job.result_size) == (None,) * 4
        assert await store.get(job.id) == job
        assert (await claim_one(store, T0)).request == b"\x00binary\xff"

    async def test_job_ids_are_unique_url_safe_and_sort_by_time(self, store: JobStore) -> None:
        ids = [(await store.submit(new(), T0 + i / 100))[0].id for i in range(50)]
        assert len(set(ids)) == 50
        assert ids == sorted(ids)
        assert all(re.fullmatch(r"[0-9a-z]{28}", i) for i in ids)

    async def test_unknown_id_is_none(self, store: JobStore) -> None:
        assert await store.get("nope") is None
        assert await store.result("nope") is None
        assert await store.cancel("nope", T0) is None

    async def test_same_idempotency_key_returns_the_same_job(self, store: JobStore) -> None:
        first, created = await store.submit(new(key="k1"), T0)
        again, created_again = await store.submit(new(key="k1"), T0 + 5)
        assert (created, created_again) == (True, False)
        assert again == first
        assert len(await store.list()) == 1

    async def test_idempotency_key_with_another_request_conflicts(self, store: JobStore) -> None:
        first, _ = await store.submit(new(key="k1", request=b"a"), T0)
        with pytest.raises(JobConflictError, match="k1"):
            await store.submit(new(key="k1", request=b"b"), T0 + 1)
        assert [job.id for job in await store.list()] == [first.id]

    async def test_concurrent_submits_of_one_key_make_one_job(self, open_another: Opener) -> None:
        stores = [await open_another() for _ in range(3)]
        results = await asyncio.gather(
            *(stores[i % 3].submit(new(key="same"), T0 + i) for i in range(30))
        )
        assert len({job.id for job, _ in results}) == 1
        assert sum(created for _, created in results) == 1
        assert len(await stores[0].list()) == 1


class TestClaim:
    async def test_claim_takes_the_oldest_first_and_counts_an_attempt(
        self, store: JobStore
    ) -> None:
        newer, _ = await store.submit(new(request=b"newer"), T0 + 1)
        older, _ = await store.submit(new(request=b"older"), T0)
        claims = await store.claim("w1", 10, 30, T0 + 2)
        assert [c.job.id for c in claims] == [older.id, newer.id]
        assert [c.request for c in claims] == [b"older", b"newer"]
        assert all(c.attempt == c.job.attempts == 1 for c in claims)
        assert all(c.job.state is JobState.RUNNING and c.job.started_at == T0 + 2 for c in claims)
        assert await store.claim("w2", 10, 30, T0 + 3) == []

    async def test_claim_respects_limit_and_models(self, store: JobStore) -> None:
        for i, model in enumerate(("a", "b", "a", "c")):
            await store.submit(new(model), T0 + i)
        assert await store.claim("w", 10, 30, T0, models=[]) == []
        claims = await store.claim("w", 1, 30, T0, models=["a", "c"])
        assert [c.job.model for c in claims] == ["a"]
        claims = await store.claim("w", 10, 30, T0, models={"a", "c"})
        assert sorted(c.job.model for c in claims) == ["a", "c"]
        assert [c.job.model for c in await store.claim("w", 10, 30, T0)] == ["b"]

    async def test_each_job_is_claimed_once_by_many_concurrent_claimers(
        self, open_another: Opener
    ) -> None:
        stores = [await open_another() for _ in range(4)]
        submitted = {(await stores[0].submit(new(), T0 + i))[0].id for i in range(300)}
        claimed: list[str] = []

        async def claimer(store: JobStore, worker: str) -> None:
            while claims := await store.claim(worker, 3, 60, T0 + 1000):
                claimed.extend(c.job.id for c in claims)

        await asyncio.gather(
            *(claimer(stores[i % 4], f"w{i}") for i in range(16))
        )  # fmt: skip
        assert len(claimed) == len(set(claimed)) == 300
        assert set(claimed) == submitted

    async def test_expired_lease_is_claimed_again_with_the_next_attempt(
        self, store: JobStore
    ) -> None:
        job, _ = await store.submit(new(), T0)
        first = await claim_one(store, T0, "w1", lease_s=10)
        assert await store.claim("w2", 10, 10, T0 + 9) == []  # still held
        second = await claim_one(store, T0 + 11, "w2")
        assert (second.job.id, second.attempt, second.job.started_at) == (job.id, 2, T0 + 11)
        # The first worker comes back: everything it does for attempt 1 is refused.
        assert await store.renew("w1", [(job.id, first.attempt)], 10, T0 + 12) == set()
        assert not await store.succeed(job.id, "w1", first.attempt, b"stale", T0 + 12)
        assert not await store.fail(job.id, "w1", first.attempt, "boom", False, T0 + 12)
        assert await store.result(job.id) is None
        assert await store.succeed(job.id, "w2", second.attempt, b"fresh", T0 + 13)
        assert await store.result(job.id) == b"fresh"
        assert not await store.succeed(job.id, "w2", second.attempt, b"again", T0 + 14)
        assert await store.result(job.id) == b"fresh"

    async def test_renew_keeps_the_lease(self, store: JobStore) -> None:
        job, _ = await store.submit(new(), T0)
        claim = await claim_one(store, T0, lease_s=10)
        assert await store.renew("w1", [(job.id, claim.attempt), ("nope", 1)], 10, T0 + 8) == {
            job.id
        }
        assert await store.claim("w2", 10, 10, T0 + 15) == []
        assert (await claim_one(store, T0 + 19, "w2")).attempt == 2

    async def test_lease_expired_on_the_last_attempt_fails_the_job(self, store: JobStore) -> None:
        job, _ = await store.submit(new(max_attempts=2), T0)
        await claim_one(store, T0, lease_s=10)
        await claim_one(store, T0 + 11, lease_s=10)
        assert await store.claim("w3", 10, 10, T0 + 22) == []
        failed = await store.get(job.id)
        assert failed is not None
        assert (failed.state, failed.attempts, failed.error) == (JobState.FAILED, 2, LEASE_EXPIRED)
        assert failed.finished_at == T0 + 22

    async def test_lease_expiry_after_the_last_attempt_keeps_the_last_error(
        self, store: JobStore
    ) -> None:
        job, _ = await store.submit(new(max_attempts=2), T0)
        first = await claim_one(store, T0, lease_s=10)
        assert await store.fail(job.id, "w1", first.attempt, "out of memory", True, T0 + 1)
        await claim_one(store, T0 + 2, lease_s=10)  # this worker dies
        assert await store.claim("w3", 10, 10, T0 + 30) == []
        failed = await store.get(job.id)
        assert failed is not None
        assert (failed.state, failed.error) == (JobState.FAILED, "out of memory")


class TestOutcomes:
    async def test_succeed_stores_the_result_once(self, store: JobStore) -> None:
        job, _ = await store.submit(new(), T0)
        claim = await claim_one(store, T0)
        assert await store.result(job.id) is None  # not before it succeeded
        assert not await store.succeed(job.id, "other", claim.attempt, b"x", T0 + 1)
        assert not await store.succeed(job.id, "w1", claim.attempt + 1, b"x", T0 + 1)
        result = bytes(range(256)) * 1000
        assert await store.succeed(job.id, "w1", claim.attempt, result, T0 + 2)
        done = await store.get(job.id)
        assert done is not None
        assert (done.state, done.finished_at, done.result_size) == (
            JobState.SUCCEEDED,
            T0 + 2,
            len(result),
        )
        assert await store.result(job.id) == result
        assert not await store.succeed(job.id, "w1", claim.attempt, b"twice", T0 + 3)
        assert await store.result(job.id) == result

    async def test_fail_with_retry_requeues_until_attempts_run_out(self, store: JobStore) -> None:
        job, _ = await store.submit(new(max_attempts=2), T0)
        first = await claim_one(store, T0)
        assert await store.fail(job.id, "w1", first.attempt, "flaky", True, T0 + 1)
        queued = await store.get(job.id)
        assert queued is not None
        assert (queued.state, queued.attempts, queued.error) == (JobState.QUEUED, 1, "flaky")
        assert queued.finished_at is None
        second = await claim_one(store, T0 + 2, "w2")
        assert second.attempt == 2
        assert await store.fail(job.id, "w2", second.attempt, "flaky again", True, T0 + 3)
        failed = await store.get(job.id)
        assert failed is not None
        assert (failed.state, failed.error, failed.finished_at) == (
            JobState.FAILED,
            "flaky again",
            T0 + 3,
        )
        assert await store.claim("w3", 10, 10, T0 + 100) == []

    async def test_fail_without_retry_fails_at_once(self, store: JobStore) -> None:
        job, _ = await store.submit(new(max_attempts=5), T0)
        claim = await claim_one(store, T0)
        assert not await store.fail(job.id, "w9", claim.attempt, "not mine", False, T0 + 1)
        assert await store.fail(job.id, "w1", claim.attempt, "bad input", False, T0 + 1)
        failed = await store.get(job.id)
        assert failed is not None
        assert (failed.state, failed.attempts, failed.error) == (JobState.FAILED, 1, "bad input")
        assert not await store.fail(job.id, "w1", claim.attempt, "again", False, T0 + 2)
        assert await store.result(job.id) is None

    async def test_release_gives_the_job_back_without_using_an_attempt(
        self, store: JobStore
    ) -> None:
        job, _ = await store.submit(new(max_attempts=1), T0)
        claim = await claim_one(store, T0)
        await store.release("w1", [(job.id, claim.attempt + 1)])  # not that attempt: kept
        still = await store.get(job.id)
        assert still is not None
        assert still.state is JobState.RUNNING
        await store.release("w1", [(job.id, claim.attempt)])
        released = await store.get(job.id)
        assert released is not None
        assert (released.state, released.attempts) == (JobState.QUEUED, 0)
        again = await claim_one(store, T0 + 1, "w2")
        assert again.attempt == 1
        assert await store.succeed(job.id, "w2", again.attempt, b"ok", T0 + 2)


class TestCancel:
    async def test_cancel_a_queued_job(self, store: JobStore) -> None:
        job, _ = await store.submit(new(), T0)
        cancelled = await store.cancel(job.id, T0 + 1)
        assert cancelled is not None
        assert (cancelled.state, cancelled.finished_at) == (JobState.CANCELLED, T0 + 1)
        assert await store.claim("w", 10, 10, T0 + 2) == []

    async def test_cancel_a_running_job_refuses_its_outcome(self, store: JobStore) -> None:
        job, _ = await store.submit(new(), T0)
        claim = await claim_one(store, T0)
        cancelled = await store.cancel(job.id, T0 + 1)
        assert cancelled is not None
        assert cancelled.state is JobState.CANCELLED
        assert await store.renew("w1", [(job.id, claim.attempt)], 10, T0 + 2) == set()
        assert not await store.succeed(job.id, "w1", claim.attempt, b"late", T0 + 2)
        assert not await store.fail(job.id, "w1", claim.attempt, "late", True, T0 + 2)
        assert await store.result(job.id) is None
        assert await store.claim("w2", 10, 10, T0 + 100) == []  # not reclaimed after its lease
        after = await store.get(job.id)
        assert after == cancelled

    async def test_cancel_leaves_a_finished_job_as_it_is(self, store: JobStore) -> None:
        job, _ = await store.submit(new(), T0)
        claim = await claim_one(store, T0)
        assert await store.succeed(job.id, "w1", claim.attempt, b"done", T0 + 1)
        done = await store.get(job.id)
        assert await store.cancel(job.id, T0 + 2) == done
        assert await store.result(job.id) == b"done"


class TestListing:
    async def test_list_is_newest_first_and_filters(self, store: JobStore) -> None:
        jobs = [(await store.submit(new(model), T0 + i))[0] for i, model in enumerate("abab")]
        await store.cancel(jobs[0].id, T0 + 10)
        assert [j.id for j in await store.list()] == [j.id for j in reversed(jobs)]
        assert [j.id for j in await store.list(model="a")] == [jobs[2].id, jobs[0].id]
        assert [j.id for j in await store.list(state=JobState.CANCELLED)] == [jobs[0].id]
        assert [j.id for j in await store.list(model="a", state=JobState.QUEUED)] == [jobs[2].id]
        assert await store.list(model="zzz") == []
        assert len(await store.list(limit=3)) == 3

    async def test_paging_is_stable_while_jobs_are_added(self, store: JobStore) -> None:
        # Several jobs share a creation time: the id orders them.
        for i in range(25):
            await store.submit(new(), T0 + i // 3)
        expected = [job.id for job in await store.list(limit=1000)]
        seen: list[str] = []
        after: str | None = None
        while page := await store.list(limit=4, after=after):
            seen += [job.id for job in page]
            after = page[-1].id
            await store.submit(new(), T0 + 100 + len(seen))  # newer: on no later page
        assert seen == expected
        assert await store.list(after="not-an-id") == []

    async def test_paging_goes_on_after_the_last_job_expired(self, store: JobStore) -> None:
        ids = [(await store.submit(new(), T0 + i))[0].id for i in range(6)]
        page = await store.list(limit=3)
        assert [j.id for j in page] == ids[:2:-1]
        await store.cancel(page[-1].id, T0 + 10)
        assert await store.expire(T0 + 11) == 1
        assert [j.id for j in await store.list(limit=3, after=page[-1].id)] == ids[2::-1]

    async def test_backlog_counts_queued_jobs_of_a_model(self, store: JobStore) -> None:
        for i, model in enumerate("aaab"):
            await store.submit(new(model), T0 + i)
        await claim_one(store, T0 + 10)
        assert await store.backlog("a") == 2
        assert await store.backlog("b") == 1
        assert await store.backlog("none") == 0

    async def test_counts_by_model_and_state_with_the_oldest_queued(self, store: JobStore) -> None:
        assert await store.counts() == []
        a1, _ = await store.submit(new("a"), T0)
        await store.submit(new("a"), T0 + 5)
        await store.submit(new("a"), T0 + 7)
        b1, _ = await store.submit(new("b"), T0 + 1)
        await claim_one(store, T0 + 8)  # a1
        await store.cancel(b1.id, T0 + 9)
        counts = {c.model: c for c in await store.counts()}
        assert sorted(counts) == ["a", "b"]
        assert counts["a"].by_state == {
            JobState.QUEUED: 2,
            JobState.RUNNING: 1,
            JobState.SUCCEEDED: 0,
            JobState.FAILED: 0,
            JobState.CANCELLED: 0,
        }
        assert counts["a"].oldest_queued_at == T0 + 5
        assert counts["b"].by_state[JobState.CANCELLED] == 1
        assert counts["b"].oldest_queued_at is None

    async def test_expire_deletes_finished_jobs_and_results(self, store: JobStore) -> None:
        old, _ = await store.submit(new(), T0)
        claim = await claim_one(store, T0)
        await store.succeed(old.id, "w1", claim.attempt, b"old", T0 + 1)
        cancelled, _ = await store.submit(new(), T0)
        await store.cancel(cancelled.id, T0 + 2)
        recent, _ = await store.submit(new(), T0)
        claim = await claim_one(store, T0)
        await store.succeed(recent.id, "w1", claim.attempt, b"recent", T0 + 50)
        queued, _ = await store.submit(new(), T0)
        running, _ = await store.submit(new(), T0)
        await claim_one(store, T0 + 1)
        assert await store.expire(T0 + 10) == 2
        assert await store.get(old.id) is None
        assert await store.get(cancelled.id) is None
        assert await store.result(old.id) is None
        assert await store.result(recent.id) == b"recent"
        assert {j.id for j in await store.list()} == {recent.id, queued.id, running.id}
        assert await store.expire(T0 + 10) == 0


class TestSchema:
    async def test_reopen_keeps_the_jobs(self, target: str) -> None:
        store = open_store(target)
        await store.open()
        await store.open()  # idempotent
        job, _ = await store.submit(new(key="k"), T0)
        await store.close()
        await store.close()
        reopened = open_store(target)
        await reopened.open()
        try:
            assert await reopened.get(job.id) == job
            assert (await reopened.submit(new(key="k"), T0))[0] == job
        finally:
            await reopened.close()

    async def test_many_stores_open_one_new_database_at_once(self, open_another: Opener) -> None:
        stores = await asyncio.gather(*(open_another() for _ in range(6)))
        job, _ = await stores[0].submit(new(), T0)
        assert all([await s.get(job.id) == job for s in stores])

    async def test_a_closed_store_says_so(self, target: str) -> None:
        store = open_store(target)
        with pytest.raises(RuntimeError, match="not open"):
            await store.get("x")


def test_open_store_picks_the_store_by_target(tmp_path: Path) -> None:
    from fnserve.jobs.store.postgres import PostgresJobStore
    from fnserve.jobs.store.sqlite import SQLiteJobStore

    assert isinstance(open_store("postgresql://u@h/db"), PostgresJobStore)
    assert isinstance(open_store("postgres://u@h/db"), PostgresJobStore)
    assert isinstance(open_store(tmp_path / "x.db"), SQLiteJobStore)
    assert isinstance(open_store(str(tmp_path / "postgres.db")), SQLiteJobStore)
