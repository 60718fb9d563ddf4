"""`JobsClient` and `AsyncJobsClient` against a real server: submit, get, wait, result, cancel
and list; binary and JSON tensors; the server's refusals as JobsError; tokens."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from datetime import UTC, datetime

import numpy as np
import pytest

from fnserve.client import (
    AsyncJobsClient,
    JobsClient,
    JobsError,
    JobState,
    WaitTimeoutError,
)
from tests.client.jobserver import jobs_server
from tests.client.receiver import callback_receiver
from tests.conftest import RunningServer

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

TOKEN = "client-api-token"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with jobs_server(tmp_path_factory.mktemp("jobs")) as running:
        yield running


@pytest.fixture
def client(server: RunningServer) -> Iterator[JobsClient]:
    with JobsClient(f"http://{server.http_url}") as c:
        yield c


def _rows(value: float = 1.0) -> dict[str, np.ndarray]:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    return {"INPUT0": a, "INPUT1": np.full((1, 16), value, dtype=np.float32)}


class TestSubmitWaitResult:
    def test_binary_round_trip(self, client: JobsClient) -> None:
        inputs = _rows(2.0)
        job = client.submit("add_sub", inputs)
        assert job.model == "add_sub"
        assert job.state in (JobState.QUEUED, JobState.RUNNING, JobState.SUCCEEDED)
        assert job.created_at.tzinfo is UTC
        assert abs((datetime.now(UTC) - job.created_at).total_seconds()) < 30
        done = client.wait(job.id, timeout_s=20)
        assert done.state is JobState.SUCCEEDED
        assert done.done
        assert done.result_size
        outputs = client.result(job.id)
        np.testing.assert_array_equal(outputs["OUTPUT0"], inputs["INPUT0"] + 2)
        np.testing.assert_array_equal(outputs["OUTPUT1"], inputs["INPUT0"] - 2)
        assert outputs["OUTPUT0"].dtype == np.float32

    def test_json_tensors_and_chosen_outputs(self, client: JobsClient) -> None:
        job = client.submit("add_sub", _rows(), outputs=["OUTPUT1"], binary=False)
        client.wait(job.id, timeout_s=20)
        outputs = client.result(job.id)
        assert list(outputs) == ["OUTPUT1"]
        np.testing.assert_array_equal(outputs["OUTPUT1"], _rows()["INPUT0"] - 1)

    def test_bytes_bool_fp16_and_int8_travel_intact(self, client: JobsClient) -> None:
        words = np.array([b"alpha", b"", "b\u00e9ta".encode()], dtype=np.object_)
        text_job = client.submit("strings", {"INPUT0": words})
        mixed = {
            "FLAGS": np.array([[True, False]]),
            "HALF": np.array([[1.5, -2.25]], dtype=np.float16),
            "INT": np.array([[3, -128]], dtype=np.int8),
        }
        mixed_job = client.submit("mixed", mixed, version="1")
        assert client.wait(text_job.id, 20).state is JobState.SUCCEEDED
        assert client.wait(mixed_job.id, 20).state is JobState.SUCCEEDED
        assert client.result(text_job.id)["OUTPUT0"].tolist() == words.tolist()
        out = client.result(mixed_job.id)
        assert out["NOT_FLAGS"].tolist() == [[False, True]]
        assert out["HALF_X2"].dtype == np.float16
        assert out["HALF_X2"].tolist() == [[3.0, -4.5]]
        assert out["INT_NEG"].tolist() == [[-3, -128]]  # -(-128) wraps in INT8

    def test_get_long_polls_until_the_job_ends(self, client: JobsClient) -> None:
        job = client.submit("sleeper", {"SECONDS": np.array([0.3], dtype=np.float32)})
        assert client.get(job.id, wait_s=20).state is JobState.SUCCEEDED

    def test_the_same_idempotency_key_returns_the_same_job(self, client: JobsClient) -> None:
        first = client.submit("add_sub", _rows(), idempotency_key="client-key-1")
        again = client.submit("add_sub", _rows(), idempotency_key="client-key-1")
        assert again.id == first.id
        with pytest.raises(JobsError) as excinfo:
            client.submit("add_sub", _rows(5.0), idempotency_key="client-key-1")
        assert excinfo.value.status == 409
        assert "client-key-1" in excinfo.value.message

    def test_a_callback_url_is_posted_the_ended_job(self, client: JobsClient) -> None:
        with callback_receiver() as receiver:
            job = client.submit("add_sub", _rows(), callback_url=receiver.url)
            assert job.callback_url == receiver.url
            document = receiver.next()
        assert document["id"] == job.id
        assert document["state"] == "succeeded"
        assert document["callback_url"] == receiver.url


class TestRefusals:
    def test_unknown_model_is_404_with_the_servers_message(self, client: JobsClient) -> None:
        with pytest.raises(JobsError) as excinfo:
            client.submit("no_such_model", _rows())
        assert excinfo.value.status == 404
        assert "no_such_model" in excinfo.value.message
        assert "(HTTP 404)" in str(excinfo.value)

    def test_inputs_infer_would_refuse_are_400(self, client: JobsClient) -> None:
        with pytest.raises(JobsError) as excinfo:
            client.submit("add_sub", {"INPUT0": np.ones((1, 3), np.float32)})
        assert excinfo.value.status == 400

    def test_unknown_job_is_404(self, client: JobsClient) -> None:
        for call in (client.get, client.result, client.cancel):
            with pytest.raises(JobsError) as excinfo:
                call("no-such-job")
            assert excinfo.value.status == 404

    def test_result_of_a_failed_job_is_409_naming_its_error(self, client: JobsClient) -> None:
        job = client.submit("fails", {"INPUT0": np.array([-1.0], dtype=np.float32)})
        done = client.wait(job.id, timeout_s=20)
        assert done.state is JobState.FAILED
        assert "negative input" in (done.error or "")
        with pytest.raises(JobsError) as excinfo:
            client.result(job.id)
        assert excinfo.value.status == 409
        assert "negative input" in excinfo.value.message

    def test_wait_times_out_with_the_job_as_last_seen(self, client: JobsClient) -> None:
        job = client.submit("sleeper", {"SECONDS": np.array([2.0], dtype=np.float32)})
        with pytest.raises(WaitTimeoutError) as excinfo:
            client.wait(job.id, timeout_s=0.3)
        assert excinfo.value.job.id == job.id
        assert not excinfo.value.job.done
        assert isinstance(excinfo.value, TimeoutError)
        cancelled = client.cancel(job.id)
        assert cancelled.state is JobState.CANCELLED
        assert cancelled.finished_at is not None

    def test_an_unreachable_server_is_status_0(self) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]  # bound, not listening: connections are refused
            with JobsClient(f"127.0.0.1:{port}") as client, pytest.raises(JobsError) as excinfo:
                client.get("x")
        assert excinfo.value.status == 0
        assert "cannot reach" in excinfo.value.message


class TestList:
    def test_list_pages_filters_and_stops_at_the_limit(self, client: JobsClient) -> None:
        ids = [client.submit("identity", {"INPUT0": np.ones((1, 2), np.float32)}).id]
        ids += [client.submit("identity", {"INPUT0": np.ones((1, 2), np.float32)}).id]
        ids += [client.submit("identity", {"INPUT0": np.ones((1, 2), np.float32)}).id]
        for job_id in ids:
            client.wait(job_id, 20)
        listed = list(client.list(model="identity", state="succeeded", limit=None, page_size=2))
        assert {j.id for j in listed} >= set(ids)
        assert len({j.id for j in listed}) == len(listed)
        assert {(j.model, j.state) for j in listed} == {("identity", JobState.SUCCEEDED)}
        assert len(list(client.list(limit=2, page_size=1))) == 2
        first = client.page(model="identity", limit=1)
        assert len(first.jobs) == 1
        assert first.next_page_token
        second = client.page(model="identity", limit=1, page_token=first.next_page_token)
        assert second.jobs[0].id != first.jobs[0].id

    def test_a_bad_state_filter_is_refused_before_sending(self, client: JobsClient) -> None:
        with pytest.raises(ValueError, match="sleeping"):
            list(client.list(state="sleeping"))


async def test_async_client_does_the_same(server: RunningServer) -> None:
    async with AsyncJobsClient(server.http_url) as client:
        job = await client.submit("add_sub", _rows(3.0), idempotency_key="async-key")
        assert (
            await client.submit("add_sub", _rows(3.0), idempotency_key="async-key")
        ).id == job.id
        done = await client.wait(job.id, timeout_s=20)
        assert done.state is JobState.SUCCEEDED
        outputs = await client.result(job.id)
        np.testing.assert_array_equal(outputs["OUTPUT0"], _rows()["INPUT0"] + 3)
        assert (await client.get(job.id)).id == job.id
        assert (await client.cancel(job.id)).state is JobState.SUCCEEDED  # already ended
        listed = [j async for j in client.list(model="add_sub", limit=None, page_size=1)]
        assert job.id in {j.id for j in listed}
        slow = await client.submit("sleeper", {"SECONDS": np.array([2.0], np.float32)})
        with pytest.raises(WaitTimeoutError):
            await client.wait(slow.id, timeout_s=0.2)
        assert (await client.cancel(slow.id)).state is JobState.CANCELLED
        with pytest.raises(JobsError) as excinfo:
            await client.result("no-such-job")
        assert excinfo.value.status == 404


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with jobs_server(tmp_path_factory.mktemp("guarded"), api_token=TOKEN) as running:
        yield running


def test_the_token_is_sent_and_required(guarded: RunningServer) -> None:
    with JobsClient(guarded.http_url) as anonymous, pytest.raises(JobsError) as excinfo:
        anonymous.submit("identity", {"INPUT0": np.ones((1, 1), np.float32)})
    assert excinfo.value.status == 401
    with JobsClient(guarded.http_url, token=TOKEN) as client:
        job = client.submit("identity", {"INPUT0": np.ones((1, 1), np.float32)})
        assert client.wait(job.id, 20).state is JobState.SUCCEEDED
        assert client.result(job.id)["OUTPUT0"].tolist() == [[1.0]]
