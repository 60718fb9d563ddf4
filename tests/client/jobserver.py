"""A real server with durable jobs (SQLite in a temporary state directory), serving
tests/models.py, for the client and CLI tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fnserve.config.server import ServerConfig
from fnserve.repository.discover import discover
from fnserve.runtime import Runtime
from tests.conftest import MODELS, RunningServer, start_server, stop_server


@contextmanager
def jobs_server(state_dir: Path, **settings: Any) -> Iterator[RunningServer]:
    """Serve tests/models.py with jobs kept in `state_dir` (`settings`: ServerConfig fields)."""
    config = ServerConfig(
        http_port=0, grpc_port=0, metrics_port=0, shutdown_timeout_s=5,
        state_dir=str(state_dir), **settings,
    )  # fmt: skip
    handle = start_server(Runtime(discover([MODELS])), config)
    try:
        yield handle.server
    finally:
        stop_server(handle)
