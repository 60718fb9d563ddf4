"""`fnserve.jobs.v1.Jobs` end to end: grpclib and grpcio clients against real servers with a
SQLite job store (submit, get, wait, result, cancel, list, counts; errors and their codes;
token auth; `--no-jobs`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc  # type: ignore[import-untyped]  # grpcio has no stubs here
import httpx
import numpy as np
import pytest
from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from fnserve.protocol import grpc_service_pb2 as pb, jobs_pb2
from fnserve.server.grpc.stubs.jobs_grpc import JobsStub
from tests.client.jobserver import jobs_server
from tests.client.receiver import callback_receiver
from tests.conftest import RunningServer

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

TOKEN = "jobs-api-token"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """Jobs on, a backlog of at most 3 queued jobs per model."""
    with jobs_server(tmp_path_factory.mktemp("jobs"), jobs_max_backlog=3) as running:
        yield running


@pytest.fixture
async def stub(server: RunningServer) -> AsyncIterator[JobsStub]:
    channel = Channel(server.ports.host, server.ports.grpc)
    try:
        yield JobsStub(channel)
    finally:
        channel.close()


def _infer(
    model: str, name: str, array: np.ndarray, datatype: str = "FP32"
) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(name=name, datatype=datatype, shape=list(array.shape))
    request.raw_input_contents.append(array.astype(np.float32).tobytes())
    return request


def _submit(request: pb.ModelInferRequest, key: str = "") -> jobs_pb2.SubmitJobRequest:
    return jobs_pb2.SubmitJobRequest(request=request, idempotency_key=key)


async def _finish(stub: JobsStub, job_id: str) -> jobs_pb2.Job:
    for _ in range(20):
        job = await stub.GetJob(jobs_pb2.GetJobRequest(id=job_id, wait_seconds=5))
        if job.state in (jobs_pb2.SUCCEEDED, jobs_pb2.FAILED, jobs_pb2.CANCELLED):
            return job
    raise AssertionError(f"job {job_id} did not end: {job}")


async def _code(call: object) -> tuple[Status, str]:
    with pytest.raises(GRPCError) as excinfo:
        await call  # type: ignore[misc]
    return excinfo.value.status, excinfo.value.message or ""


class TestSubmitAndCollect:
    async def test_submit_wait_result_round_trip(self, stub: JobsStub) -> None:
        rows = np.arange(6, dtype=np.float32).reshape(2, 3)
        job = await stub.SubmitJob(_submit(_infer("identity", "INPUT0", rows)))
        assert (job.model, job.version, job.max_attempts) == ("identity", "", 3)
        assert job.id
        assert job.created_at > 0
        assert not job.HasField("finished_at")
        done = await _finish(stub, job.id)
        assert done.state == jobs_pb2.SUCCEEDED
        assert done.attempts == 1
        assert done.finished_at >= done.started_at >= done.created_at
        assert done.result_size > 0
        result = await stub.GetJobResult(jobs_pb2.GetJobResultRequest(id=job.id))
        assert [(o.name, o.datatype, list(o.shape)) for o in result.outputs] == [
            ("OUTPUT0", "FP32", [2, 3])
        ]
        assert result.model_name == "identity"
        np.testing.assert_array_equal(
            np.frombuffer(result.raw_output_contents[0], np.float32).reshape(2, 3), rows
        )

    async def test_an_idempotency_key_returns_the_same_job(self, stub: JobsStub) -> None:
        request = _infer("identity", "INPUT0", np.ones((1, 2)))
        first = await stub.SubmitJob(_submit(request, key="grpc-key-1"))
        again = await stub.SubmitJob(_submit(request, key="grpc-key-1"))
        assert again.id == first.id
        assert again.idempotency_key == "grpc-key-1"
        other = _infer("identity", "INPUT0", np.zeros((1, 2)))
        status, message = await _code(stub.SubmitJob(_submit(other, key="grpc-key-1")))
        assert status is Status.ALREADY_EXISTS
        assert "grpc-key-1" in message

    async def test_a_callback_url_is_posted_the_ended_job(self, stub: JobsStub) -> None:
        with callback_receiver() as receiver:
            request = jobs_pb2.SubmitJobRequest(
                request=_infer("identity", "INPUT0", np.ones((1, 1))), callback_url=receiver.url
            )
            job = await stub.SubmitJob(request)
            assert job.callback_url == receiver.url
            document = await asyncio.to_thread(receiver.next)
        assert (document["id"], document["state"]) == (job.id, "succeeded")

    async def test_http_and_grpc_see_the_same_jobs(
        self, server: RunningServer, stub: JobsStub
    ) -> None:
        job = await stub.SubmitJob(_submit(_infer("identity", "INPUT0", np.full((1, 2), 4))))
        await _finish(stub, job.id)
        async with httpx.AsyncClient(base_url=f"http://{server.http_url}") as http:
            doc = (await http.get(f"/v2/jobs/{job.id}")).json()
            result = (await http.get(f"/v2/jobs/{job.id}/result")).json()
        assert (doc["id"], doc["state"], doc["attempts"]) == (job.id, "succeeded", 1)
        assert result["outputs"][0]["data"] == [4.0, 4.0]  # JSON: gRPC asked for no binary

    async def test_grpcio_client_speaks_the_same_service(self, server: RunningServer) -> None:
        request = _submit(_infer("identity", "INPUT0", np.full((1, 4), 7)))
        with grpc.insecure_channel(server.grpc_url) as channel:
            submit = channel.unary_unary(
                "/fnserve.jobs.v1.Jobs/SubmitJob",
                request_serializer=jobs_pb2.SubmitJobRequest.SerializeToString,
                response_deserializer=jobs_pb2.Job.FromString,
            )
            get = channel.unary_unary(
                "/fnserve.jobs.v1.Jobs/GetJob",
                request_serializer=jobs_pb2.GetJobRequest.SerializeToString,
                response_deserializer=jobs_pb2.Job.FromString,
            )
            job = submit(request, timeout=10)
            done = get(jobs_pb2.GetJobRequest(id=job.id, wait_seconds=10), timeout=20)
            assert done.state == jobs_pb2.SUCCEEDED
            with pytest.raises(grpc.RpcError) as excinfo:
                get(jobs_pb2.GetJobRequest(id="no-such-job"), timeout=10)
            assert excinfo.value.code() == grpc.StatusCode.NOT_FOUND


class TestRefusals:
    async def test_unknown_model_is_not_found_and_stores_nothing(self, stub: JobsStub) -> None:
        before = await stub.ListJobs(jobs_pb2.ListJobsRequest(limit=1000))
        status, message = await _code(
            stub.SubmitJob(_submit(_infer("no_such_model", "INPUT0", np.ones((1, 1)))))
        )
        assert status is Status.NOT_FOUND
        assert "no_such_model" in message
        after = await stub.ListJobs(jobs_pb2.ListJobsRequest(limit=1000))
        assert len(after.jobs) == len(before.jobs)

    async def test_inputs_infer_would_refuse_are_invalid(self, stub: JobsStub) -> None:
        # add_sub wants two FP32 [16] inputs; this sends one of the wrong width.
        bad = _infer("add_sub", "INPUT0", np.ones((1, 3)))
        status, message = await _code(stub.SubmitJob(_submit(bad)))
        assert status is Status.INVALID_ARGUMENT
        assert "INPUT" in message

    async def test_malformed_raw_contents_are_invalid(self, stub: JobsStub) -> None:
        request = _infer("identity", "INPUT0", np.ones((1, 4)))
        request.raw_input_contents[0] = b"\x00" * 3  # not 16 bytes
        status, message = await _code(stub.SubmitJob(_submit(request)))
        assert status is Status.INVALID_ARGUMENT
        assert "expected 16 bytes" in message

    async def test_a_submit_without_a_request_is_invalid(self, stub: JobsStub) -> None:
        status, message = await _code(stub.SubmitJob(jobs_pb2.SubmitJobRequest()))
        assert status is Status.INVALID_ARGUMENT
        assert "request" in message

    async def test_unknown_jobs_are_not_found(self, stub: JobsStub) -> None:
        for call in (
            stub.GetJob(jobs_pb2.GetJobRequest(id="no-such-job")),
            stub.GetJobResult(jobs_pb2.GetJobResultRequest(id="no-such-job")),
            stub.CancelJob(jobs_pb2.CancelJobRequest(id="no-such-job")),
        ):
            status, message = await _code(call)
            assert status is Status.NOT_FOUND
            assert "no-such-job" in message

    async def test_bad_ids_waits_and_limits_are_invalid(self, stub: JobsStub) -> None:
        for call in (
            stub.GetJob(jobs_pb2.GetJobRequest(id="")),
            stub.GetJob(jobs_pb2.GetJobRequest(id="x", wait_seconds=-1)),
            stub.GetJob(jobs_pb2.GetJobRequest(id="x", wait_seconds=float("nan"))),
            stub.GetJob(jobs_pb2.GetJobRequest(id="x" * 300)),
            stub.ListJobs(jobs_pb2.ListJobsRequest(limit=5000)),
            stub.ListJobs(jobs_pb2.ListJobsRequest(state=99)),  # type: ignore[arg-type]
        ):
            status, _ = await _code(call)
            assert status is Status.INVALID_ARGUMENT

    async def test_result_of_a_failed_job_names_its_error(self, stub: JobsStub) -> None:
        job = await stub.SubmitJob(_submit(_infer("fails", "INPUT0", np.array([-1.0]))))
        done = await _finish(stub, job.id)
        assert done.state == jobs_pb2.FAILED
        assert "negative input" in done.error
        assert done.attempts == done.max_attempts  # a model error is retried, then fails
        status, message = await _code(stub.GetJobResult(jobs_pb2.GetJobResultRequest(id=job.id)))
        assert status is Status.FAILED_PRECONDITION
        assert "failed" in message
        assert "negative input" in message


class TestCancelListCount:
    async def test_cancel_a_job_that_has_not_ended(self, stub: JobsStub) -> None:
        running = await stub.SubmitJob(_submit(_infer("sleeper", "SECONDS", np.array([1.5]))))
        queued = await stub.SubmitJob(_submit(_infer("sleeper", "SECONDS", np.array([1.5]))))
        cancelled = await stub.CancelJob(jobs_pb2.CancelJobRequest(id=queued.id))
        assert cancelled.state == jobs_pb2.CANCELLED
        assert cancelled.HasField("finished_at")
        status, message = await _code(stub.GetJobResult(jobs_pb2.GetJobResultRequest(id=queued.id)))
        assert status is Status.FAILED_PRECONDITION
        assert "cancelled" in message
        done = await _finish(stub, running.id)
        assert done.state == jobs_pb2.SUCCEEDED
        again = await stub.CancelJob(jobs_pb2.CancelJobRequest(id=running.id))
        assert again.state == jobs_pb2.SUCCEEDED  # an ended job stays as it is

    async def test_list_filters_and_pages_without_repeats(self, stub: JobsStub) -> None:
        submitted = set()
        for value in range(5):
            request = _infer("identity", "INPUT0", np.full((1, 1), value))
            submitted.add((await stub.SubmitJob(_submit(request))).id)
        for job_id in submitted:
            await _finish(stub, job_id)
        seen: list[str] = []
        token = ""
        while True:
            page = await stub.ListJobs(
                jobs_pb2.ListJobsRequest(
                    model="identity", state=jobs_pb2.SUCCEEDED, limit=2, page_token=token
                )
            )
            assert len(page.jobs) <= 2
            assert {(j.model, j.state) for j in page.jobs} <= {("identity", jobs_pb2.SUCCEEDED)}
            seen += [j.id for j in page.jobs]
            token = page.next_page_token
            if not token:
                break
        assert len(seen) == len(set(seen))
        assert submitted <= set(seen)
        created = [(j.created_at) for j in (await stub.ListJobs(jobs_pb2.ListJobsRequest())).jobs]
        assert created == sorted(created, reverse=True)  # newest first

    async def test_counts_agree_with_the_listing(self, stub: JobsStub) -> None:
        await _finish(
            stub,
            (await stub.SubmitJob(_submit(_infer("identity", "INPUT0", np.ones((1, 1)))))).id,
        )
        counts = await stub.CountJobs(jobs_pb2.CountJobsRequest())
        identity = next(m for m in counts.models if m.model == "identity")
        listed = await stub.ListJobs(jobs_pb2.ListJobsRequest(model="identity", limit=1000))
        assert identity.succeeded == sum(j.state == jobs_pb2.SUCCEEDED for j in listed.jobs)
        assert identity.queued == 0
        assert not identity.HasField("oldest_queued_at")

    async def test_a_full_backlog_is_resource_exhausted(self, stub: JobsStub) -> None:
        ids: list[str] = []

        async def fill() -> None:
            for _ in range(10):
                job = await stub.SubmitJob(_submit(_infer("sleeper", "SECONDS", np.array([1.0]))))
                ids.append(job.id)

        try:
            status, message = await _code(fill())
        finally:
            for job_id in ids:
                await stub.CancelJob(jobs_pb2.CancelJobRequest(id=job_id))
        assert status is Status.RESOURCE_EXHAUSTED
        assert "--jobs-max-backlog" in message
        assert 3 <= len(ids) <= 4  # 3 queued, and perhaps one already claimed


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """Jobs behind an API token."""
    with jobs_server(tmp_path_factory.mktemp("guarded"), api_token=TOKEN) as running:
        yield running


async def test_jobs_need_the_api_token(guarded: RunningServer) -> None:
    request = jobs_pb2.SubmitJobRequest(request=_infer("identity", "INPUT0", np.ones((1, 1))))
    async with Channel(guarded.ports.host, guarded.ports.grpc) as channel:
        stub = JobsStub(channel)
        for metadata in (None, {"authorization": "Bearer wrong"}):
            status, _ = await _code(stub.SubmitJob(request, metadata=metadata))
            assert status is Status.UNAUTHENTICATED
        status, _ = await _code(stub.ListJobs(jobs_pb2.ListJobsRequest()))
        assert status is Status.UNAUTHENTICATED
        auth = {"authorization": f"Bearer {TOKEN}"}
        job = await stub.SubmitJob(request, metadata=auth)
        done = await stub.GetJob(jobs_pb2.GetJobRequest(id=job.id, wait_seconds=10), metadata=auth)
        assert done.state == jobs_pb2.SUCCEEDED


async def test_without_jobs_every_rpc_says_why(tmp_path: Path) -> None:
    with jobs_server(tmp_path, jobs=False) as server:
        async with Channel(server.ports.host, server.ports.grpc) as channel:
            status, message = await _code(JobsStub(channel).GetJob(jobs_pb2.GetJobRequest(id="x")))
        assert status is Status.UNIMPLEMENTED
        assert "--no-jobs" in message
