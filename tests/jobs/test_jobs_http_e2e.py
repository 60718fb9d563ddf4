"""Durable jobs over HTTP against a real server: submit, get, long-poll, result, cancel, list,
idempotency, retries, result limits and errors (with httpx and tritonclient-built bodies)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.http as triton

from tests.conftest import RunningServer
from tests.jobs.jobserver import infer_body, job_server, wait_for

pytestmark = pytest.mark.e2e

MAX_RESULT_BYTES = 4096


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with job_server(
        tmp_path_factory.mktemp("jobs-state"), jobs_max_result_bytes=MAX_RESULT_BYTES
    ) as running:
        yield running


@pytest.fixture
def client(server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"http://{server.http_url}", timeout=30) as c:
        yield c


def _double_body(*values: float, **extra: Any) -> dict[str, Any]:
    return infer_body("INPUT0", "FP32", [list(values)], shape=[1, len(values)], **extra)


def _job_count(client: httpx.Client) -> int:
    return len(client.get("/v2/jobs", params={"limit": 1000}).json()["jobs"])


class TestSubmitAndResult:
    def test_submit_answers_202_with_the_job_and_its_location(self, client: httpx.Client) -> None:
        response = client.post("/v2/models/double/jobs", json=_double_body(1, 2))
        assert response.status_code == 202
        job = response.json()
        assert response.headers["location"] == f"/v2/jobs/{job['id']}"
        assert job["model"] == "double"
        assert job["state"] in ("queued", "running", "succeeded")
        assert job["max_attempts"] == 3
        assert job["created_at"].endswith("Z")
        assert set(job) == {
            "id", "model", "version", "state", "attempts", "max_attempts", "created_at",
            "started_at", "finished_at", "error", "idempotency_key", "callback_url",
            "result_size",
        }  # fmt: skip

    def test_json_result_is_what_infer_answers(self, client: httpx.Client) -> None:
        body = _double_body(1.5, -2, id="req-7", parameters={"custom": "x"})
        job = client.post("/v2/models/double/jobs", json=body).json()
        done = wait_for(client, job["id"])
        assert done["state"] == "succeeded"
        assert done["attempts"] == 1
        assert done["result_size"] > 0
        assert done["finished_at"] >= done["started_at"] >= done["created_at"]
        result = client.get(f"/v2/jobs/{job['id']}/result")
        direct = client.post("/v2/models/double/infer", json=body)
        assert result.status_code == 200
        assert result.headers["content-type"] == "application/json"
        assert result.content == direct.content
        assert result.json()["id"] == "req-7"

    def test_binary_result_is_what_infer_answers(self, client: httpx.Client) -> None:
        data = np.array([[0.25, 3, -1]], dtype=np.float32)
        inputs = [triton.InferInput("INPUT0", [1, 3], "FP32")]
        inputs[0].set_data_from_numpy(data, binary_data=True)
        outputs = [
            triton.InferRequestedOutput("DOUBLE", binary_data=True),
            triton.InferRequestedOutput("PLUS1", binary_data=False),
        ]
        body, header_length = triton.InferenceServerClient.generate_request_body(
            inputs, outputs, request_id="bin-1"
        )
        headers = {"Inference-Header-Content-Length": str(header_length)}
        job = client.post("/v2/models/double/jobs", content=body, headers=headers).json()
        assert wait_for(client, job["id"])["state"] == "succeeded"
        result = client.get(f"/v2/jobs/{job['id']}/result")
        direct = client.post("/v2/models/double/infer", content=body, headers=headers)
        assert result.content == direct.content
        length = int(result.headers["inference-header-content-length"])
        assert length == int(direct.headers["inference-header-content-length"])
        parsed = triton.InferenceServerClient.parse_response_body(
            result.content, header_length=length
        )
        np.testing.assert_array_equal(parsed.as_numpy("DOUBLE"), data * 2)
        np.testing.assert_array_equal(parsed.as_numpy("PLUS1"), data + 1)

    def test_bytes_tensors_round_trip(self, client: httpx.Client) -> None:
        text = np.array([b"hello", b"", b"\x00\xff", "caf\u00e9".encode()], dtype=np.object_)
        inputs = [triton.InferInput("TEXT", [4], "BYTES")]
        inputs[0].set_data_from_numpy(text, binary_data=True)
        outputs = [triton.InferRequestedOutput("TEXT_OUT", binary_data=True)]
        body, header_length = triton.InferenceServerClient.generate_request_body(inputs, outputs)
        headers = {"Inference-Header-Content-Length": str(header_length)}
        job = client.post("/v2/models/echo_bytes/jobs", content=body, headers=headers).json()
        assert wait_for(client, job["id"])["state"] == "succeeded"
        result = client.get(f"/v2/jobs/{job['id']}/result")
        parsed = triton.InferenceServerClient.parse_response_body(
            result.content, header_length=int(result.headers["inference-header-content-length"])
        )
        assert parsed.as_numpy("TEXT_OUT").tolist() == text.tolist()

    def test_raw_binary_request_gets_a_binary_result(self, client: httpx.Client) -> None:
        raw = np.array([1, 2, 3], dtype=np.float32).tobytes()  # the model's only input
        headers = {"Inference-Header-Content-Length": "0"}
        job = client.post("/v2/models/double/jobs", content=raw, headers=headers).json()
        assert wait_for(client, job["id"])["state"] == "succeeded"
        result = client.get(f"/v2/jobs/{job['id']}/result")
        direct = client.post("/v2/models/double/infer", content=raw, headers=headers)
        assert result.headers["content-type"] == "application/octet-stream"
        assert result.content == direct.content

    def test_result_is_compressed_when_asked(self, client: httpx.Client) -> None:
        job = client.post("/v2/models/double/jobs", json=_double_body(*range(64))).json()
        assert wait_for(client, job["id"])["state"] == "succeeded"
        result = client.get(f"/v2/jobs/{job['id']}/result", headers={"Accept-Encoding": "gzip"})
        direct = client.post("/v2/models/double/infer", json=_double_body(*range(64)))
        assert result.headers["content-encoding"] == "gzip"
        assert result.content == direct.content  # httpx decompressed it

    def test_versioned_submit_runs_that_version(self, client: httpx.Client) -> None:
        response = client.post("/v2/models/double/versions/1/jobs", json=_double_body(3))
        assert response.status_code == 202
        assert response.json()["version"] == "1"
        assert wait_for(client, response.json()["id"])["state"] == "succeeded"

    def test_result_before_success_is_409(self, client: httpx.Client) -> None:
        job = client.post("/v2/models/slow/jobs", json=infer_body("SECONDS", "FP32", [0.5]))
        job_id = job.json()["id"]
        early = client.get(f"/v2/jobs/{job_id}/result")
        assert early.status_code == 409
        assert "has no result: it is" in early.json()["error"]
        assert wait_for(client, job_id)["state"] == "succeeded"
        assert client.get(f"/v2/jobs/{job_id}/result").status_code == 200


class TestWait:
    def test_wait_returns_as_soon_as_the_job_ends(self, client: httpx.Client) -> None:
        job = client.post("/v2/models/slow/jobs", json=infer_body("SECONDS", "FP32", [0.3]))
        start = time.monotonic()
        done = client.get(f"/v2/jobs/{job.json()['id']}", params={"wait": 20}).json()
        elapsed = time.monotonic() - start
        assert done["state"] == "succeeded"
        assert elapsed < 10

    def test_wait_times_out_with_the_job_as_it_is(self, client: httpx.Client) -> None:
        job = client.post("/v2/models/slow/jobs", json=infer_body("SECONDS", "FP32", [3]))
        start = time.monotonic()
        got = client.get(f"/v2/jobs/{job.json()['id']}", params={"wait": 0.5}).json()
        assert 0.4 < time.monotonic() - start < 3
        assert got["state"] in ("queued", "running")

    @pytest.mark.parametrize("wait", ["-1", "soon", "nan"])
    def test_bad_wait_is_400(self, client: httpx.Client, wait: str) -> None:
        job = client.post("/v2/models/double/jobs", json=_double_body(1)).json()
        response = client.get(f"/v2/jobs/{job['id']}", params={"wait": wait})
        assert response.status_code == 400
        assert "wait must be a number of seconds" in response.json()["error"]


class TestIdempotency:
    def test_same_key_same_request_returns_the_same_job(self, client: httpx.Client) -> None:
        headers = {"Idempotency-Key": "batch-1/item-1"}
        first = client.post("/v2/models/double/jobs", json=_double_body(9), headers=headers)
        again = client.post("/v2/models/double/jobs", json=_double_body(9), headers=headers)
        assert first.status_code == 202
        assert again.status_code == 200
        assert again.json()["id"] == first.json()["id"]
        assert again.headers["location"] == first.headers["location"]
        assert again.json()["idempotency_key"] == "batch-1/item-1"

    def test_same_key_other_request_is_409(self, client: httpx.Client) -> None:
        headers = {"Idempotency-Key": "batch-1/item-2"}
        client.post("/v2/models/double/jobs", json=_double_body(1), headers=headers)
        before = _job_count(client)
        other = client.post("/v2/models/double/jobs", json=_double_body(2), headers=headers)
        assert other.status_code == 409
        assert "was used for a different request" in other.json()["error"]
        assert _job_count(client) == before


class TestCancel:
    def test_cancel_a_queued_job(self, client: httpx.Client) -> None:
        blocker = client.post("/v2/models/slow/jobs", json=infer_body("SECONDS", "FP32", [1]))
        queued = client.post("/v2/models/slow/jobs", json=infer_body("SECONDS", "FP32", [1]))
        cancelled = client.post(f"/v2/jobs/{queued.json()['id']}/cancel")
        assert cancelled.status_code == 200
        assert cancelled.json()["state"] == "cancelled"
        assert cancelled.json()["finished_at"] is not None
        result = client.get(f"/v2/jobs/{queued.json()['id']}/result")
        assert result.status_code == 409
        assert "cancelled" in result.json()["error"]
        assert wait_for(client, blocker.json()["id"])["state"] == "succeeded"
        assert client.get(f"/v2/jobs/{queued.json()['id']}").json()["state"] == "cancelled"

    def test_cancel_a_running_job_keeps_it_cancelled(self, client: httpx.Client) -> None:
        job = client.post("/v2/models/slow/jobs", json=infer_body("SECONDS", "FP32", [0.5]))
        job_id = job.json()["id"]
        deadline = time.monotonic() + 10
        while client.get(f"/v2/jobs/{job_id}").json()["state"] == "queued":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert client.post(f"/v2/jobs/{job_id}/cancel").json()["state"] == "cancelled"
        time.sleep(0.8)  # past the model's run: its late outcome must be refused
        assert client.get(f"/v2/jobs/{job_id}").json()["state"] == "cancelled"

    def test_cancel_a_finished_job_leaves_it(self, client: httpx.Client) -> None:
        job = client.post("/v2/models/double/jobs", json=_double_body(4)).json()
        wait_for(client, job["id"])
        assert client.post(f"/v2/jobs/{job['id']}/cancel").json()["state"] == "succeeded"


class TestList:
    def test_filters_and_pages(self, client: httpx.Client) -> None:
        ids = [
            client.post("/v2/models/echo_bytes/jobs", json=infer_body("TEXT", "BYTES", [f"t{i}"]))
            .json()["id"]
            for i in range(5)
        ]  # fmt: skip
        for job_id in ids:
            wait_for(client, job_id)
        seen: list[str] = []
        token = None
        while True:
            params: dict[str, Any] = {"model": "echo_bytes", "limit": 2}
            if token:
                params["page_token"] = token
            page = client.get("/v2/jobs", params=params).json()
            assert len(page["jobs"]) <= 2
            seen += [j["id"] for j in page["jobs"]]
            token = page["next_page_token"]
            if token is None:
                break
        assert set(ids) <= set(seen)
        assert len(seen) == len(set(seen))
        filtered = client.get("/v2/jobs?model=echo_bytes").json()["jobs"]
        assert {j["model"] for j in filtered} == {"echo_bytes"}
        succeeded = client.get("/v2/jobs", params={"state": "succeeded", "limit": 1000}).json()
        assert {j["state"] for j in succeeded["jobs"]} == {"succeeded"}

    @pytest.mark.parametrize(
        ("query", "message"),
        [
            ({"state": "done"}, "state must be one of"),
            ({"limit": "0"}, "limit must be between 1 and 1000"),
            ({"limit": "-3"}, "limit must be a positive integer"),
        ],
    )
    def test_bad_query_is_400(
        self, client: httpx.Client, query: dict[str, str], message: str
    ) -> None:
        response = client.get("/v2/jobs", params=query)
        assert response.status_code == 400
        assert message in response.json()["error"]


class TestFailures:
    def test_model_error_is_retried_then_succeeds(self, client: httpx.Client) -> None:
        job = client.post("/v2/models/flaky/jobs", json=infer_body("KEY", "FP32", [7])).json()
        done = wait_for(client, job["id"])
        assert done["state"] == "succeeded"
        assert done["attempts"] == 2

    def test_model_that_always_fails_fails_after_max_attempts(self, client: httpx.Client) -> None:
        job = client.post("/v2/models/broken/jobs", json=infer_body("INPUT0", "FP32", [1]))
        done = wait_for(client, job.json()["id"])
        assert done["state"] == "failed"
        assert done["attempts"] == 3
        assert "broken model always raises" in done["error"]
        result = client.get(f"/v2/jobs/{done['id']}/result")
        assert result.status_code == 409
        assert "failed" in result.json()["error"]
        assert "broken model always raises" in result.json()["error"]

    def test_oversize_result_fails_at_once_and_stores_nothing(self, client: httpx.Client) -> None:
        job = client.post("/v2/models/big/jobs", json=infer_body("COUNT", "INT32", [10_000]))
        done = wait_for(client, job.json()["id"])
        assert done["state"] == "failed"
        assert done["attempts"] == 1
        assert f"over the limit of {MAX_RESULT_BYTES} bytes" in done["error"]
        assert done["result_size"] is None
        small = client.post("/v2/models/big/jobs", json=infer_body("COUNT", "INT32", [10]))
        assert wait_for(client, small.json()["id"])["state"] == "succeeded"


class TestBadRequests:
    @pytest.mark.parametrize(
        ("path", "kwargs", "status", "message"),
        [
            ("/v2/models/nope/jobs", {"json": _double_body(1)}, 404, "nope"),
            ("/v2/models/double/versions/9/jobs", {"json": _double_body(1)}, 404, "9"),
            ("/v2/models/double/jobs", {"content": b"{not json"}, 400, "malformed JSON"),
            ("/v2/models/double/jobs", {"json": {"inputs": "x"}}, 400, "'inputs' must be a list"),
            (
                "/v2/models/double/jobs",
                {"json": infer_body("INPUT0", "INT32", [[1]], shape=[1, 1])},
                400,
                "expected datatype FP32",
            ),
            (
                "/v2/models/double/jobs",
                {"json": _double_body(1), "headers": {"Callback-URL": "ftp://x"}},
                400,
                "callback URL must be an http",
            ),
            (
                "/v2/models/double/jobs",
                {"json": _double_body(1), "headers": {"Idempotency-Key": "k" * 300}},
                400,
                "idempotency key must be 1 to 256 characters",
            ),
        ],
    )
    def test_refused_and_nothing_stored(
        self, client: httpx.Client, path: str, kwargs: dict[str, Any], status: int, message: str
    ) -> None:
        before = _job_count(client)
        response = client.post(path, **kwargs)
        assert response.status_code == status
        assert message in response.json()["error"]
        assert _job_count(client) == before

    def test_unknown_job_is_404_everywhere(self, client: httpx.Client) -> None:
        for method, path in [
            ("GET", "/v2/jobs/no-such-job"),
            ("GET", "/v2/jobs/no-such-job/result"),
            ("POST", "/v2/jobs/no-such-job/cancel"),
        ]:
            response = client.request(method, path)
            assert response.status_code == 404
            assert response.json() == {"error": "job 'no-such-job' not found"}

    def test_oversize_body_is_413(self, server: RunningServer, tmp_path: Path) -> None:
        with job_server(tmp_path, max_body_bytes=1024) as small:
            url = f"http://{small.http_url}/v2/models/double/jobs"
            response = httpx.post(url, json=_double_body(*range(500)))
        assert response.status_code == 413
        assert "over the limit of 1024 bytes" in response.json()["error"]
