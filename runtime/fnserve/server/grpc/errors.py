"""The one table that maps fnserve's errors to gRPC status codes (see `fnserve.errors`).

A mapped error keeps its message. Anything else is a bug: the client gets INTERNAL with a
generic message (never a traceback or a file path) and the server logs the exception.
"""

from __future__ import annotations

import logging

from google.protobuf.message import DecodeError
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from fnserve.errors import (
    CancelledError,
    DeadlineExceededError,
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
    RestrictedApiError,
    UnauthenticatedError,
    UnavailableError,
    UnsupportedError,
)

log = logging.getLogger("fnserve.server.grpc")

GENERIC_MESSAGE = "Internal Server Error"
# grpc-message is a header: a long one costs hpack and percent-encoding time on the event loop
# (a 1 MB model name echoed there took 74 s). Messages quote client values briefly already;
# this is the backstop.
MAX_MESSAGE_CHARS = 1024

# Looked up along the exception's MRO, so subclasses (QueueFullError, PayloadTooLargeError)
# take the entry of their nearest mapped ancestor.
STATUS_BY_ERROR: dict[type[Exception], Status] = {
    InvalidInputError: Status.INVALID_ARGUMENT,
    MemoryBudgetError: Status.RESOURCE_EXHAUSTED,
    PayloadTooLargeError: Status.RESOURCE_EXHAUSTED,
    ModelNotFoundError: Status.NOT_FOUND,
    ModelNotReadyError: Status.UNAVAILABLE,
    UnavailableError: Status.UNAVAILABLE,
    CancelledError: Status.CANCELLED,
    UnsupportedError: Status.UNIMPLEMENTED,
    UnauthenticatedError: Status.UNAUTHENTICATED,
    PermissionDeniedError: Status.PERMISSION_DENIED,
    # Triton answers its restricted protocols with UNAVAILABLE (grpc_handler.h); kept as is.
    RestrictedApiError: Status.UNAVAILABLE,
    DeadlineExceededError: Status.DEADLINE_EXCEEDED,
    # "Some resource has been exhausted": retryable with backoff once memory frees up, but
    # not UNAVAILABLE, which clients (KServe's default retry policy) retry at once and which
    # says the server, not this request, cannot be served.
    OutOfMemoryError: Status.RESOURCE_EXHAUSTED,
    JobBacklogFullError: Status.RESOURCE_EXHAUSTED,
    JobNotFoundError: Status.NOT_FOUND,
    JobNotFinishedError: Status.FAILED_PRECONDITION,
    JobConflictError: Status.ALREADY_EXISTS,
    ModelExecutionError: Status.INTERNAL,
    RepositoryError: Status.INTERNAL,
    # protobuf could not parse the request: the client sent a malformed message.
    DecodeError: Status.INVALID_ARGUMENT,
}


def status_of(exc: BaseException) -> tuple[Status, str]:
    """The gRPC status and message for an exception raised while serving an RPC.

    Unmapped exceptions are logged with their traceback and answered generically.
    """
    for cls in type(exc).__mro__:
        status = STATUS_BY_ERROR.get(cls)
        if status is not None:
            return status, bounded(str(exc))
    log.exception("unexpected error while serving a gRPC request", exc_info=exc)
    return Status.INTERNAL, GENERIC_MESSAGE


def bounded(message: str) -> str:
    """`message`, cut to `MAX_MESSAGE_CHARS` characters."""
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return message[: MAX_MESSAGE_CHARS - 30] + f"... ({len(message)} characters)"


def to_grpc_error(exc: BaseException) -> GRPCError:
    """The GRPCError to raise (grpclib turns it into the response trailers)."""
    if isinstance(exc, GRPCError):
        return GRPCError(exc.status, bounded(exc.message or ""), exc.details)
    status, message = status_of(exc)
    return GRPCError(status, message)
