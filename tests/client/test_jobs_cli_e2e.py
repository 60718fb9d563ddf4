"""`fnserve jobs submit|get|wait|result|ls|cancel` as subprocesses against a real server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from fnserve.client import JobsClient
from fnserve.jobs.model import JobState
from tests.client.jobserver import jobs_server
from tests.conftest import RunningServer

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

TOKEN = "cli-api-token"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with jobs_server(tmp_path_factory.mktemp("jobs"), api_token=TOKEN) as running:
        yield running


def fnserve(
    server: RunningServer, *args: str, token: str = TOKEN, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `fnserve jobs ARGS` against `server` (URL and token from the environment)."""
    env = {**os.environ, "FNSERVE_SERVER": f"http://{server.http_url}", "FNSERVE_API_TOKEN": token}
    return subprocess.run(
        [sys.executable, "-m", "fnserve", "jobs", *args],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=60,
    )  # fmt: skip


def ok(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_submit_wait_result_with_json_literals(server: RunningServer) -> None:
    # JSON ints for FP32 inputs: the datatype comes from the model's metadata.
    row = json.dumps([list(range(16))])
    job = ok(fnserve(server, "submit", "add_sub", "--input", f"INPUT0={row}",
                     "--input", f"INPUT1={json.dumps([[1] * 16])}"))  # fmt: skip
    assert job["model"] == "add_sub"
    assert job["state"] in ("queued", "running", "succeeded")
    done = ok(fnserve(server, "wait", job["id"], "--timeout", "30"))
    assert done["state"] == "succeeded"
    assert done["result_size"] > 0
    outputs = ok(fnserve(server, "result", job["id"]))
    assert outputs["OUTPUT0"] == {"datatype": "FP32", "shape": [1, 16],
                                  "data": [float(v + 1) for v in range(16)]}  # fmt: skip
    assert outputs["OUTPUT1"]["data"] == [float(v - 1) for v in range(16)]


def test_npy_inputs_body_files_and_saved_results(server: RunningServer, tmp_path: Path) -> None:
    np.save(tmp_path / "rows.npy", np.array([[0.5, 1.5]], dtype=np.float32))
    job = ok(fnserve(server, "submit", "identity", "--input", "INPUT0=rows.npy", cwd=tmp_path))
    body = {"inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": [2], "data": ["a", "b"]}]}
    (tmp_path / "body.json").write_text(json.dumps(body))
    raw = ok(fnserve(server, "submit", "strings", "--body", "body.json", "--idempotency-key",
                     "cli-key", cwd=tmp_path))  # fmt: skip
    again = ok(fnserve(server, "submit", "strings", "--body", "body.json", "--idempotency-key",
                       "cli-key", cwd=tmp_path))  # fmt: skip
    assert again["id"] == raw["id"]
    assert ok(fnserve(server, "wait", raw["id"]))["state"] == "succeeded"
    assert ok(fnserve(server, "wait", job["id"]))["state"] == "succeeded"
    assert ok(fnserve(server, "result", raw["id"]))["OUTPUT0"]["data"] == ["a", "b"]
    saved = fnserve(server, "result", job["id"], "--save", "out", cwd=tmp_path)
    assert saved.returncode == 0, saved.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "OUTPUT0.npy"), [[0.5, 1.5]])


def test_binary_tensors_for_what_json_cannot_carry(server: RunningServer) -> None:
    inputs = ["--input", "FLAGS=[[true]]", "--input", "HALF=[[1.5]]", "--input", "INT=[[3]]"]
    as_json = fnserve(server, "submit", "mixed", *inputs)
    assert as_json.returncode == 1
    assert "input 'HALF': FP16 data cannot travel as JSON" in as_json.stderr
    job = ok(fnserve(server, "submit", "mixed", "--binary", *inputs))
    assert ok(fnserve(server, "wait", job["id"]))["state"] == "succeeded"
    outputs = ok(fnserve(server, "result", job["id"]))
    assert outputs["HALF_X2"] == {"datatype": "FP16", "shape": [1, 1], "data": [3.0]}
    assert outputs["NOT_FLAGS"]["data"] == [False]


