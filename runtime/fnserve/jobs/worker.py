"""The job worker: claims jobs of the models this server serves and runs them in the background
lane, below every online request.

Per model it keeps at most a window of jobs in flight (`--jobs-workers`, by default the model's
max batch size), so the model's queue never holds a whole backlog and online requests wait for
at most about one batch of jobs. While online traffic is recent (a request in flight, or one
that ended under `_ONLINE_QUIET_S` ago) the window shrinks to `--jobs-online-workers` (default
one job) and jobs start at most `--jobs-online-rate` a second (default 20): the background lane
orders the model's queue, but each job also costs the server CPU (claiming, decoding, storing
its result), and on a busy core that time would come out of online latency. Measured with
benchmarks/jobs_backlog.py on one core: an eighth of the window still doubled online p99, one
job in flight without a pace (about 190 jobs/s) raised it 1.5-1.7x.

It renews the leases of the jobs it holds every third of the lease, gives up jobs whose lease
it lost (cancelled, or taken over after a stall), and on a graceful shutdown gives the jobs it
holds back to the queue at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from fnserve.errors import FnserveError, InvalidInputError, UnsupportedError
from fnserve.jobs.codec import decode_request, encode_response
from fnserve.jobs.model import Claim, Job, JobState
from fnserve.jobs.settings import JobSettings
from fnserve.jobs.store.base import JobStore
from fnserve.runtime import Runtime

log = logging.getLogger(__name__)

# Errors a retry cannot fix: the request itself is wrong for the model.
_PERMANENT = (InvalidInputError, UnsupportedError)
# Online traffic this recent makes the worker keep to its online window.
_ONLINE_QUIET_S = 0.1


@dataclass(slots=True)
class _Running:
    """A job this worker holds."""

    model: str
    attempt: int
    task: asyncio.Task[None] | None = None
    storing: bool = False  # its outcome is being written: past the point of giving it back
    abandoned: bool = field(default=False)


class JobWorker:
    """Runs jobs from `store` on `runtime`.

    Args:
        runtime: the models.
        store: the job store.
        settings: window, lease, result limit, polling.
        on_outcome: awaited with the job (as claimed) and its state after each outcome this
            worker stored (succeeded, failed, or queued again for a retry).
    """

    def __init__(
        self,
        runtime: Runtime,
        store: JobStore,
        settings: JobSettings,
        on_outcome: Callable[[Job, JobState], Awaitable[None]],
    ) -> None:
        self.id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._runtime = runtime
        self._store = store
        self._settings = settings
        self._on_outcome = on_outcome
        self._running: dict[str, _Running] = {}
        self._drained: set[str] = set()  # models whose last claim found fewer jobs than asked
        self._store_down = False
        self._wakeup = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []
        self._paced_until = 0.0  # monotonic: no job starts before this while online is busy
        self._turn = 0  # which model the next paced job goes to

    def start(self) -> None:
        """Start claiming, renewing leases and expiring old jobs."""
        self._loops = [
            asyncio.create_task(self._claim_loop(), name="jobs-claim"),
            asyncio.create_task(self._renew_loop(), name="jobs-renew"),
        ]

    def wake(self) -> None:
        """A job was submitted here: look for work now rather than at the next poll."""
        self._wakeup.set()

    def abandon(self, job_id: str) -> None:
        """Stop running `job_id` (it was cancelled): its request leaves the model's queue."""
        running = self._running.get(job_id)
        if running is not None and running.task is not None and not running.storing:
            running.abandoned = True
            running.task.cancel()

    def in_flight(self) -> int:
        """Jobs this worker runs now."""
        return len(self._running)

    async def aclose(self) -> None:
        """Stop claiming, stop the jobs in flight and give them back to the queue."""
        for loop in self._loops:
            loop.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        held = {job_id: r for job_id, r in self._running.items() if not r.storing}
        for running in held.values():
            running.abandoned = True
            if running.task is not None:
                running.task.cancel()
        tasks = [r.task for r in self._running.values() if r.task is not None]
        await asyncio.gather(*tasks, return_exceptions=True)
        if held:
            await self._store.release(self.id, [(i, r.attempt) for i, r in held.items()])
            log.info("jobs: gave %d running job(s) back to the queue", len(held))

    # -- claiming ------------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        while True:
            self._wakeup.clear()
            try:
                await self._claim()
            except Exception:  # a store outage must not stop the worker for good
                if not self._store_down:  # once per outage, not once per poll
                    log.exception("jobs: claiming failed; trying again every poll")
                self._store_down = True
            else:
                if self._store_down:
                    log.info("jobs: the job store answers again")
                self._store_down = False
            wait_s = self._settings.poll_interval_s
            paced_s = self._paced_until - time.monotonic()
            if paced_s > 0:  # look again when the pace lets the next job start
                wait_s = min(wait_s, paced_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), wait_s)

    async def _claim(self) -> None:
        wanted = self._free_slots()
        drained = [model for model in wanted if model in self._drained]
        if drained:
            # One cheap count for every model whose queue looked empty, rather than one claim
            # query per model per poll while the server idles.
            claimable = await self._claimable()
            for model in drained:
                if model not in claimable:
                    del wanted[model]
        for model, free in wanted.items():
            claims = await self._store.claim(
                self.id, free, self._settings.lease_s, time.time(), models=[model]
            )
            if len(claims) < free:
                self._drained.add(model)
            else:
                self._drained.discard(model)
            for claim in claims:
                running = _Running(claim.job.model, claim.attempt)
                self._running[claim.job.id] = running
                running.task = asyncio.create_task(self._run(claim, running))

    def _free_slots(self) -> dict[str, int]:
        """Per model, how many more jobs it may have in flight now."""
        busy = self._runtime.online_idle_s() < _ONLINE_QUIET_S
        rate = self._settings.online_rate
        now = time.monotonic()
        if busy and rate > 0 and now < self._paced_until:
            return {}
        free: dict[str, int] = {}
        for model, window in self._windows().items():
            if busy:
                window = min(window, max(self._settings.online_workers, 1))
                if rate > 0:  # paced: one job, then the next after 1/rate seconds
                    window = min(window, self._held(model) + 1)
            room = window - self._held(model)
            if room > 0:
                free[model] = room
        if busy and rate > 0 and free:
            # The paced job goes to a model whose last claim found work, in turn.
            candidates = [m for m in free if m not in self._drained] or list(free)
            self._turn += 1
            free = {candidates[self._turn % len(candidates)]: 1}
            self._paced_until = now + 1 / rate
        return free

    def _held(self, model: str) -> int:
        return sum(1 for r in self._running.values() if r.model == model)

    async def _claimable(self) -> set[str]:
        """Models with jobs queued, or running more than here (a lease may have expired)."""
        claimable = set()
        for counts in await self._store.counts():
            queued = counts.by_state.get(JobState.QUEUED, 0)
            running = counts.by_state.get(JobState.RUNNING, 0)
            if queued or running > self._held(counts.model):
                claimable.add(counts.model)
        return claimable

    def _windows(self) -> dict[str, int]:
        """Per model served here (ready, or scaled to zero), the jobs it may have in flight."""
        windows: dict[str, int] = {}
        for entry in self._runtime.repository_index(ready=True):
            if self._settings.workers:
                windows[entry.name] = self._settings.workers
                continue
            handle = self._runtime.registry.resolve(entry.name, entry.version, False)
            rows = max(handle.config.max_batch_size, 1)
            windows[entry.name] = max(windows.get(entry.name, 1), rows)
        return windows

    # -- running -------------------------------------------------------------------------

    async def _run(self, claim: Claim, running: _Running) -> None:
        try:
            state = await self._attempt(claim, running)
        except asyncio.CancelledError:
            if not running.abandoned:
                raise
            return  # cancelled, lost, or given back on shutdown: nothing to store
        finally:
            self._running.pop(claim.job.id, None)
            self._wakeup.set()  # room in the window
        if state is not None:
            await self._on_outcome(claim.job, state)

    async def _attempt(self, claim: Claim, running: _Running) -> JobState | None:
        """Run the job once and store the outcome; the job's state after it (None: the store
        refused it, the job was cancelled or lost)."""
        job_id, attempt = claim.job.id, claim.attempt
        try:
            request, binary = decode_request(claim.request)
            response = await self._runtime.infer(request, background=True)
            result = encode_response(response, binary)
        except FnserveError as exc:
            retry = not isinstance(exc, _PERMANENT)
            return await self._fail(claim, running, exc.message, retry)
        except Exception as exc:  # a bug: another attempt may do better
            log.exception("jobs: job %s failed unexpectedly", job_id)
            return await self._fail(claim, running, f"internal error: {type(exc).__name__}", True)
        limit = self._settings.max_result_bytes
        if len(result) > limit:
            error = (
                f"result of {len(result)} bytes is over the limit of {limit} bytes "
                f"(--jobs-max-result-bytes); nothing was stored"
            )
            return await self._fail(claim, running, error, False)
        write = self._store.succeed(job_id, self.id, attempt, result, time.time())
        return JobState.SUCCEEDED if await self._store_outcome(running, write) else None

    async def _fail(
        self, claim: Claim, running: _Running, error: str, retry: bool
    ) -> JobState | None:
        write = self._store.fail(claim.job.id, self.id, claim.attempt, error, retry, time.time())
        if not await self._store_outcome(running, write):
            return None
        again = retry and claim.attempt < claim.job.max_attempts
        return JobState.QUEUED if again else JobState.FAILED

    async def _store_outcome(self, running: _Running, write: Awaitable[bool]) -> bool:
        """Write an outcome; shielded, so a shutdown meanwhile does not leave it half-known."""
        running.storing = True
        stored = await asyncio.shield(write)
        if not stored:
            log.info("jobs: outcome refused: the job was cancelled or its lease lost")
        return stored

    # -- leases --------------------------------------------------------------------------

    async def _renew_loop(self) -> None:
        while True:
            await asyncio.sleep(self._settings.lease_s / 3)
            held = [(i, r.attempt) for i, r in self._running.items() if not r.storing]
            if not held:
                continue
            try:
                kept = await self._store.renew(self.id, held, self._settings.lease_s, time.time())
            except Exception:
                log.exception("jobs: renewing leases failed; trying again")
                continue
            for job_id, _ in held:
                if job_id not in kept:
                    self.abandon(job_id)
