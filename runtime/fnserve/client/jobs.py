"""`JobsClient` and `AsyncJobsClient`: fnserve's jobs API over HTTP(S), on httpx.

Both send what `calls.Calls` builds and read answers with it; every refusal raises `JobsError`
with the server's own message and HTTP status.

Example:
    ```python
    with JobsClient("http://127.0.0.1:8000") as client:
        job = client.submit("add_sub", {"INPUT0": a, "INPUT1": b})
        client.wait(job.id, timeout_s=60)
        outputs = client.result(job.id)  # {"OUTPUT0": array, "OUTPUT1": array}
    ```
"""

from __future__ import annotations

import asyncio
import builtins
import ssl
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

import httpx
import numpy as np

from fnserve.client.calls import (
    DEFAULT_TIMEOUT_S,
    Calls,
    JobPage,
    WaitPlan,
    client_options,
    document,
)
from fnserve.client.errors import JobsError
from fnserve.client.wire import Body, Job, ModelStatistics, infer_body
from fnserve.jobs.model import JobState


class JobsClient:
    """Submit inference jobs to an fnserve server and collect their results (blocking).

    Args:
        url: the server's HTTP(S) URL ("host:port" means http).
        token: the API bearer token (None: send none).
        verify: verify an https server: True (the system's CAs), a CA file, an SSLContext
            (see `tls_context` for client certificates), or False (do not verify).
        timeout_s: how long one call may take (long polls get their wait on top).
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        verify: ssl.SSLContext | str | bool = True,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self._timeout_s = timeout_s
        self._http = httpx.Client(**client_options(token, verify, timeout_s))
        self._calls = Calls(url, self._http.build_request)

    @property
    def url(self) -> str:
        return self._calls.url

    def submit(
        self,
        model: str,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] | None = None,
        version: str = "",
        idempotency_key: str | None = None,
        callback_url: str | None = None,
        binary: bool = True,
    ) -> Job:
        """Queue an inference of `model` on `inputs` (name -> numpy array); the new job.

        With an `idempotency_key` the server already saw, the job it made then is returned.

        Raises:
            JobsError: refused: unknown model (404), inputs infer would refuse (400), a full
                backlog (429), the key reused for another request (409).
        """
        body = infer_body(inputs, outputs, binary)
        return self.submit_body(model, body, version, idempotency_key, callback_url)

    def submit_body(
        self,
        model: str,
        body: Body,
        version: str = "",
        idempotency_key: str | None = None,
        callback_url: str | None = None,
    ) -> Job:
        """Queue a ready-made `/infer` body (see `submit`)."""
        request = self._calls.submit(model, body, version, idempotency_key, callback_url)
        return Calls.job(self._send(request))

    def get(self, job_id: str, wait_s: float = 0) -> Job:
        """The job; with `wait_s` seconds, answered once it ends or after that long (the
        server caps it, by default at 60 s).

        Raises:
            JobsError: unknown job (404).
        """
        request = self._calls.get(job_id, wait_s, self._timeout_s)
        return Calls.job(self._send(request))

    def wait(self, job_id: str, timeout_s: float | None = None) -> Job:
        """Long-poll until the job ends; the ended job.

        Raises:
            WaitTimeoutError: `timeout_s` seconds passed first (carries the job as last seen).
            JobsError: unknown job (404). Once the job was seen, a server restarting or out
                of reach is waited for (retried with backoff) until the timeout.
        """
        plan = WaitPlan(timeout_s)
        while True:
            try:
                job = self.get(job_id, plan.poll_s())
            except JobsError as exc:
                time.sleep(plan.backoff_s(exc))
                continue
            if plan.done(job):
                return job

    def result(self, job_id: str) -> dict[str, np.ndarray]:
        """The outputs of a succeeded job (name -> array).

        Raises:
            JobsError: unknown job (404), a job not succeeded (409: its state, its error).
        """
        return Calls.outputs(self._send(self._calls.result(job_id)))

    def cancel(self, job_id: str) -> Job:
        """Cancel a queued or running job; the job as it is now (an ended job is unchanged)."""
        return Calls.job(self._send(self._calls.cancel(job_id)))

    def page(
        self,
        model: str | None = None,
        state: JobState | str | None = None,
        limit: int = 100,
        page_token: str | None = None,
    ) -> JobPage:
        """One page of jobs, newest first."""
        return Calls.page_of(self._send(self._calls.page(model, state, limit, page_token)))

    def list(
        self,
        model: str | None = None,
        state: JobState | str | None = None,
        limit: int | None = 100,
        page_size: int = 100,
    ) -> Iterator[Job]:
        """Jobs, newest first, filtered by model and state, fetched a page at a time; at most
        `limit` (None: every job)."""
        token: str | None = None
        left = limit
        while left is None or left > 0:
            size = page_size if left is None else min(page_size, left)
            page = self.page(model, state, size, token)
            yield from page.jobs if left is None else page.jobs[:left]
            if left is not None:
                left -= len(page.jobs)
            token = page.next_page_token
            if not token or not page.jobs:
                return

    def counts(self) -> builtins.list[ModelStatistics]:
        """Per model: every job of the server's store counted by state, and the oldest
        queued job's time."""
        return Calls.counts_of(self._send(self._calls.counts()))

    def model_metadata(self, model: str, version: str = "") -> dict[str, Any]:
        """The model's KServe v2 metadata (its inputs' names, datatypes and shapes).

        Raises:
            JobsError: unknown model (404).
        """
        doc: dict[str, Any] = document(self._send(self._calls.metadata(model, version)))
        return doc

    def _send(self, request: httpx.Request) -> httpx.Response:
        try:
            return self._http.send(request)
        except httpx.TransportError as exc:
            raise JobsError(f"cannot reach {self.url}: {exc or type(exc).__name__}") from exc

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncJobsClient:
    """`JobsClient` for asyncio: the same methods, as coroutines (`list` iterates with
    `async for`). Close it with `await client.aclose()` or `async with`."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        verify: ssl.SSLContext | str | bool = True,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self._timeout_s = timeout_s
        self._http = httpx.AsyncClient(**client_options(token, verify, timeout_s))
        self._calls = Calls(url, self._http.build_request)

    @property
    def url(self) -> str:
        return self._calls.url

    async def submit(
        self,
        model: str,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] | None = None,
        version: str = "",
        idempotency_key: str | None = None,
        callback_url: str | None = None,
        binary: bool = True,
    ) -> Job:
        """See `JobsClient.submit`."""
        body = infer_body(inputs, outputs, binary)
        return await self.submit_body(model, body, version, idempotency_key, callback_url)

    async def submit_body(
        self,
        model: str,
        body: Body,
        version: str = "",
        idempotency_key: str | None = None,
        callback_url: str | None = None,
    ) -> Job:
        """See `JobsClient.submit_body`."""
        request = self._calls.submit(model, body, version, idempotency_key, callback_url)
        return Calls.job(await self._send(request))

    async def get(self, job_id: str, wait_s: float = 0) -> Job:
        """See `JobsClient.get`."""
        request = self._calls.get(job_id, wait_s, self._timeout_s)
        return Calls.job(await self._send(request))

    async def wait(self, job_id: str, timeout_s: float | None = None) -> Job:
        """See `JobsClient.wait`."""
        plan = WaitPlan(timeout_s)
        while True:
            try:
                job = await self.get(job_id, plan.poll_s())
            except JobsError as exc:
                await asyncio.sleep(plan.backoff_s(exc))
                continue
            if plan.done(job):
                return job

    async def result(self, job_id: str) -> dict[str, np.ndarray]:
        """See `JobsClient.result`."""
        return Calls.outputs(await self._send(self._calls.result(job_id)))

    async def cancel(self, job_id: str) -> Job:
        """See `JobsClient.cancel`."""
        return Calls.job(await self._send(self._calls.cancel(job_id)))

    async def page(
        self,
        model: str | None = None,
        state: JobState | str | None = None,
        limit: int = 100,
        page_token: str | None = None,
    ) -> JobPage:
        """See `JobsClient.page`."""
        request = self._calls.page(model, state, limit, page_token)
        return Calls.page_of(await self._send(request))

    async def list(
        self,
        model: str | None = None,
        state: JobState | str | None = None,
        limit: int | None = 100,
        page_size: int = 100,
    ) -> AsyncIterator[Job]:
        """See `JobsClient.list`."""
        token: str | None = None
        left = limit
        while left is None or left > 0:
            size = page_size if left is None else min(page_size, left)
            page = await self.page(model, state, size, token)
            for job in page.jobs if left is None else page.jobs[:left]:
                yield job
            if left is not None:
                left -= len(page.jobs)
            token = page.next_page_token
            if not token or not page.jobs:
                return

    async def counts(self) -> builtins.list[ModelStatistics]:
        """Per model: every job counted by state, and the oldest queued job's time."""
        return Calls.counts_of(await self._send(self._calls.counts()))

    async def model_metadata(self, model: str, version: str = "") -> dict[str, Any]:
        """See `JobsClient.model_metadata`."""
        doc: dict[str, Any] = document(await self._send(self._calls.metadata(model, version)))
        return doc

    async def _send(self, request: httpx.Request) -> httpx.Response:
        try:
            return await self._http.send(request)
        except httpx.TransportError as exc:
            raise JobsError(f"cannot reach {self.url}: {exc or type(exc).__name__}") from exc

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
