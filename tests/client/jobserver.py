"""A real server with durable jobs (SQLite in a temporary state directory), serving
tests/models.py, for the client and CLI tests."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from tests.conftest import MODELS, RunningServer
from tests.jobs.jobserver import job_server


def jobs_server(state_dir: Path, **settings: Any) -> AbstractContextManager[RunningServer]:
    """Serve tests/models.py with jobs kept in `state_dir` (`settings`: ServerConfig fields)."""
    return job_server(state_dir, MODELS, **settings)
