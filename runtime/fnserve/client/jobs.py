"""`JobsClient` and `AsyncJobsClient`: fnserve's jobs API over HTTP(S), on httpx.

Both share `_Calls`, which builds each request and reads each answer; the two classes only
send. Every refusal raises `JobsError` with the server's own message and HTTP status.

Example:
    ```python
    with JobsClient("http://127.0.0.1:8000") as client:
        job = client.submit("add_sub", {"INPUT0": a, "INPUT1": b})
        client.wait(job.id, timeout_s=60)
        outputs = client.result(job.id)  # {"OUTPUT0": array, "OUTPUT1": array}
    ```
"""

from __future__ import annotations

import ssl
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import httpx
import numpy as np

from fnserve.client.errors import JobsError, WaitTimeoutError
from fnserve.client.wire import HEADER_LENGTH, Body, Job, decode_outputs, infer_body
from fnserve.jobs.model import JobState

# A long poll is answered after `wait` seconds at the latest: give the read that much more.
_POLL_SLACK_S = 30.0
# The longest single long poll asked for; the server may cap it lower (--jobs-max-wait).
MAX_POLL_S = 60.0
DEFAULT_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of `GET /v2/jobs`: the jobs, and the token of the next page (None: last)."""

    jobs: list[Job]
    next_page_token: str | None


def tls_context(
    cacert: str | None = None, cert: str | None = None, key: str | None = None
) -> ssl.SSLContext:
    """TLS settings: `cacert` verifies the server (default: the system's CAs); `cert` and `key`
    are this client's certificate for mutual TLS.

    Raises:
        JobsError: a file cannot be read or holds no PEM certificate or key.
    """
    try:
        context = ssl.create_default_context(cafile=cacert or None)
        if cert:
            context.load_cert_chain(cert, key or None)
    except (OSError, ssl.SSLError) as exc:
        raise JobsError(f"cannot use the TLS files: {exc}") from exc
    return context


class _Calls:
    """Builds the requests of the jobs API and reads their answers (no I/O)."""

    def __init__(self, url: str) -> None:
        self.url = (url if "://" in url else f"http://{url}").rstrip("/")

    def submit(
        self,
        model: str,
        body: Body,
        version: str,
        idempotency_key: str | None,
        callback_url: str | None,
    ) -> httpx.Request:
        path = f"/v2/models/{quote(model, safe='')}"
        if version:
            path += f"/versions/{quote(version, safe='')}"
        headers = dict(body.headers)
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        if callback_url is not None:
            headers["Callback-URL"] = callback_url
        return httpx.Request(
            "POST", f"{self.url}{path}/jobs", content=body.content, headers=headers
        )

    def get(self, job_id: str, wait_s: float) -> httpx.Request:
        params = {"wait": _seconds(wait_s)} if wait_s > 0 else {}
        return httpx.Request("GET", self._job(job_id), params=params)

    def result(self, job_id: str) -> httpx.Request:
        return httpx.Request("GET", self._job(job_id) + "/result")

    def cancel(self, job_id: str) -> httpx.Request:
        return httpx.Request("POST", self._job(job_id) + "/cancel")

    def page(
        self, model: str | None, state: JobState | str | None, limit: int, page_token: str | None
    ) -> httpx.Request:
        params: dict[str, str | int] = {"limit": limit}
        if model:
            params["model"] = model
        if state:
            params["state"] = JobState(state).value
        if page_token:
            params["page_token"] = page_token
        return httpx.Request("GET", f"{self.url}/v2/jobs", params=params)

    def _job(self, job_id: str) -> str:
        if not job_id:
            raise JobsError("the job id is empty")
        return f"{self.url}/v2/jobs/{quote(job_id, safe='')}"

    @staticmethod
    def job(response: httpx.Response) -> Job:
        return Job.from_json(_document(response))

    @staticmethod
    def outputs(response: httpx.Response) -> dict[str, np.ndarray]:
        _check(response)
        try:
            return decode_outputs(response.content, response.headers.get(HEADER_LENGTH))
        except ValueError as exc:
            message = f"the server's answer is not a result: {exc}"
            raise JobsError(message, response.status_code) from None

    @staticmethod
    def page_of(response: httpx.Response) -> JobPage:
        doc = _document(response)
        return JobPage([Job.from_json(j) for j in doc["jobs"]], doc.get("next_page_token"))


def _seconds(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".")


def _check(response: httpx.Response) -> None:
    """Raise the server's refusal as a JobsError (its `error` message, its status)."""
    if response.is_success:
        return
    try:
        message = str(response.json()["error"])
    except (ValueError, KeyError, TypeError):
        message = response.text.strip() or response.reason_phrase
    raise JobsError(message, response.status_code)


def _document(response: httpx.Response) -> Any:
    _check(response)
    try:
        return response.json()
    except ValueError:
        raise JobsError("the server's answer is not JSON", response.status_code) from None


def _client_options(
    token: str | None, verify: ssl.SSLContext | str | bool, timeout_s: float
) -> dict[str, Any]:
    if isinstance(verify, str):
        verify = tls_context(verify)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return {"headers": headers, "verify": verify, "timeout": timeout_s}


def _poll_timeout(wait_s: float, timeout_s: float) -> httpx.Timeout:
    return httpx.Timeout(timeout_s, read=wait_s + _POLL_SLACK_S)


def _remaining(deadline: float | None) -> float:
    return MAX_POLL_S if deadline is None else min(deadline - time.monotonic(), MAX_POLL_S)


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
        self._calls = _Calls(url)
        self._timeout_s = timeout_s
        self._http = httpx.Client(**_client_options(token, verify, timeout_s))

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
        return _Calls.job(self._send(request))

    def get(self, job_id: str, wait_s: float = 0) -> Job:
        """The job; with `wait_s` seconds, answered once it ends or after that long (the
        server caps it, by default at 60 s).

        Raises:
            JobsError: unknown job (404).
        """
        request = self._calls.get(job_id, wait_s)
        request.extensions["timeout"] = _poll_timeout(wait_s, self._timeout_s).as_dict()
        return _Calls.job(self._send(request))

    def wait(self, job_id: str, timeout_s: float | None = None) -> Job:
        """Long-poll until the job ends; the ended job.

        Raises:
            WaitTimeoutError: `timeout_s` seconds passed first (carries the job as last seen).
            JobsError: unknown job (404).
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        job = self.get(job_id, max(_remaining(deadline), 0))
        while not job.done:
            left = _remaining(deadline)
            if left <= 0:
                raise WaitTimeoutError(job, timeout_s or 0)
            job = self.get(job_id, left)
        return job

    def result(self, job_id: str) -> dict[str, np.ndarray]:
        """The outputs of a succeeded job (name -> array).

        Raises:
            JobsError: unknown job (404), a job not succeeded (409: its state, its error).
        """
        return _Calls.outputs(self._send(self._calls.result(job_id)))

    def cancel(self, job_id: str) -> Job:
        """Cancel a queued or running job; the job as it is now (an ended job is unchanged)."""
        return _Calls.job(self._send(self._calls.cancel(job_id)))

    def page(
        self,
        model: str | None = None,
        state: JobState | str | None = None,
        limit: int = 100,
        page_token: str | None = None,
    ) -> JobPage:
        """One page of jobs, newest first."""
        return _Calls.page_of(self._send(self._calls.page(model, state, limit, page_token)))

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
        self._calls = _Calls(url)
        self._timeout_s = timeout_s
        self._http = httpx.AsyncClient(**_client_options(token, verify, timeout_s))

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
        return _Calls.job(await self._send(request))

    async def get(self, job_id: str, wait_s: float = 0) -> Job:
        """See `JobsClient.get`."""
        request = self._calls.get(job_id, wait_s)
        request.extensions["timeout"] = _poll_timeout(wait_s, self._timeout_s).as_dict()
        return _Calls.job(await self._send(request))

    async def wait(self, job_id: str, timeout_s: float | None = None) -> Job:
        """See `JobsClient.wait`."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        job = await self.get(job_id, max(_remaining(deadline), 0))
        while not job.done:
            left = _remaining(deadline)
            if left <= 0:
                raise WaitTimeoutError(job, timeout_s or 0)
            job = await self.get(job_id, left)
        return job

    async def result(self, job_id: str) -> dict[str, np.ndarray]:
        """See `JobsClient.result`."""
        return _Calls.outputs(await self._send(self._calls.result(job_id)))

    async def cancel(self, job_id: str) -> Job:
        """See `JobsClient.cancel`."""
        return _Calls.job(await self._send(self._calls.cancel(job_id)))

    async def page(
        self,
        model: str | None = None,
        state: JobState | str | None = None,
        limit: int = 100,
        page_token: str | None = None,
    ) -> JobPage:
        """See `JobsClient.page`."""
        request = self._calls.page(model, state, limit, page_token)
        return _Calls.page_of(await self._send(request))

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
