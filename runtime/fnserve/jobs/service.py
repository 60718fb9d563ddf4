"""JobService: what the HTTP and gRPC frontends call for durable jobs.

It checks a submitted request as `/infer` would before storing anything, answers long-polls
(woken in-process when this server finishes the job, and by polling the store for jobs other
servers finish), sends completion callbacks, and owns the worker and the expiry of old jobs.

Example:
    ```python
    service = JobService(runtime, open_store("jobs.db"), JobSettings())
    await service.start()
    job, created = await service.submit(request, idempotency_key="batch-7")
    job = await service.get(job.id, wait_s=30)
    response = await service.result(job.id)
    await service.aclose()
    ```
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import time
from typing import NamedTuple

from fnserve.errors import (
    InvalidInputError,
    JobBacklogFullError,
    JobConflictError,
    JobNotFinishedError,
    JobNotFoundError,
)
from fnserve.jobs import model as records
from fnserve.jobs.callbacks import CallbackSender
from fnserve.jobs.codec import BinaryOutputs, decode_response, encode_request, request_hash
from fnserve.jobs.document import job_document
from fnserve.jobs.durations import JobDurations
from fnserve.jobs.model import Job, JobState, ModelJobCounts, NewJob
from fnserve.jobs.settings import JobSettings
from fnserve.jobs.store.base import JobStore
from fnserve.jobs.worker import JobWorker
from fnserve.limits import quote
from fnserve.runtime import Runtime
from fnserve.types import InferRequest, InferResponse

log = logging.getLogger(__name__)

MAX_KEY_CHARS = 256
MAX_URL_CHARS = 2048
MAX_LIST_LIMIT = 1000


class StoredResult(NamedTuple):
    """A succeeded job's response, and which outputs its request wanted as binary data."""

    response: InferResponse
    binary: BinaryOutputs


