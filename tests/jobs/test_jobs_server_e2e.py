"""Durable jobs and the server around them: completion callbacks to a loopback receiver,
metrics, jobs surviving a clean restart, the backlog limit, auth, and `--no-jobs`."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.jobs.callbacks import CallbackReceiver
from tests.jobs.jobserver import infer_body, job_server, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture
def receiver() -> Iterator[CallbackReceiver]:
    r = CallbackReceiver(fail_first=1)
    yield r
    r.close()


def _client(http_url: str, **kwargs: Any) -> httpx.Client:
    return httpx.Client(base_url=f"http://{http_url}", timeout=30, **kwargs)


def _double(value: float) -> dict[str, Any]:
    return infer_body("INPUT0", "FP32", [[value]], shape=[1, 1])


def test_callback_is_posted_when_the_job_ends_and_retried(
    tmp_path: Path, receiver: CallbackReceiver
) -> None:
    with job_server(tmp_path) as server, _client(server.http_url) as client:
        headers = {"Callback-URL": receiver.url}
        job = client.post("/v2/models/double/jobs", json=_double(5), headers=headers).json()
        assert job["callback_url"] == receiver.url
        assert receiver.arrived.wait(15), "no callback arrived"
    (document,) = receiver.received
    assert document["id"] == job["id"]
    assert document["state"] == "succeeded"
    assert document["result_size"] > 0
    assert receiver.attempts == 2  # the first answer was 500: retried


def test_callback_for_a_failed_and_a_cancelled_job(tmp_path: Path) -> None:
    receiver = CallbackReceiver()
    try:
        with job_server(tmp_path) as server, _client(server.http_url) as client:
            headers = {"Callback-URL": receiver.url}
            broken = client.post(
                "/v2/models/broken/jobs", json=infer_body("INPUT0", "FP32", [1]), headers=headers
            ).json()
            wait_for(client, broken["id"])
            blocker = client.post("/v2/models/slow/jobs", json=infer_body("SECONDS", "FP32", [1]))
            queued = client.post(
                "/v2/models/slow/jobs", json=infer_body("SECONDS", "FP32", [1]), headers=headers
            ).json()
            client.post(f"/v2/jobs/{queued['id']}/cancel")
            wait_for(client, blocker.json()["id"])
            deadline = time.monotonic() + 10
            while len(receiver.received) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        receiver.close()
    states = {d["id"]: d["state"] for d in receiver.received}
    assert states == {broken["id"]: "failed", queued["id"]: "cancelled"}


def test_metrics_show_jobs_by_state_queue_depth_and_durations(tmp_path: Path) -> None:
    with job_server(tmp_path) as server, _client(server.http_url) as client:
        for value in range(3):
            job = client.post("/v2/models/double/jobs", json=_double(value)).json()
            wait_for(client, job["id"])
        blocker = client.post("/v2/models/slow/jobs", json=infer_body("SECONDS", "FP32", [1]))
        client.post("/v2/models/slow/jobs", json=infer_body("SECONDS", "FP32", [1]))
        time.sleep(0.2)
        text = httpx.get(server.metrics_url).text
        wait_for(client, blocker.json()["id"])
    assert 'fnserve_jobs{model="double",state="succeeded"} 3' in text
    assert 'fnserve_jobs_queue_depth{model="slow"} 1' in text
    age = [line for line in text.splitlines() if "oldest_queued_age_seconds{" in line]
    assert any(
        line.startswith('fnserve_jobs_oldest_queued_age_seconds{model="slow"}') for line in age
    )
    assert float(next(x for x in age if '"slow"' in x).split()[-1]) > 0
    assert 'fnserve_job_duration_seconds_count{model="double",state="succeeded"} 3' in text


def test_jobs_survive_a_clean_restart(tmp_path: Path) -> None:
    with job_server(tmp_path) as server, _client(server.http_url) as client:
        done = client.post("/v2/models/double/jobs", json=_double(2)).json()
        wait_for(client, done["id"])
        pending = [
            client.post("/v2/models/slow/jobs", json=infer_body("SECONDS", "FP32", [0.3])).json()
            for _ in range(4)
        ]
        time.sleep(0.1)  # the first is running when the server stops
    # a clean stop gives the running job back: it does not count as a failed attempt
    with job_server(tmp_path) as server, _client(server.http_url) as client:
        assert client.get(f"/v2/jobs/{done['id']}/result").json()["outputs"][0]["data"] == [4.0]
        for job in pending:
            finished = wait_for(client, job["id"])
            assert finished["state"] == "succeeded"
            assert finished["attempts"] == 1
            result = client.get(f"/v2/jobs/{job['id']}/result").json()
            assert result["outputs"][0]["data"] == [0.30000001192092896]


def test_backlog_limit_answers_429(tmp_path: Path) -> None:
    with (
        job_server(tmp_path, jobs_max_backlog=2) as server,
        _client(server.http_url) as client,
    ):
        body = infer_body("SECONDS", "FP32", [1])
        first = client.post("/v2/models/slow/jobs", json=body)
        deadline = time.monotonic() + 10
        while client.get(f"/v2/jobs/{first.json()['id']}").json()["state"] == "queued":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        accepted = [client.post("/v2/models/slow/jobs", json=body).status_code for _ in range(2)]
        refused = client.post("/v2/models/slow/jobs", json=body)
        other_model = client.post("/v2/models/double/jobs", json=_double(1))
    assert accepted == [202, 202]
    assert refused.status_code == 429
    assert "has 2 jobs queued, the limit" in refused.json()["error"]
    assert other_model.status_code == 202


def test_job_routes_need_the_api_token(tmp_path: Path) -> None:
    with job_server(tmp_path, api_token="s3cret") as server:
        with _client(server.http_url) as anonymous:
            assert anonymous.get("/v2/jobs").status_code == 401
            assert anonymous.post("/v2/models/double/jobs", json=_double(1)).status_code == 401
            assert anonymous.get("/v2/jobs/x/result").status_code == 401
        with _client(server.http_url, headers={"Authorization": "Bearer s3cret"}) as client:
            job = client.post("/v2/models/double/jobs", json=_double(1))
            assert job.status_code == 202
            assert wait_for(client, job.json()["id"])["state"] == "succeeded"


def test_no_jobs_answers_501_and_opens_no_store(tmp_path: Path) -> None:
    with job_server(tmp_path, jobs=False) as server, _client(server.http_url) as client:
        response = client.post("/v2/models/double/jobs", json=_double(1))
        listing = client.get("/v2/jobs")
        metrics = httpx.get(server.metrics_url).text
    assert response.status_code == 501
    assert "turned off on this server (--no-jobs)" in response.json()["error"]
    assert listing.status_code == 501
    assert "fnserve_jobs" not in metrics
    assert not (tmp_path / "jobs.db").exists()


def test_jobs_on_postgresql_submit_wait_result(tmp_path: Path, postgres_url: str) -> None:
    with (
        job_server(tmp_path, jobs_db=postgres_url) as server,
        _client(server.http_url) as client,
    ):
        headers = {"Idempotency-Key": f"pg-{tmp_path.name}"}
        job = client.post("/v2/models/double/jobs", json=_double(21), headers=headers)
        again = client.post("/v2/models/double/jobs", json=_double(21), headers=headers)
        assert (job.status_code, again.status_code) == (202, 200)
        assert wait_for(client, job.json()["id"])["state"] == "succeeded"
        result = client.get(f"/v2/jobs/{job.json()['id']}/result").json()
    assert result["outputs"][0]["data"] == [42.0]
    assert not (tmp_path / "jobs.db").exists()  # the store is the database, not a file


def test_fnserve_serve_jobs_flags(tmp_path: Path) -> None:
    from tests.jobs.jobserver import JOB_MODELS
    from tests.serverproc import ServerProcess

    flags: list[str | Path] = ["--state-dir", tmp_path / "state", "--jobs-max-attempts", "2",
             "--jobs-lease", "5", "--jobs-max-result-bytes", "1KiB"]  # fmt: skip
    with (
        ServerProcess.start(JOB_MODELS, *flags) as server,
        httpx.Client(base_url=server.http, timeout=30) as client,
    ):
        broken = client.post("/v2/models/broken/jobs", json=infer_body("INPUT0", "FP32", [1]))
        big = client.post("/v2/models/big/jobs", json=infer_body("COUNT", "INT32", [1000]))
        failed = wait_for(client, broken.json()["id"])
        too_big = wait_for(client, big.json()["id"])
    assert (failed["state"], failed["attempts"], failed["max_attempts"]) == ("failed", 2, 2)
    assert "over the limit of 1024 bytes" in too_big["error"]
    assert (tmp_path / "state" / "jobs.db").exists()


def test_a_job_store_that_cannot_open_stops_the_start(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.jobs.jobserver import JOB_MODELS

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    command = [sys.executable, "-m", "fnserve", "serve", str(JOB_MODELS), "--http-port", "0",
               "--grpc-port", "0", "--metrics-port", "0",
               "--jobs-db", str(blocker / "jobs.db")]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "cannot open the job store" in result.stderr
    assert "Traceback" not in result.stderr


def test_shutdown_answers_long_polls_at_once(tmp_path: Path) -> None:
    answers: list[httpx.Response] = []
    with job_server(tmp_path) as server, _client(server.http_url) as client:
        job = client.post("/v2/models/slow/jobs", json=infer_body("SECONDS", "FP32", [3]))
        url = f"http://{server.http_url}/v2/jobs/{job.json()['id']}"
        poll = threading.Thread(
            target=lambda: answers.append(httpx.get(url, params={"wait": 30}, timeout=30))
        )
        poll.start()
        time.sleep(0.5)
        stopping = time.monotonic()
    poll.join(10)
    (answer,) = answers
    assert time.monotonic() - stopping < 5
    assert answer.status_code == 200
    assert answer.json()["state"] in ("queued", "running")
