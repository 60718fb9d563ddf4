"""Read one gRPC request message with a size limit checked before the message is buffered, and
serve unary RPCs with it (`answer`).

grpclib's `Stream.recv_message` waits until the whole message, whatever its length prefix
says, sits in memory (a 512 MiB request peaked at 3.2 GB) and turns a prefix that lies into
an AssertionError, i.e. INTERNAL with a traceback. Here the 5-byte prefix is checked first:
too large -> RESOURCE_EXHAUSTED with gRPC core's wording, compressed flag -> UNIMPLEMENTED
(fnserve accepts only `identity`), shorter data than announced -> INVALID_ARGUMENT. Like
`reply.py` this reaches into grpclib's stream (`_stream`, `_codec`, `_recv_type`) and falls
back to the public API when they are not there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from fnserve.errors import InvalidInputError
from fnserve.server.grpc.errors import to_grpc_error

if TYPE_CHECKING:
    from grpclib.server import Stream

_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")
_PREFIX_SIZE = 5


async def receive(stream: Stream[_Req, Any], max_bytes: int) -> _Req | None:
    """The next request message of `stream`, or None when the client half-closed.

    Raises:
        GRPCError: RESOURCE_EXHAUSTED (over `max_bytes`), UNIMPLEMENTED (compressed),
            INVALID_ARGUMENT (a length prefix that lies).
    """
    call: Any = stream
    try:
        h2_stream, codec, recv_type = call._stream, call._codec, call._recv_type
    except AttributeError:  # grpclib's internals moved: the public path, without the limit
        return await stream.recv_message()
    try:
        prefix = await h2_stream.recv_data(_PREFIX_SIZE)
        if not prefix:
            return None
        size = _message_size(prefix, max_bytes)
        data = await h2_stream.recv_data(size)
    except AssertionError:  # grpclib's Buffer: the stream ended before the announced size
        raise GRPCError(
            Status.INVALID_ARGUMENT, "the request message is shorter than its length prefix"
        ) from None
    message: _Req = codec.decode(data, recv_type)
    return message


def _message_size(prefix: bytes, max_bytes: int) -> int:
    flag = prefix[0]
    if flag == 1:
        raise GRPCError(
            Status.UNIMPLEMENTED, "compressed request messages are not supported (use identity)"
        )
    if flag != 0:
        raise GRPCError(Status.INVALID_ARGUMENT, f"invalid message compression flag {flag}")
    size = int.from_bytes(prefix[1:], "big")
    if size > max_bytes:
        raise GRPCError(
            Status.RESOURCE_EXHAUSTED,
            f"received message larger than max ({size} vs. {max_bytes})",
        )
    return size


async def answer(
    stream: Stream[_Req, _Resp], handler: Callable[[_Req], Awaitable[_Resp]], max_bytes: int
) -> None:
    """Serve one unary RPC: read the request, run `handler`, send its reply or the error."""
    try:
        request = await receive(stream, max_bytes)
        if request is None:
            raise InvalidInputError("the request message is missing")
        reply = await handler(request)
    except Exception as exc:
        raise to_grpc_error(exc) from None
    await stream.send_message(reply)