class JobService:
    """Durable jobs on one server.

    Args:
        runtime: the models jobs run on (and are checked against when submitted).
        store: where jobs live (opened by `start`, closed by `aclose`).
        settings: the `--jobs-*` settings.
    """

    def __init__(self, runtime: Runtime, store: JobStore, settings: JobSettings) -> None:
        self._runtime = runtime
        self._store = store
        self._settings = settings
        self._worker = JobWorker(runtime, store, settings, self._on_outcome)
        self._callbacks = CallbackSender(settings.callback_attempts, settings.callback_timeout_s)
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._closing = False  # long-polls answer at once: the server is stopping
        self.durations = JobDurations()

    @property
    def settings(self) -> JobSettings:
        return self._settings

    async def start(self) -> None:
        """Open the store and start the worker and the expiry sweeper."""
        await self._store.open()
        self._worker.start()
        self._sweeper = asyncio.create_task(self._sweep(), name="jobs-sweeper")

    async def stop_worker(self) -> None:
        """Stop running jobs: the ones in flight go back to the queue, and long-polls answer
        with the job as it is, so none holds the shutdown up (idempotent)."""
        self._closing = True
        for job_id in list(self._waiters):
            self._wake(job_id)
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
            self._sweeper = None
        await self._worker.aclose()

    async def aclose(self) -> None:
        """Stop the worker, let callbacks in flight finish briefly, close the store."""
        await self.stop_worker()
        await self._callbacks.aclose()
        await self._store.close()

    # -- the API -------------------------------------------------------------------------

    async def submit(
        self,
        request: InferRequest,
        *,
        idempotency_key: str | None = None,
        callback_url: str | None = None,
        binary: BinaryOutputs | None = None,
    ) -> tuple[Job, bool]:
        """Store `request` as a QUEUED job; (job, created). Nothing is stored on an error.

        Args:
            request: checked as `/infer` checks it.
            idempotency_key: the same key returns the same job (created False).
            callback_url: an http(s) URL the job's JSON is POSTed to when it ends.
            binary: which outputs the result gives as binary data (HTTP); default JSON.

        Raises:
            ModelNotFoundError, ModelNotReadyError, InvalidInputError, UnsupportedError: as
                infer would; JobBacklogFullError: the model's backlog is full;
                JobConflictError: the key names a job of another request.
        """
        _check_key(idempotency_key)
        _check_callback(callback_url)
        self._runtime.validate(request)
        model = request.model_name
        backlog = await self._store.backlog(model)
        if backlog >= self._settings.max_backlog:
            raise JobBacklogFullError(
                f"model '{model}' has {backlog} jobs queued, the limit (--jobs-max-backlog); "
                f"submit again later"
            )
        data = encode_request(request, binary)
        new = NewJob(
            model,
            request.model_version,
            data,
            request_hash(model, request.model_version, data),
            idempotency_key,
            callback_url,
            self._settings.max_attempts,
        )
        try:
            job, created = await self._store.submit(new, time.time())
        except records.JobConflictError as exc:
            raise JobConflictError(
                f"idempotency key {quote(idempotency_key)} was used for a different request"
            ) from exc
        if created:
            self._worker.wake()
        return job, created

    async def get(self, job_id: str, wait_s: float = 0.0) -> Job:
        """The job; with `wait_s`, once it ends or `wait_s` (capped by --jobs-max-wait) passed.

        Raises:
            JobNotFoundError: unknown id.
        """
        job = await self._get(job_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(max(wait_s, 0.0), self._settings.max_wait_s)
        while not job.state.terminal and loop.time() < deadline and not self._closing:
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.setdefault(job_id, set()).add(waiter)
            try:
                timeout_s = min(deadline - loop.time(), self._settings.poll_interval_s)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter, timeout_s)
            finally:
                self._forget(job_id, waiter)
            job = await self._get(job_id)
        return job

    async def result(self, job_id: str) -> InferResponse:
        """A succeeded job's response.

        Raises:
            JobNotFoundError: unknown id; JobNotFinishedError: the job has not succeeded.
        """
        return (await self.stored_result(job_id)).response

    async def stored_result(self, job_id: str) -> StoredResult:
        """`result`, with the output choices of the submitted request (for HTTP)."""
        job = await self._get(job_id)
        if job.state is not JobState.SUCCEEDED:
            raise JobNotFinishedError(_not_finished(job))
        data = await self._store.result(job_id)
        if data is None:
            raise JobNotFoundError(f"the result of job {quote(job_id)} has expired")
        return StoredResult(*decode_response(data))

    async def cancel(self, job_id: str) -> Job:
        """Cancel a queued or running job (a finished one is answered as it is).

        Raises:
            JobNotFoundError: unknown id.
        """
        before = await self._get(job_id)
        job = await self._store.cancel(job_id, time.time())
        if job is None:
            raise JobNotFoundError(f"job {quote(job_id)} not found")
        if not before.state.terminal and job.state is JobState.CANCELLED:
            self._worker.abandon(job_id)
            self._ended(job)
        return job

    async def list(
        self,
        *,
        model: str | None = None,
        state: JobState | None = None,
        limit: int = 100,
        page_token: str | None = None,
    ) -> tuple[builtins.list[Job], str | None]:
        """Jobs newest first, and the token of the next page (None: this is the last)."""
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise InvalidInputError(f"limit must be between 1 and {MAX_LIST_LIMIT}, got {limit}")
        jobs = await self._store.list(model=model, state=state, limit=limit + 1, after=page_token)
        if len(jobs) > limit:
            return jobs[:limit], jobs[limit - 1].id
        return jobs, None

    async def counts(self) -> builtins.list[ModelJobCounts]:
        """Per model: jobs by state and the oldest queued job's time."""
        return await self._store.counts()

    # -- internals -----------------------------------------------------------------------

    async def _get(self, job_id: str) -> Job:
        job = await self._store.get(job_id)
        if job is None:
            raise JobNotFoundError(f"job {quote(job_id)} not found")
        return job

    def _forget(self, job_id: str, waiter: asyncio.Future[None]) -> None:
        waiters = self._waiters.get(job_id)
        if waiters is not None:
            waiters.discard(waiter)
            if not waiters:
                del self._waiters[job_id]

    async def _on_outcome(self, job: Job, state: JobState) -> None:
        """The worker stored an outcome of `job` (as claimed): wake its long-polls; if it
        ended, count its duration and call back (reading the job as stored only then)."""
        self._wake(job.id)
        if not state.terminal:
            return
        self.durations.observe(job.model, state, time.time() - job.created_at)
        if job.callback_url:
            try:
                ended = await self._store.get(job.id)
            except Exception:
                log.exception("jobs: reading job %s for its callback failed", job.id)
                return
            if ended is not None:
                self._callbacks.send(job.callback_url, job_document(ended))

    def _ended(self, job: Job) -> None:
        """`job` ended here outside the worker (cancelled)."""
        self._wake(job.id)
        if job.finished_at is not None:
            self.durations.observe(job.model, job.state, job.finished_at - job.created_at)
        if job.callback_url:
            self._callbacks.send(job.callback_url, job_document(job))

    def _wake(self, job_id: str) -> None:
        for waiter in self._waiters.pop(job_id, set()):
            if not waiter.done():
                waiter.set_result(None)

    async def _sweep(self) -> None:
        ttl_s = self._settings.result_ttl_s
        interval_s = min(max(ttl_s / 10, 1.0), 300.0)
        while True:
            try:
                expired = await self._store.expire(time.time() - ttl_s)
                if expired:
                    log.info("jobs: deleted %d job(s) finished over %.0f s ago", expired, ttl_s)
            except Exception:
                log.exception("jobs: expiring old jobs failed; trying again")
            await asyncio.sleep(interval_s)


def _not_finished(job: Job) -> str:
    message = f"job {quote(job.id)} has no result: it is {job.state.value}"
    if job.state is JobState.FAILED and job.error:
        message += f" ({job.error})"
    return message


def _check_key(key: str | None) -> None:
    if key is not None and not 1 <= len(key) <= MAX_KEY_CHARS:
        raise InvalidInputError(
            f"idempotency key must be 1 to {MAX_KEY_CHARS} characters, got {len(key)}"
        )


def _check_callback(url: str | None) -> None:
    if url is None:
        return
    if len(url) > MAX_URL_CHARS or not url.startswith(("http://", "https://")):
        raise InvalidInputError(
            f"callback URL must be an http:// or https:// URL of at most {MAX_URL_CHARS} "
            f"characters, got {quote(url)}"
        )
