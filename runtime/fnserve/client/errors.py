"""What the jobs client raises: the server's refusal, or a wait that ran out of time."""

from __future__ import annotations

from fnserve.client.wire import Job


class JobsError(Exception):
    """The server refused the call (its message and HTTP status), or could not be reached
    (status 0).

    Args:
        message: the server's reason, as it wrote it.
        status: the HTTP status; 0 when no answer came.
    """

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.status = status

    def __str__(self) -> str:
        return f"{self.message} (HTTP {self.status})" if self.status else self.message


class WaitTimeoutError(JobsError, TimeoutError):
    """`wait` ran out of time before the job ended; `job` is the job as last seen."""

    def __init__(self, job: Job, timeout_s: float) -> None:
        super().__init__(f"job {job.id} is still {job.state.value} after {timeout_s:g} s")
        self.job = job
