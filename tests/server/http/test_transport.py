"""The HTTP transport alone: HTTP/1.1 and h2c on one port, and graceful shutdown."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from fnserve.config.server import ServerConfig
from fnserve.server.http.transport import _no_delay, serve_http


@dataclass
class SlowApp:
    """Answers the path; `/slow` waits until `release` is set."""

    started: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: bool = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        if scope["path"] == "/slow":
            self.started.set()
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled = True
                raise
        body = f"{scope['http_version']} {scope['path']}".encode()
        headers = [(b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


@dataclass
class Running:
    url: str
    port: int
    app: SlowApp
    shutdown: asyncio.Event
    task: asyncio.Task[None]


def _listen() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # proto 0, as app.bind makes it
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.setblocking(False)
    return sock


@pytest.fixture
async def running() -> AsyncIterator[Running]:
    sock = _listen()
    port = sock.getsockname()[1]
    app = SlowApp()
    shutdown = asyncio.Event()
    config = ServerConfig(shutdown_timeout_s=0.5)
    task = asyncio.create_task(serve_http(app, sock, config, shutdown))
    yield Running(f"http://127.0.0.1:{port}", port, app, shutdown, task)
    shutdown.set()
    app.release.set()
    await asyncio.wait_for(task, 5)


async def test_http1_and_h2c_share_the_port(running: Running) -> None:
    async with httpx.AsyncClient(base_url=running.url) as h1:
        assert (await h1.get("/a")).text == "1.1 /a"
    async with httpx.AsyncClient(base_url=running.url, http1=False, http2=True) as h2:
        response = await h2.get("/b")
        assert (response.http_version, response.text) == ("HTTP/2", "2 /b")


async def test_a_few_bytes_at_a_time_still_sniff_right(running: Running) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", running.port)
    for piece in (b"P", b"OST /x HTTP/1.1\r\n", b"Host: a\r\nContent-Length: 0\r\n\r\n"):
        writer.write(piece)
        await writer.drain()
        await asyncio.sleep(0.01)
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    writer.close()


async def test_shutdown_lets_in_flight_requests_finish(running: Running) -> None:
    async with httpx.AsyncClient(base_url=running.url) as client:
        idle = await client.get("/warm")  # leaves a keep-alive connection behind
        assert idle.status_code == 200
        slow = asyncio.create_task(client.get("/slow"))
        await running.app.started.wait()
        running.shutdown.set()
        await asyncio.sleep(0.05)
        assert not running.task.done()  # still draining the in-flight request
        running.app.release.set()
        assert (await slow).status_code == 200
        await asyncio.wait_for(running.task, 5)
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", running.port)


async def test_shutdown_cancels_requests_past_the_timeout(running: Running) -> None:
    async with httpx.AsyncClient(base_url=running.url) as client:
        slow = asyncio.create_task(client.get("/slow"))
        await running.app.started.wait()
        running.shutdown.set()
        await asyncio.wait_for(running.task, 5)  # shutdown_timeout_s is 0.5
        assert running.app.cancelled
        assert (await slow).status_code == 500  # uvicorn answers for the cancelled app


async def test_silent_connections_do_not_block_shutdown(running: Running) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", running.port)
    await asyncio.sleep(0.01)
    running.shutdown.set()
    await asyncio.wait_for(running.task, 5)
    assert await reader.read() == b""  # closed by the server
    writer.close()


async def test_accepted_sockets_disable_nagle() -> None:
    # asyncio leaves Nagle on for sockets made with proto 0, which cost 40 ms per POST
    accepted: asyncio.Future[asyncio.BaseTransport] = asyncio.get_running_loop().create_future()

    class Capture(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            _no_delay(transport)
            accepted.set_result(transport)

    listener = _listen()
    server = await asyncio.get_running_loop().create_server(Capture, sock=listener)
    _, writer = await asyncio.open_connection(*listener.getsockname())
    transport = await accepted
    sock = transport.get_extra_info("socket")
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    writer.close()
    transport.close()
    server.close()
