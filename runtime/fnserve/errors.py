"""The one error hierarchy of fnserve; frontends map each class to an HTTP status and gRPC code.

```
FnserveError                      (.message; unmapped -> 500 / INTERNAL)
├── InvalidInputError             400 / INVALID_ARGUMENT   bad shape, datatype, size, body
│   └── PayloadTooLargeError      413 / RESOURCE_EXHAUSTED  body over the configured limit
├── ModelNotFoundError            404 / NOT_FOUND          unknown model or version
├── ModelNotReadyError            503 / UNAVAILABLE        known but not READY
├── UnavailableError              503 / UNAVAILABLE
│   ├── QueueFullError            queue policy max_queue_size reached
│   │   └── JobBacklogFullError   429 / RESOURCE_EXHAUSTED  a model's job backlog is at its limit
│   ├── RequestTimeoutError       waited in the queue past its timeout (Triton answers UNAVAILABLE)
│   └── MemoryBudgetError         503 / RESOURCE_EXHAUSTED a model does not fit --memory-budget
├── CancelledError                400 / CANCELLED          the client went away
├── UnsupportedError              501 / UNIMPLEMENTED      a feature fnserve does not offer
├── UnauthenticatedError          401 / UNAUTHENTICATED    no bearer token, or an unknown one
├── PermissionDeniedError         403 / PERMISSION_DENIED  role too low, or control refused
│   └── RestrictedApiError        403 / UNAVAILABLE        Triton's restricted-API header missing
├── DeadlineExceededError         504 / DEADLINE_EXCEEDED  an execution ran past its timeout
├── ModelExecutionError           500 / INTERNAL           the model raised (wraps the cause)
│   ├── InstanceBrokenError       the instance itself died (its worker crashed); it is replaced
│   └── OutOfMemoryError          503 / RESOURCE_EXHAUSTED  out of memory even alone (retryable)
├── JobNotFoundError              404 / NOT_FOUND          unknown (or expired) job id
├── JobNotFinishedError           409 / FAILED_PRECONDITION  result asked before success
├── JobConflictError              409 / ALREADY_EXISTS     idempotency key of another request
├── ModelConfigError              raised at import time: a bad `@model` declaration
└── RepositoryError               500 / INTERNAL           load/unload failures
```
"""

from __future__ import annotations


class FnserveError(Exception):
    """Base class: every error fnserve raises on purpose.

    Args:
        message: one sentence, lower-case start, no trailing period, the same on HTTP and gRPC.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class InvalidInputError(FnserveError):
    """The request does not match the model (shape, datatype, size) or is malformed."""


class PayloadTooLargeError(InvalidInputError):
    """The request body is larger than the server accepts."""


class ModelNotFoundError(FnserveError):
    """No model (or version of it) with that name is known."""


class ModelNotReadyError(FnserveError):
    """The model is known but not in the READY state."""


class UnavailableError(FnserveError):
    """The server cannot take this request now; retrying later may succeed."""


class QueueFullError(UnavailableError):
    """The model's queue is at its `max_queue_size`."""


class JobBacklogFullError(QueueFullError):
    """A model's backlog of queued jobs is at `--jobs-max-backlog`; submit again later."""


class RequestTimeoutError(UnavailableError):
    """The request waited in the queue longer than its timeout."""


class MemoryBudgetError(UnavailableError):
    """A model cannot be loaded or cold-started: it does not fit the memory budget even after
    every evictable model was scaled to zero (the message names what holds the memory)."""


class CancelledError(FnserveError):
    """The request was cancelled, usually because its client disconnected."""


class UnsupportedError(FnserveError):
    """The request asks for something fnserve does not implement."""


class UnauthenticatedError(FnserveError):
    """The API needs a bearer token and the request carried none, or one the server does not
    know (the message never quotes it)."""


class PermissionDeniedError(FnserveError):
    """The request's token has too low a role for the API, or the API is closed (the control
    APIs on a public address without an admin token)."""


class RestrictedApiError(PermissionDeniedError):
    """A Triton restriction (`--http-restricted-api`, `--grpc-restricted-protocol`) covers the
    API and its header is missing or wrong; answered as Triton does (HTTP 403, gRPC UNAVAILABLE)."""


class DeadlineExceededError(FnserveError):
    """A model execution ran past its `execution_timeout_s`; its instance is replaced."""


class ModelExecutionError(FnserveError):
    """The model's own code raised; the cause is chained with `raise ... from exc`."""


class InstanceBrokenError(ModelExecutionError):
    """The instance running the batch died (e.g. its worker process crashed).

    Raised by an instance's `run`; the pool fails that batch and builds a replacement.
    """


class OutOfMemoryError(ModelExecutionError):
    """The model ran out of memory (host or device: torch, onnxruntime, TensorRT, MemoryError).

    A batch that runs out is split in halves and rerun down to single requests first (see
    `fnserve.scheduling.oom`); only a request that runs out alone reaches its client with this
    error. It is retryable: memory other work holds may be free later, fewer rows may fit.
    """


class JobNotFoundError(FnserveError):
    """No job with that id (never submitted, or expired after its result TTL)."""


class JobNotFinishedError(FnserveError):
    """A job's result was asked for while the job has none: still queued or running, failed
    (the message carries its error) or cancelled."""


class JobConflictError(FnserveError):
    """An idempotency key was reused with a different request."""


class ModelConfigError(FnserveError):
    """A model declaration is invalid (raised when the `@model` decorator runs)."""


class RepositoryError(FnserveError):
    """Loading or unloading a model failed."""


class StartupError(FnserveError):
    """The server cannot start (a port is taken, no model was found); `fnserve serve` prints
    the message as one line and exits non-zero."""


__all__ = [
    "CancelledError",
    "DeadlineExceededError",
    "FnserveError",
    "InstanceBrokenError",
    "InvalidInputError",
    "JobBacklogFullError",
    "JobConflictError",
    "JobNotFinishedError",
    "JobNotFoundError",
    "MemoryBudgetError",
    "ModelConfigError",
    "ModelExecutionError",
    "ModelNotFoundError",
    "ModelNotReadyError",
    "OutOfMemoryError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "QueueFullError",
    "RepositoryError",
    "RequestTimeoutError",
    "RestrictedApiError",
    "StartupError",
    "UnauthenticatedError",
    "UnavailableError",
    "UnsupportedError",
]
