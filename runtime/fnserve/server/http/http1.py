"""HTTP/1.1 connections: uvicorn's httptools protocol, with the limits a public port needs.

uvicorn bounds none of these, and each was an outage in an adversarial test: a client that
sends a request head slowly (two header lines, then nothing) held its connection forever; a
256 MiB header was read whole (81 s, 572 MB, httptools concatenating the value as it grew).
Here the head of every request must arrive within `header_timeout_s` and stay under
`max_header_bytes` and `max_headers`, its target under `max_url_bytes`; past a limit the client
gets Triton-style JSON error (408, 431 or 414) and the connection is closed. The counting
happens as bytes arrive, before httptools buffers more; once the head is complete nothing is
added to the per-request path.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from fnserve.config.server import ServerConfig
from fnserve.server.http.errors import error_body

log = logging.getLogger(__name__)
# After a refusal the rest of the request is read and dropped this long before closing, so the
# client (still sending) reads the error instead of a connection reset (nginx's lingering close).
LINGER_S = 1.0

_REASONS = {
    408: b"Request Timeout",
    414: b"URI Too Long",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
}


def refusal(status: int, message: str) -> bytes:
    """A complete HTTP/1.1 error response that closes the connection."""
    body = error_body(message)
    return b"".join(
        [
            b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status]),
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n",
            body,
        ]
    )


class _RefusedError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """`HttpToolsProtocol` that bounds each request head in time, bytes, headers and URL."""

    def __init__(self, *args: Any, limits: ServerConfig, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._limits = limits
        self._in_head = True  # between the end of one request's body and the next head's end
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # lingering: the answer is out, the rest of the request is dropped
        self._unset_keepalive_if_required()
        if self._in_head:
            self._head_bytes += len(data)
            self._arm()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._unsupported_upgrade_warning()  # no WebSocket or h2c upgrade on this port
        except httptools.HttpParserError as exc:
            if isinstance(exc.__context__, _RefusedError):
                self._refuse(exc.__context__.status, exc.__context__.message)
            else:
                self.send_400_response("Invalid HTTP request received.")
            return
        # Counted per read, so a head that arrives with part of its body may read as larger
        # than it is; only a head still incomplete past the limit is refused.
        if self._in_head and self._head_bytes > self._limits.max_header_bytes:
            self._refuse(
                431, f"request head is over the limit of {self._limits.max_header_bytes} bytes"
            )

    # -- parser callbacks -----------------------------------------------------------------

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > self._limits.max_url_bytes:
            limit = self._limits.max_url_bytes
            raise _RefusedError(414, f"request URL is over the limit of {limit} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(self.headers) >= self._limits.max_headers:
            raise _RefusedError(
                431, f"request has more than {self._limits.max_headers} header fields"
            )
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        self._disarm()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._in_head = True  # whatever comes next is the head of the next request
        super().on_message_complete()

    # -- helpers --------------------------------------------------------------------------

    def _arm(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(
                self._limits.header_timeout_s, self._head_timed_out
            )

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        busy = self.cycle is not None and not self.cycle.response_complete
        if self._in_head and not busy and not self.transport.is_closing():
            timeout = self._limits.header_timeout_s
            self._refuse(408, f"request head not received within {timeout:g} s")

    def _refuse(self, status: int, message: str) -> None:
        log.info("HTTP/1.1 connection from %s refused: %s", self.client, message)
        self._disarm()
        transport = self.transport
        if self._refused or transport.is_closing():
            return
        self._refused = True
        transport.write(refusal(status, message))
        if transport.can_write_eof():
            transport.write_eof()
            self.loop.call_later(LINGER_S, transport.close)
        else:
            transport.close()
