"""A real server with durable jobs on loopback ports, for the jobs end-to-end tests."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from fnserve.config.server import ServerConfig
from fnserve.repository.discover import discover
from fnserve.runtime import Runtime
from tests.conftest import RunningServer, start_server, stop_server

JOB_MODELS = Path(__file__).with_name("job_models.py")


@contextmanager
def job_server(
    state_dir: Path, models: Path = JOB_MODELS, **settings: Any
) -> Iterator[RunningServer]:
    """Serve `models` (tests/jobs/job_models.py) with its job store in `state_dir`
    (`settings`: ServerConfig fields)."""
    config = ServerConfig(
        http_port=0, grpc_port=0, metrics_port=0, shutdown_timeout_s=5,
        state_dir=str(state_dir), **settings,
    )  # fmt: skip
    handle = start_server(Runtime(discover([models])), config)
    try:
        yield handle.server
    finally:
        stop_server(handle)


def infer_body(model_input: str, datatype: str, values: list[Any], **extra: Any) -> dict[str, Any]:
    """A JSON inference body with one input of shape [len(values)] (or [1, n] when batched)."""
    shape = extra.pop("shape", [len(values)])
    return {"inputs": [{"name": model_input, "datatype": datatype, "shape": shape, "data": values}],
            **extra}  # fmt: skip


def wait_for(client: httpx.Client, job_id: str, timeout_s: float = 20) -> dict[str, Any]:
    """Long-poll a job until it ends (fails the test past `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job: dict[str, Any] = client.get(f"/v2/jobs/{job_id}", params={"wait": 5}).json()
        if job["state"] in ("succeeded", "failed", "cancelled"):
            return job
    raise AssertionError(f"job {job_id} did not end within {timeout_s} s: {job}")
