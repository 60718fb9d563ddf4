"""Shared fixtures: a real fnserve server on loopback ports, in a background thread."""

from __future__ import annotations

import asyncio
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from fnserve.config.server import ServerConfig
from fnserve.repository.discover import discover
from fnserve.runtime import Runtime

if TYPE_CHECKING:
    from fnserve.server.app import BoundPorts

MODELS = Path(__file__).with_name("models.py")


@dataclass
class RunningServer:
    """Addresses of a running server, in the forms tritonclient and httpx want."""

    runtime: Runtime
    ports: BoundPorts
    loop: asyncio.AbstractEventLoop

    @property
    def http_url(self) -> str:
        return f"{self.ports.host}:{self.ports.http}"

    @property
    def grpc_url(self) -> str:
        return f"{self.ports.host}:{self.ports.grpc}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.ports.host}:{self.ports.metrics}/metrics"


@dataclass
class _ServerThread:
    thread: threading.Thread
    loop: asyncio.AbstractEventLoop
    shutdown: asyncio.Event
    server: RunningServer


def start_server(runtime: Runtime, config: ServerConfig | None = None) -> _ServerThread:
    """Start `serve()` on its own event loop thread; returns once every port listens."""
    from fnserve.server.app import serve  # the frontends load only for tests that serve

    config = config or ServerConfig(
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        shutdown_timeout_s=5,
        state_dir=tempfile.mkdtemp(prefix="fnserve-state-"),  # its jobs.db, not the cwd's
    )
    loop = asyncio.new_event_loop()
    shutdown = asyncio.Event()
    ready = threading.Event()
    bound: list[BoundPorts] = []
    errors: list[BaseException] = []

    def on_ready(ports: BoundPorts) -> None:
        bound.append(ports)
        ready.set()

    def main() -> None:
        try:
            loop.run_until_complete(serve(runtime, config, shutdown, on_ready))
        except BaseException as exc:  # surface start-up failures to the test
            errors.append(exc)
            ready.set()
        finally:
            loop.close()

    thread = threading.Thread(target=main, name="fnserve-test-server", daemon=True)
    thread.start()
    if not ready.wait(30) or errors:
        raise RuntimeError(f"server did not start: {errors}")
    return _ServerThread(thread, loop, shutdown, RunningServer(runtime, bound[0], loop))


def stop_server(handle: _ServerThread) -> None:
    handle.loop.call_soon_threadsafe(handle.shutdown.set)
    handle.thread.join(30)
    if handle.thread.is_alive():
        raise RuntimeError("server did not stop within 30 s")


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    """A real server on free loopback ports, serving tests/models.py."""
    handle = start_server(Runtime(discover([MODELS])))
    try:
        yield handle.server
    finally:
        stop_server(handle)


@pytest.fixture
def anyio_backend() -> str:
    """grpclib and uvloop are asyncio-only, so every async test runs on asyncio."""
    return "asyncio"
