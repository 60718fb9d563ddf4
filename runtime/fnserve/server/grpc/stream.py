"""ModelStreamInfer: Triton's bidirectional inference stream.

Requests of one stream run concurrently; their responses leave in request order, as Triton
answers requests to non-decoupled models (every fnserve model is one). Each response carries
`triton_final_response: true`, the flag Triton puts on the last (here: only) response of a
request. A failed request is answered in-band with `error_message` and the stream stays open,
unless the client sent the `triton_grpc_error: true` header: then the first error ends the
stream with its gRPC status, as in Triton. `triton_enable_empty_final_response` is accepted and
has no effect: Triton sends that empty response only for decoupled models.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, NamedTuple

from grpclib.exceptions import GRPCError

from fnserve.errors import ModelExecutionError
from fnserve.limits import InputLimits
from fnserve.protocol import grpc_service_pb2 as pb
from fnserve.server.grpc.codec import (
    FINAL_RESPONSE,
    decode_request,
    encode_response,
    wrap_stream_response,
)
from fnserve.server.grpc.errors import status_of, to_grpc_error
from fnserve.server.grpc.receive import receive
from fnserve.server.grpc.reply import check_reply_size, send_streamed

if TYPE_CHECKING:
    from grpclib.const import Status
    from grpclib.server import Stream

    from fnserve.runtime import Runtime

GRPC_ERROR_HEADER = "triton_grpc_error"
_Pending = asyncio.Queue["asyncio.Task[_Outcome] | None"]


class StreamLimits(NamedTuple):
    """What one stream may use: input limits per request, message size, requests in flight.

    At most `max_inflight` requests run (or wait to be written) at once; past it the stream is
    not read, so HTTP/2 flow control holds the client back. A client that never reads its
    responses thus costs a bounded amount of memory, not 3 GB and growing.
    """

    inputs: InputLimits
    max_message_bytes: int
    max_inflight: int


class _Outcome(NamedTuple):
    parts: list[bytes]  # the serialized ModelStreamInferResponse
    status: Status | None = None  # set when the request failed
    message: str = ""


async def serve_stream(
    runtime: Runtime,
    stream: Stream[pb.ModelInferRequest, pb.ModelStreamInferResponse],
    limits: StreamLimits,
) -> None:
    """Serve one ModelStreamInfer call until the client half-closes and all replies are sent.

    Raises:
        GRPCError: the stream broke, or a request failed and the client asked for gRPC errors.
    """
    header = stream.metadata.get(GRPC_ERROR_HEADER) if stream.metadata else None
    grpc_errors = isinstance(header, str) and header.lower() == "true"
    pending: _Pending = asyncio.Queue(limits.max_inflight)
    reader = asyncio.create_task(_read(runtime, stream, pending, limits))
    writer = asyncio.create_task(_write(stream, pending, grpc_errors))
    try:
        await asyncio.wait((reader, writer), return_when=asyncio.FIRST_EXCEPTION)
        for task in (writer, reader):
            if task.done() and (exc := task.exception()) is not None:
                raise to_grpc_error(exc) from None
    finally:
        _cancel(reader, writer, pending)


def _cancel(reader: asyncio.Task[None], writer: asyncio.Task[None], pending: _Pending) -> None:
    # The client is gone or the stream failed: drop the requests nobody will read.
    for task in (reader, writer):
        if task.done() and not task.cancelled():
            task.exception()  # mark it retrieved; it was raised above if it mattered
        task.cancel()
    while not pending.empty():
        queued = pending.get_nowait()
        if queued is not None:
            queued.cancel()


async def _read(
    runtime: Runtime,
    stream: Stream[pb.ModelInferRequest, pb.ModelStreamInferResponse],
    pending: _Pending,
    limits: StreamLimits,
) -> None:
    while (msg := await receive(stream, limits.max_message_bytes)) is not None:
        await pending.put(asyncio.create_task(_respond(runtime, msg, limits)))
    await pending.put(None)


async def _write(
    stream: Stream[pb.ModelInferRequest, pb.ModelStreamInferResponse],
    pending: _Pending,
    grpc_errors: bool,
) -> None:
    while (task := await pending.get()) is not None:
        outcome = await task
        if outcome.status is not None and grpc_errors:
            raise GRPCError(outcome.status, outcome.message)
        await send_streamed(stream, outcome.parts, pb.ModelStreamInferResponse)


async def _respond(runtime: Runtime, msg: pb.ModelInferRequest, limits: StreamLimits) -> _Outcome:
    try:
        request = decode_request(msg, limits.inputs)
        parts = encode_response(await runtime.infer(request), final=True)
        check_reply_size(parts, limits.max_message_bytes)
    except Exception as exc:
        status, message = status_of(exc)
        reply = _error_reply(msg, message, isinstance(exc, ModelExecutionError))
        return _Outcome([reply.SerializeToString()], status, message)
    return _Outcome(wrap_stream_response(parts))


def _error_reply(
    msg: pb.ModelInferRequest, message: str, executed: bool
) -> pb.ModelStreamInferResponse:
    reply = pb.ModelStreamInferResponse(error_message=message)
    result = reply.infer_response
    result.SetInParent()
    result.id = msg.id  # so the client can tell which request failed
    if executed:
        # Triton fills these, and the final flag, only for failures after the model ran.
        result.model_name = msg.model_name
        result.model_version = msg.model_version
        result.parameters[FINAL_RESPONSE].bool_param = True
    return reply
