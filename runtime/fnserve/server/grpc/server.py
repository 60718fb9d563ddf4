"""grpclib's server, with the connection limits a public gRPC port needs.

grpclib accepts any number of connections, keeps silent ones forever and lets a client reset
or ping as fast as it can. `GrpcServer` wraps each connection's protocol:

- past `max_connections` open connections a new one gets SETTINGS + GOAWAY and is closed
  (clients see UNAVAILABLE and may retry);
- a connection that sends no request within `header_timeout_s`, or sits with no open stream
  for `keep_alive_timeout_s`, is closed with GOAWAY(NO_ERROR);
- `h2guard.FrameGuard` ends floods (rapid reset, pings, SETTINGS) with GOAWAY(ENHANCE_YOUR_CALM);
- HTTP/2 settings bound streams per connection, the header list and the flow-control windows;
- with TLS, a handshake must end within `header_timeout_s` (grpclib's `start` would allow 60 s).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections.abc import Sequence
from typing import Any, cast

import grpclib.server
from grpclib.config import Configuration
from grpclib.protocol import H2Protocol
from h2.settings import SettingCodes

from fnserve.config.server import ServerConfig
from fnserve.server.h2guard import ENHANCE_YOUR_CALM, NO_ERROR, FloodBudget, FrameGuard, goaway

log = logging.getLogger(__name__)


class GrpcServer(grpclib.server.Server):
    """`grpclib.server.Server` whose connections obey `config`'s limits.

    Args:
        handlers: the services.
        config: connection caps, timeouts and HTTP/2 settings.
    """

    def __init__(self, handlers: Sequence[Any], config: ServerConfig) -> None:
        window = config.h2_window_bytes
        super().__init__(
            handlers,
            config=Configuration(
                http2_connection_window_size=window, http2_stream_window_size=window
            ),
        )
        self._limits = config
        self._open: set[_GuardedH2Protocol] = set()

    async def serve_on(self, sock: socket.socket, tls: ssl.SSLContext | None = None) -> None:
        """Start serving on the listening `sock`, over TLS with `tls` (ALPN `h2`)."""
        if tls is None:
            await self.start(sock=sock)
            return
        # grpclib's `start` sets these two and passes no handshake timeout through
        self._server = await self._loop.create_server(
            self._protocol_factory,
            sock=sock,
            ssl=tls,
            ssl_handshake_timeout=self._limits.header_timeout_s,
        )
        self._server_closed_fut = self._loop.create_future()

    def _protocol_factory(self) -> H2Protocol:
        plain = super()._protocol_factory()
        return _GuardedH2Protocol(plain.handler, plain.config, plain.h2_config, self)


class _GuardedH2Protocol(H2Protocol):
    def __init__(self, handler: Any, config: Any, h2_config: Any, server: GrpcServer) -> None:
        super().__init__(handler, config, h2_config)
        self._server = server
        self._limits = server._limits
        self._guard = FrameGuard(FloodBudget())
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._last_active = time.monotonic()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        super().connection_made(transport)
        limits, open_ = self._limits, self._server._open
        if len(open_) >= limits.max_connections:
            log.warning("gRPC connection refused: %d connections open", len(open_))
            cap = limits.max_connections
            self._goaway(NO_ERROR, f"the server has reached its limit of {cap} connections")
            return
        open_.add(self)
        h2 = self.connection._connection
        h2.update_settings(
            {
                SettingCodes.MAX_CONCURRENT_STREAMS: limits.h2_max_concurrent_streams,
                SettingCodes.MAX_HEADER_LIST_SIZE: limits.max_header_bytes,
            }
        )
        self.connection.flush()
        self._schedule(limits.header_timeout_s)

    def data_received(self, data: bytes) -> None:
        self._last_active = time.monotonic()
        reason = self._guard.feed(data)
        if reason is not None:
            log.warning("gRPC connection closed: %s", reason)
            self._goaway(ENHANCE_YOUR_CALM, reason)
            return
        super().data_received(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._server._open.discard(self)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().connection_lost(exc)

    def _schedule(self, delay_s: float) -> None:
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(max(delay_s, 0.01), self._check_idle)

    def _check_idle(self) -> None:
        """Close a connection that never sent a request, or has idled past keep-alive."""
        self._timer = None
        if not self._guard.saw_headers:
            self._goaway(NO_ERROR, "no request within the header timeout")
            return
        idle_for = time.monotonic() - self._last_active
        keep_alive = self._limits.keep_alive_timeout_s
        if not self.processor.streams and idle_for >= keep_alive:
            self._goaway(NO_ERROR, "idle connection")
            return
        self._schedule(keep_alive - idle_for if idle_for < keep_alive else keep_alive)

    def _goaway(self, error_code: int, reason: str) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        transport.write(goaway(self._guard.last_stream_id, error_code, reason.encode()))
        transport.close()
