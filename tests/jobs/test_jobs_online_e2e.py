"""Jobs hold back while online traffic is recent: one job of a model in flight at a time
(`--jobs-online-workers`), full batches of jobs once online traffic stops."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

from tests.jobs.jobserver import infer_body, job_server, wait_for

pytestmark = pytest.mark.e2e


def _probe(value: float) -> dict[str, object]:
    return infer_body("X", "FP32", [[value]], shape=[1, 1])


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
    stop = threading.Event()
    with (
        job_server(tmp_path) as server,
        httpx.Client(base_url=f"http://{server.http_url}", timeout=30) as client,
    ):

        def online() -> None:
            with httpx.Client(base_url=f"http://{server.http_url}", timeout=30) as c:
                while not stop.is_set():
                    assert c.post("/v2/models/batch_probe/infer", json=_probe(-1)).is_success

        traffic = threading.Thread(target=online)
        traffic.start()
        try:
            client.post("/v2/models/batch_probe/infer", json=_probe(-1))
            during = _job_rows(client, 12)
        finally:
            stop.set()
            traffic.join(10)
        alone = _job_rows(client, 16)
    assert set(during) == {1}
    assert max(alone) > 1  # without online traffic jobs fill batches again