def test_get_cancel_and_wait_exit_statuses(server: RunningServer) -> None:
    slow = ok(fnserve(server, "submit", "sleeper", "--input", "SECONDS=[8]"))
    timed_out = fnserve(server, "wait", slow["id"], "--timeout", "0.3")
    assert timed_out.returncode == 124
    assert "still" in timed_out.stderr
    assert json.loads(timed_out.stdout)["id"] == slow["id"]
    cancelled = ok(fnserve(server, "cancel", slow["id"]))
    assert cancelled["state"] == "cancelled"
    assert ok(fnserve(server, "get", slow["id"]))["state"] == "cancelled"
    ended = fnserve(server, "wait", slow["id"])
    assert ended.returncode == 1
    assert "cancelled" in ended.stderr
    failed = ok(fnserve(server, "submit", "fails", "--input", "INPUT0=[-1]"))
    assert ok(fnserve(server, "get", failed["id"], "--wait", "30"))["state"] == "failed"
    result = fnserve(server, "result", failed["id"])
    assert result.returncode == 1
    assert "negative input" in result.stderr
    assert "HTTP 409" in result.stderr


def test_refusals_print_the_servers_reason(server: RunningServer) -> None:
    unknown = fnserve(server, "submit", "no_such_model", "--input", "X:FP32=[1]")
    assert unknown.returncode == 1
    assert "no_such_model" in unknown.stderr
    assert "HTTP 404" in unknown.stderr
    assert "Traceback" not in unknown.stderr
    bad = fnserve(server, "submit", "identity", "--input", "INPUT0=[[1.5]]", "--input", "NOPE=2")
    assert bad.returncode == 1
    assert "HTTP 400" in bad.stderr
    no_token = fnserve(server, "get", "x", token="")
    assert no_token.returncode == 1
    assert "HTTP 401" in no_token.stderr
    assert fnserve(server, "get", "no-such-job").returncode == 1
    usage = fnserve(server, "submit", "identity")  # neither --input nor --body
    assert usage.returncode == 2
    assert "--input" in usage.stderr
    typo = fnserve(server, "submit", "identity", "--input", "INPUT0")
    assert typo.returncode == 2
    assert "NAME=VALUE" in typo.stderr
    cast = fnserve(server, "submit", "identity", "--input", "INPUT0:INT32=[1.5]")
    assert cast.returncode == 2
    assert "INT32" in cast.stderr


def test_ls_prints_statistics_and_jobs(server: RunningServer) -> None:
    # Submitted through the Python client: each CLI call costs an interpreter start.
    client = JobsClient(server.http_url, TOKEN)
    seconds = {"SECONDS": np.array([6.0], np.float32)}
    queued = [client.submit("sleeper", seconds).to_json() for _ in range(3)]
    done = client.submit("identity", {"INPUT0": np.ones((1, 1), np.float32)}).to_json()
    client.wait(done["id"], 20)
    try:
        table = fnserve(server, "ls", "--limit", "50")
        assert table.returncode == 0, table.stderr
        lines = table.stdout.splitlines()
        assert lines[0].split()[:3] == ["MODEL", "QUEUED", "RUNNING"]
        sleeper = next(line.split() for line in lines if line.startswith("sleeper "))
        assert int(sleeper[1]) + int(sleeper[2]) >= 3  # queued + running
        assert sleeper[-1] == "ago"  # the oldest queued job's age
        assert any(done["id"] in line and "succeeded" in line for line in lines)
        doc = ok(fnserve(server, "ls", "--json", "--model", "sleeper", "--state", "queued"))
        assert {m["model"] for m in doc["models"]} == {"sleeper"}
        assert doc["models"][0]["oldest_queued_age_s"] >= 0
        assert {j["state"] for j in doc["jobs"]} <= {"queued"}
        assert {j["id"] for j in doc["jobs"]} <= {j["id"] for j in queued}
        limited = ok(fnserve(server, "ls", "--json", "--limit", "1"))
        assert len(limited["jobs"]) == 1
    finally:
        for job in queued:
            client.cancel(job["id"])
        client.close()


def test_counts_cover_every_stored_job(server: RunningServer) -> None:
    """`GET /v2/jobs/counts` (what `ls` prints): the server counts every job of its store."""
    client = JobsClient(server.http_url, TOKEN)
    try:
        before = {s.model: s for s in client.counts()}
        ids = [
            client.submit("identity", {"INPUT0": np.ones((1, 1), np.float32)}).id for _ in range(3)
        ]
        for job_id in ids:
            client.wait(job_id, 20)
        after = {s.model: s for s in client.counts()}
    finally:
        client.close()
    succeeded = JobState.SUCCEEDED
    was = before["identity"].by_state[succeeded] if "identity" in before else 0
    assert after["identity"].by_state[succeeded] == was + 3
    raw = httpx.get(
        f"http://{server.http_url}/v2/jobs/counts", headers={"Authorization": f"Bearer {TOKEN}"}
    ).json()
    identity = next(m for m in raw["models"] if m["model"] == "identity")
    assert identity["succeeded"] == was + 3
    assert set(identity) == {"model", *(s.value for s in JobState), "oldest_queued_at"}
