"""The jobs API's requests and answers, without I/O: `Calls` builds each `httpx.Request` and
reads each `httpx.Response`; `JobsClient` and `AsyncJobsClient` only send them. A refusal is
raised as `JobsError` with the server's own message and HTTP status."""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import numpy as np

from fnserve import remote
from fnserve.client.errors import JobsError, WaitTimeoutError
from fnserve.client.wire import HEADER_LENGTH, Body, Job, ModelStatistics, decode_outputs
from fnserve.jobs.model import JobState

# The longest single long poll asked for; the server may cap it lower (--jobs-max-wait).
MAX_POLL_S = 60.0
DEFAULT_TIMEOUT_S = 30.0
# No answer, or a proxy's or a draining server's: the server is restarting or out of reach.
_TRANSIENT_STATUSES = frozenset({0, 502, 503, 504})
_BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0)


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
        return remote.tls_context(cacert, cert, key)
    except remote.TLSFilesError as exc:
        raise JobsError(str(exc)) from exc


class Calls:
    """Builds the requests of the jobs API and reads their answers (no I/O).

    Args:
        url: the server's base URL.
        build: the httpx client's `build_request`, so that requests carry its headers (the
            token) and timeouts.
    """

    def __init__(self, url: str, build: Callable[..., httpx.Request]) -> None:
        self.url = (url if "://" in url else f"http://{url}").rstrip("/")
        self._build = build

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
        return self._build("POST", f"{self.url}{path}/jobs", content=body.content, headers=headers)

    def get(self, job_id: str, wait_s: float, timeout_s: float) -> httpx.Request:
        params = {"wait": _seconds(wait_s)} if wait_s > 0 else {}
        # A long poll is answered after `wait_s` at the latest: its read may take that long.
        timeout = httpx.Timeout(timeout_s, read=timeout_s + wait_s)
        return self._build("GET", self._job(job_id), params=params, timeout=timeout)

    def result(self, job_id: str) -> httpx.Request:
        return self._build("GET", self._job(job_id) + "/result")

    def cancel(self, job_id: str) -> httpx.Request:
        return self._build("POST", self._job(job_id) + "/cancel")

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
        return self._build("GET", f"{self.url}/v2/jobs", params=params)

    def counts(self) -> httpx.Request:
        return self._build("GET", f"{self.url}/v2/jobs/counts")

    def metadata(self, model: str, version: str) -> httpx.Request:
        path = f"/v2/models/{quote(model, safe='')}"
        if version:
            path += f"/versions/{quote(version, safe='')}"
        return self._build("GET", self.url + path)

    def _job(self, job_id: str) -> str:
        if not job_id:
            raise JobsError("the job id is empty")
        return f"{self.url}/v2/jobs/{quote(job_id, safe='')}"

    @staticmethod
    def job(response: httpx.Response) -> Job:
        return Job.from_json(document(response))

    @staticmethod
    def outputs(response: httpx.Response) -> dict[str, np.ndarray]:
        _check(response)
        try:
            return decode_outputs(response.content, response.headers.get(HEADER_LENGTH))
        except ValueError as exc:
            message = f"the server's answer is not a result: {exc}"
            raise JobsError(message, response.status_code) from None

    @staticmethod
    def counts_of(response: httpx.Response) -> list[ModelStatistics]:
        return [ModelStatistics.from_json(m) for m in document(response)["models"]]

    @staticmethod
    def page_of(response: httpx.Response) -> JobPage:
        doc = document(response)
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


def document(response: httpx.Response) -> Any:
    _check(response)
    try:
        return response.json()
    except ValueError:
        raise JobsError("the server's answer is not JSON", response.status_code) from None


def client_options(
    token: str | None, verify: ssl.SSLContext | str | bool, timeout_s: float
) -> dict[str, Any]:
    if isinstance(verify, str):
        verify = tls_context(verify)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return {"headers": headers, "verify": verify, "timeout": timeout_s}


class WaitPlan:
    """One `wait`: how long to long-poll next, when to give up, how long to back off.

    Once the job has been seen, answers that mean the server is restarting or out of reach
    (no answer, 502, 503, 504) are retried with backoff until the deadline: jobs outlive
    servers, so a wait may too. Before that, every error is raised at once (a wrong URL or
    token fails fast).

    Args:
        timeout_s: give up after this long (None: never).
    """

    def __init__(self, timeout_s: float | None) -> None:
        self._timeout_s = timeout_s
        self._deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self._seen: Job | None = None
        self._failures = 0

    def poll_s(self) -> float:
        """Seconds the next long poll may wait (0 first: a quick look shows the job exists
        before a long poll that a restart could cut)."""
        if self._seen is None:
            return 0.0
        if self._deadline is None:
            return MAX_POLL_S
        return max(min(self._deadline - time.monotonic(), MAX_POLL_S), 0.0)

    def done(self, job: Job) -> bool:
        """Whether `job` ended (then stop waiting).

        Raises:
            WaitTimeoutError: it has not, and the time is up.
        """
        self._seen, self._failures = job, 0
        if job.done:
            return True
        if self._deadline is not None and time.monotonic() >= self._deadline:
            raise WaitTimeoutError(job, self._timeout_s or 0)
        return False

    def backoff_s(self, error: JobsError) -> float:
        """Seconds to sleep before polling again after `error`.

        Raises:
            JobsError: `error`, when it is not worth retrying.
            WaitTimeoutError: the time is up.
        """
        if self._seen is None or error.status not in _TRANSIENT_STATUSES:
            raise error
        delay_s = _BACKOFF_S[min(self._failures, len(_BACKOFF_S) - 1)]
        self._failures += 1
        if self._deadline is not None and time.monotonic() + delay_s >= self._deadline:
            raise WaitTimeoutError(self._seen, self._timeout_s or 0) from error
        return delay_s
