"""The job worker inside a real server: lease renewal, permanent errors, models it does not
serve, result expiry, and long-polls answered for jobs another server finished."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from fnserve.jobs.codec import encode_request, request_hash
from fnserve.jobs.model import Job, NewJob
from fnserve.jobs.store import open_store
from fnserve.types import InferInput, InferRequest
from tests.conftest import MODELS, start_server, stop_server
from tests.jobs.jobserver import infer_body, job_server, wait_for

pytestmark = pytest.mark.e2e


def _client(http_url: str) -> httpx.Client:
    return httpx.Client(base_url=f"http://{http_url}", timeout=30)


def _write_job(db: Path, request: InferRequest) -> Job:
    """Store a job straight into the store, skipping the checks submit makes."""

    async def write() -> Job:
        store = open_store(str(db))
        await store.open()
        try:
            data = encode_request(request)
            new = NewJob(request.model_name, request.model_version, data,
                         request_hash(request.model_name, request.model_version, data))  # fmt: skip
            job, _ = await store.submit(new, time.time())
            return job
        finally:
            await store.close()

    return asyncio.run(write())


def test_a_job_longer_than_its_lease_keeps_it(tmp_path: Path) -> None:
    # room for a second job: were the lease not renewed, the worker would claim it again
    with (
        job_server(tmp_path, jobs_lease_s=0.6, jobs_workers=2) as server,
        _client(server.http_url) as client,
    ):
        job = client.post("/v2/models/slow/jobs", json=infer_body("SECONDS", "FP32", [2]))
        done = wait_for(client, job.json()["id"])
    assert done["state"] == "succeeded"
    assert done["attempts"] == 1  # renewed every 0.2 s: never claimed a second time


def test_a_request_the_model_refuses_fails_at_once(tmp_path: Path) -> None:
    # e.g. stored before the model's declaration changed: the wrong datatype
    bad = InferRequest("double", (InferInput("INPUT0", "INT32", np.ones((1, 2), np.int32)),))
    stored = _write_job(tmp_path / "jobs.db", bad)
    with job_server(tmp_path) as server, _client(server.http_url) as client:
        done = wait_for(client, stored.id)
    assert done["state"] == "failed"
    assert done["attempts"] == 1
    assert "expected datatype FP32, got 'INT32'" in done["error"]


def test_jobs_of_models_not_served_here_stay_queued(tmp_path: Path) -> None:
    x = np.ones(1, np.float32)
    elsewhere = _write_job(
        tmp_path / "jobs.db", InferRequest("other", (InferInput("X", "FP32", x),))
    )
    with job_server(tmp_path) as server, _client(server.http_url) as client:
        served = client.post(
            "/v2/models/double/jobs", json=infer_body("INPUT0", "FP32", [[1]], shape=[1, 1])
        )
        assert wait_for(client, served.json()["id"])["state"] == "succeeded"
        time.sleep(1.2)  # past a poll of the store
        assert client.get(f"/v2/jobs/{elsewhere.id}").json()["state"] == "queued"


def test_finished_jobs_expire_after_the_ttl(tmp_path: Path) -> None:
    with (
        job_server(tmp_path, jobs_result_ttl_s=0.5) as server,
        _client(server.http_url) as client,
    ):
        job = client.post(
            "/v2/models/double/jobs", json=infer_body("INPUT0", "FP32", [[1]], shape=[1, 1])
        )
        job_id = job.json()["id"]
        assert wait_for(client, job_id)["state"] == "succeeded"
        deadline = time.monotonic() + 10
        while client.get(f"/v2/jobs/{job_id}").status_code == 200:
            assert time.monotonic() < deadline, "the finished job was never deleted"
            time.sleep(0.1)
        assert client.get(f"/v2/jobs/{job_id}/result").status_code == 404


def test_long_poll_sees_a_job_another_server_finished(tmp_path: Path) -> None:
    from fnserve.config.server import ServerConfig
    from fnserve.repository.discover import discover
    from fnserve.runtime import Runtime

    with job_server(tmp_path) as runner, _client(runner.http_url) as client:
        # a second server on the same store that does not serve the `slow` model
        config = ServerConfig(
            http_port=0, grpc_port=0, metrics_port=0, shutdown_timeout_s=5,
            state_dir=str(tmp_path / "other"), jobs_db=str(tmp_path / "jobs.db"),
        )  # fmt: skip
        other = start_server(Runtime(discover([MODELS])), config)
        try:
            job = client.post("/v2/models/slow/jobs", json=infer_body("SECONDS", "FP32", [0.5]))
            with _client(other.server.http_url) as watcher:
                got: dict[str, Any] = watcher.get(
                    f"/v2/jobs/{job.json()['id']}", params={"wait": 20}
                ).json()
        finally:
            stop_server(other)
    assert got["state"] == "succeeded"
