"""Jobs hold back while online traffic is recent: one job of a model in flight at a time
(`--jobs-online-workers`), full batches of jobs once online traffic stops."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.jobs.jobserver import infer_body, job_server, wait_for

pytestmark = pytest.mark.e2e


def _probe(value: float) -> dict[str, object]:
    return infer_body("X", "FP32", [[value]], shape=[1, 1])


@contextlib.contextmanager
def _online_traffic(base_url: str, client: httpx.Client) -> Iterator[None]:
    """Online requests to batch_probe without pause, on a thread, while the block runs (the
    first one already answered when it starts)."""
    stop = threading.Event()

    def online() -> None:
        with httpx.Client(base_url=base_url, timeout=30) as c:
            while not stop.is_set():
                assert c.post("/v2/models/batch_probe/infer", json=_probe(-1)).is_success

    traffic = threading.Thread(target=online)
    traffic.start()
    try:
        client.post("/v2/models/batch_probe/infer", json=_probe(-1))
        yield
    finally:
        stop.set()
        traffic.join(10)


def _job_rows(client: httpx.Client, count: int) -> list[int]:
    """Submit `count` jobs at once; how many job rows each one's batch held."""
    ids = [client.post("/v2/models/batch_probe/jobs", json=_probe(i)).json()["id"]
           for i in range(count)]  # fmt: skip
    rows = []
    for job_id in ids:
        assert wait_for(client, job_id)["state"] == "succeeded"
        result = client.get(f"/v2/jobs/{job_id}/result").json()
        rows.append(result["outputs"][0]["data"][0])
    return rows


def test_one_job_at_a_time_while_online_traffic_runs(tmp_path: Path) -> None:
    with (
        job_server(tmp_path) as server,
        httpx.Client(base_url=f"http://{server.http_url}", timeout=30) as client,
    ):
        with _online_traffic(f"http://{server.http_url}", client):
            during = _job_rows(client, 12)
        alone = _job_rows(client, 16)
    assert set(during) == {1}
    assert max(alone) > 1  # without online traffic jobs fill batches again


def test_the_window_bounds_the_jobs_in_a_models_queue(tmp_path: Path) -> None:
    with (
        job_server(tmp_path, jobs_workers=3) as server,
        httpx.Client(base_url=f"http://{server.http_url}", timeout=30) as client,
    ):
        rows = _job_rows(client, 24)
    assert max(rows) <= 3  # never more than the window in the model's queue (batch of 8)
    assert max(rows) > 1


def test_jobs_progress_at_their_pace_under_online_traffic(tmp_path: Path) -> None:
    """While online traffic never stops, jobs still start at `--jobs-online-rate` a second, for
    a model other than the one the traffic calls and not the first the server lists."""
    with (
        job_server(tmp_path, jobs_online_rate=5.0) as server,
        httpx.Client(base_url=f"http://{server.http_url}", timeout=30) as client,
    ):
        with _online_traffic(f"http://{server.http_url}", client):
            body = infer_body("INPUT0", "FP32", [[1.0]], shape=[1, 1])
            start = time.monotonic()
            ids = [client.post("/v2/models/double/jobs", json=body).json()["id"] for _ in range(8)]
            jobs = [wait_for(client, job_id) for job_id in ids]
            took_s = time.monotonic() - start
    assert {job["state"] for job in jobs} == {"succeeded"}
    assert took_s >= 7 / 5 * 0.8, took_s  # paced: 8 jobs at 5 a second take about 1.4 s
