"""The inference endpoint: a plain ASGI app, because it is the hot path.

It reads the body under the size limit, decodes it, awaits `Runtime.infer` while watching for
the client to go away (then the waiting task is cancelled, so the core drops the request
before it runs), and encodes the response, compressing it when the client asked.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from starlette.types import Receive, Scope, Send

from fnserve.limits import DEFAULT_LIMITS, InputLimits, check_model
from fnserve.server.http.body import (
    ClientDisconnectedError,
    compress,
    decompress,
    read_body,
    response_encoding,
)
from fnserve.server.http.codec import (
    OutputPlan,
    decode_raw_request,
    decode_request,
    encode_response,
    parse_header_length,
)
from fnserve.server.http.errors import error_response
from fnserve.types import InferRequest, InferResponse

if TYPE_CHECKING:
    from fnserve.runtime import Runtime

Headers = list[tuple[bytes, bytes]]

# how long a request runs before the frontend starts watching for its client to disconnect
WATCH_DELAY_S = 0.05
_JSON_TYPE = (b"content-type", b"application/json")
_BINARY_TYPE = (b"content-type", b"application/octet-stream")


class _RequestHeaders:
    """The few request headers inference cares about, found in one pass."""

    __slots__ = ("accept_encoding", "content_encoding", "content_length", "header_length")

    def __init__(self, raw: Headers) -> None:
        self.content_length: int | None = None
        self.header_length: bytes | None = None
        self.content_encoding: bytes | None = None
        self.accept_encoding: bytes | None = None
        for name, value in raw:
            if name == b"content-length":
                self.content_length = int(value) if value.isdigit() else None
            elif name == b"inference-header-content-length":
                self.header_length = value
            elif name == b"content-encoding":
                self.content_encoding = value
            elif name == b"accept-encoding":
                self.accept_encoding = value


class _DisconnectWatch:
    """Cancels the handler task if ASGI `receive` reports that the client went away.

    Watching costs a task per request, about a tenth of a fast request's CPU time, so it only
    starts once a request has waited `WATCH_DELAY_S`: requests that finish sooner never pay, and
    a client that left is still noticed (its `receive` answers at once) while the request waits
    in the queue, which is when dropping it saves work.
    """

    __slots__ = ("disconnected", "receive", "receiving", "task", "timer")

    def __init__(self, task: asyncio.Task[object], receive: Receive) -> None:
        self.task = task
        self.receive = receive
        self.disconnected = False
        self.receiving: asyncio.Future[Any] | None = None
        self.timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(
            WATCH_DELAY_S, self._start
        )

    def _start(self) -> None:
        self.timer = None
        receiving = asyncio.ensure_future(self.receive())
        receiving.add_done_callback(self._on_message)
        self.receiving = receiving

    def _on_message(self, receiving: asyncio.Future[Any]) -> None:
        if self.receiving is None or receiving.cancelled() or receiving.exception() is not None:
            return
        message = receiving.result()
        if isinstance(message, dict) and message.get("type") == "http.disconnect":
            self.disconnected = True
            self.task.cancel()

    def stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        receiving, self.receiving = self.receiving, None
        if receiving is not None and not receiving.done():
            receiving.cancel()


class InferEndpoint:
    """ASGI app for `POST /v2/models/{model_name}[/versions/{version}]/infer`.

    Args:
        runtime: the runtime that runs the request.
        max_body_bytes: largest request body, before and after decompression.
        limits: names, BYTES elements and gzip members allowed per request.
    """

    def __init__(
        self, runtime: Runtime, max_body_bytes: int, limits: InputLimits = DEFAULT_LIMITS
    ) -> None:
        self._runtime = runtime
        self._limit = max_body_bytes
        self._limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = _RequestHeaders(scope["headers"])
        try:
            result = await self._handle(scope, receive, headers)
        except ClientDisconnectedError:
            return
        except Exception as exc:
            status, body = error_response(exc)
            await _send(send, status, [_JSON_TYPE], body)
            return
        if result is not None:
            await _send(send, 200, *result)

    async def _handle(
        self, scope: Scope, receive: Receive, headers: _RequestHeaders
    ) -> tuple[Headers, bytes] | None:
        request, plan = await self._decode(scope, receive, headers)
        response = await self._infer(request, receive)
        if response is None:
            return None  # the client is gone: nothing to send
        body, header_length = encode_response(response, plan)
        if header_length is None:
            out_headers = [_JSON_TYPE]
        else:
            out_headers = [
                _BINARY_TYPE,
                (b"inference-header-content-length", b"%d" % header_length),
            ]
        encoding = response_encoding(headers.accept_encoding)
        if encoding is not None:
            body = compress(body, encoding)
            out_headers.append((b"content-encoding", encoding))
        return out_headers, body

    async def decode(self, scope: Scope, receive: Receive) -> tuple[InferRequest, OutputPlan]:
        """Read and decode an inference body as this endpoint does (the jobs endpoint submits
        the same bodies), under the same size limits."""
        return await self._decode(scope, receive, _RequestHeaders(scope["headers"]))

    async def _decode(
        self, scope: Scope, receive: Receive, headers: _RequestHeaders
    ) -> tuple[InferRequest, OutputPlan]:
        params = scope["path_params"]
        model = params["model_name"]
        version = params.get("version")
        version = "" if version is None else str(version)
        limits = self._limits
        body = await read_body(receive, self._limit, headers.content_length)
        check_model(model, version, limits)  # before any lookup echoes them
        if headers.content_encoding is not None:
            body = decompress(body, headers.content_encoding, self._limit, limits.max_gzip_members)
        header_length = parse_header_length(headers.header_length, len(body))
        if header_length == 0:
            config = self._runtime.model_config(model, version)
            return decode_raw_request(model, version, body, config, limits)
        return decode_request(model, version, body, header_length, limits)

    async def _infer(self, request: InferRequest, receive: Receive) -> InferResponse | None:
        task = asyncio.current_task()
        if task is None:  # not under an asyncio task: nothing to cancel
            return await self._runtime.infer(request)
        watch = _DisconnectWatch(task, receive)
        try:
            return await self._runtime.infer(request)
        except asyncio.CancelledError:
            if not watch.disconnected:
                raise  # shutdown or a timeout: not ours to swallow
            task.uncancel()
            return None
        finally:
            watch.stop()


async def _send(send: Send, status: int, headers: Headers, body: bytes) -> None:
    headers.append((b"content-length", b"%d" % len(body)))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
