"""The HTTP frontend's one error table: fnserve error class -> HTTP status.

Statuses follow Triton's HTTP server (see PROTOCOL.md §6). Every error body is
`{"error": "<message>"}`; tritonclient reads that key. Anything that is not an `FnserveError`
is a bug: it answers 500 with a generic message and is logged with its traceback.
"""

from __future__ import annotations

import logging

import orjson

from fnserve.errors import (
    CancelledError,
    DeadlineExceededError,
    FnserveError,
    InvalidInputError,
    JobBacklogFullError,
    JobConflictError,
    JobNotFinishedError,
    JobNotFoundError,
    MemoryBudgetError,
    ModelExecutionError,
    ModelNotFoundError,
    ModelNotReadyError,
    OutOfMemoryError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RepositoryError,
    UnauthenticatedError,
    UnavailableError,
    UnsupportedError,
)

log = logging.getLogger(__name__)

_STATUS: dict[type[FnserveError], int] = {
    MemoryBudgetError: 503,
    PayloadTooLargeError: 413,
    InvalidInputError: 400,
    ModelNotFoundError: 404,
    ModelNotReadyError: 503,
    UnavailableError: 503,
    CancelledError: 400,
    UnsupportedError: 501,
    UnauthenticatedError: 401,
    PermissionDeniedError: 403,  # RestrictedApiError too, as Triton answers
    DeadlineExceededError: 504,
    # Retryable: 503 is the status HTTP clients and proxies retry (with backoff); 500 is not.
    OutOfMemoryError: 503,
    ModelExecutionError: 500,
    RepositoryError: 500,
    JobBacklogFullError: 429,  # too many jobs queued: clients back off and resubmit
    JobNotFoundError: 404,
    JobNotFinishedError: 409,
    JobConflictError: 409,
}
_GENERIC_MESSAGE = "Internal Server Error"


def http_status(error: FnserveError) -> int:
    """The HTTP status for `error`, found along its class hierarchy (unmapped: 500)."""
    for cls in type(error).__mro__:
        status = _STATUS.get(cls)
        if status is not None:
            return status
    return 500


def error_body(message: str) -> bytes:
    """The JSON error document Triton sends: `{"error": message}`."""
    return orjson.dumps({"error": message})


def error_response(exc: BaseException) -> tuple[int, bytes]:
    """Status and JSON body for any exception raised while serving a request."""
    if isinstance(exc, FnserveError):
        return http_status(exc), error_body(exc.message)
    log.exception("unexpected error while serving an HTTP request", exc_info=exc)
    return 500, error_body(_GENERIC_MESSAGE)
