"""grpclib service `fnserve.jobs.v1.Jobs`: durable jobs on the gRPC port (see `jobs.proto`).

Handlers only translate, as `service.py` does for inference: a submitted ModelInferRequest is
decoded exactly as ModelInfer decodes it (the same checks, the same INVALID_ARGUMENT wording),
results go out as ModelInfer's replies do (raw outputs, one write), and errors take their
status from the one table in `errors.py`.
"""

# ruff: noqa: N802  (RPC method names are fixed by the .proto service definition)

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from fnserve.config.server import ServerConfig
from fnserve.errors import InvalidInputError, UnsupportedError
from fnserve.jobs.model import Job, JobState, ModelJobCounts
from fnserve.limits import DEFAULT_LIMITS, InputLimits, quote
from fnserve.protocol import grpc_service_pb2 as pb, jobs_pb2
from fnserve.server.grpc.codec import decode_request, encode_response
from fnserve.server.grpc.errors import to_grpc_error
from fnserve.server.grpc.receive import answer, receive
from fnserve.server.grpc.reply import check_reply_size, send_unary
from fnserve.server.grpc.stubs.jobs_grpc import JobsBase

if TYPE_CHECKING:
    from grpclib.server import Stream

    from fnserve.jobs.service import JobService

DEFAULT_PAGE_SIZE = 100
_STATE_OF_WIRE = {jobs_pb2.JobState.Value(s.name): s for s in JobState}


class JobsService(JobsBase):
    """Every RPC of `fnserve.jobs.v1.Jobs`, served by one JobService.

    Args:
        jobs: the server's job service; None: jobs are turned off (`--no-jobs`) and every
            RPC answers UNIMPLEMENTED saying so, as the HTTP routes answer 501.
        limits: names and sizes one submitted request may use (the infer limits).
        max_message_bytes: largest message received or sent.
    """

    def __init__(
        self,
        jobs: JobService | None,
        limits: InputLimits = DEFAULT_LIMITS,
        max_message_bytes: int = ServerConfig.grpc_max_message_bytes,
    ) -> None:
        self._service = jobs
        self._limits = limits
        self._max_bytes = max_message_bytes

    @property
    def _jobs(self) -> JobService:
        if self._service is None:
            raise UnsupportedError("durable jobs are turned off on this server (--no-jobs)")
        return self._service

    async def SubmitJob(self, stream: Stream[jobs_pb2.SubmitJobRequest, jobs_pb2.Job]) -> None:
        await answer(stream, self._submit, self._max_bytes)

    async def _submit(self, msg: jobs_pb2.SubmitJobRequest) -> jobs_pb2.Job:
        if not msg.HasField("request"):
            raise InvalidInputError("SubmitJob needs a request (an inference.ModelInferRequest)")
        request = decode_request(msg.request, self._limits)
        job, _ = await self._jobs.submit(
            request,
            idempotency_key=msg.idempotency_key or None,
            callback_url=msg.callback_url or None,
        )
        return job_message(job)

    async def GetJob(self, stream: Stream[jobs_pb2.GetJobRequest, jobs_pb2.Job]) -> None:
        await answer(stream, self._get, self._max_bytes)

    async def _get(self, msg: jobs_pb2.GetJobRequest) -> jobs_pb2.Job:
        wait_s = msg.wait_seconds
        if not math.isfinite(wait_s) or wait_s < 0:
            raise InvalidInputError(f"wait_seconds must be 0 or more, got {wait_s}")
        return job_message(await self._jobs.get(_job_id(msg.id), wait_s))

    async def GetJobResult(
        self, stream: Stream[jobs_pb2.GetJobResultRequest, pb.ModelInferResponse]
    ) -> None:
        # Replied like ModelInfer: raw outputs framed by hand, one write (see reply.py).
        try:
            msg = await receive(stream, self._max_bytes)
            if msg is None:
                raise InvalidInputError("the request message is missing")
            parts = encode_response(await self._jobs.result(_job_id(msg.id)))
            check_reply_size(parts, self._max_bytes)
        except Exception as exc:
            raise to_grpc_error(exc) from None
        await send_unary(stream, parts, pb.ModelInferResponse)

    async def CancelJob(self, stream: Stream[jobs_pb2.CancelJobRequest, jobs_pb2.Job]) -> None:
        await answer(stream, self._cancel, self._max_bytes)

    async def _cancel(self, msg: jobs_pb2.CancelJobRequest) -> jobs_pb2.Job:
        return job_message(await self._jobs.cancel(_job_id(msg.id)))

    async def ListJobs(
        self, stream: Stream[jobs_pb2.ListJobsRequest, jobs_pb2.ListJobsResponse]
    ) -> None:
        await answer(stream, self._list, self._max_bytes)

    async def _list(self, msg: jobs_pb2.ListJobsRequest) -> jobs_pb2.ListJobsResponse:
        state = _STATE_OF_WIRE.get(msg.state) if msg.state else None
        if msg.state and state is None:
            raise InvalidInputError(f"unknown job state {msg.state}")
        jobs, token = await self._jobs.list(
            model=msg.model or None,
            state=state,
            limit=msg.limit or DEFAULT_PAGE_SIZE,
            page_token=msg.page_token or None,
        )
        return jobs_pb2.ListJobsResponse(
            jobs=[job_message(j) for j in jobs], next_page_token=token or ""
        )

    async def CountJobs(
        self, stream: Stream[jobs_pb2.CountJobsRequest, jobs_pb2.CountJobsResponse]
    ) -> None:
        await answer(stream, self._count, self._max_bytes)

    async def _count(self, _: jobs_pb2.CountJobsRequest) -> jobs_pb2.CountJobsResponse:
        counts = await self._jobs.counts()
        return jobs_pb2.CountJobsResponse(models=[counts_message(c) for c in counts])


def _job_id(value: str) -> str:
    if not value:
        raise InvalidInputError("the job id is missing")
    if len(value) > 256:
        raise InvalidInputError(f"job id {quote(value)} is longer than 256 characters")
    return value


def job_message(job: Job) -> jobs_pb2.Job:
    """A stored job as the `fnserve.jobs.v1.Job` message (unset fields: not happened yet)."""
    msg = jobs_pb2.Job(
        id=job.id,
        model=job.model,
        version=job.version,
        state=job.state.name,  # protobuf takes an enum value by its name
        attempts=job.attempts,
        max_attempts=job.max_attempts,
        created_at=job.created_at,
        error=job.error or "",
        idempotency_key=job.idempotency_key or "",
        callback_url=job.callback_url or "",
    )
    if job.started_at is not None:
        msg.started_at = job.started_at
    if job.finished_at is not None:
        msg.finished_at = job.finished_at
    if job.result_size is not None:
        msg.result_size = job.result_size
    return msg


def counts_message(counts: ModelJobCounts) -> jobs_pb2.ModelJobCounts:
    """One model's job counts as the `fnserve.jobs.v1.ModelJobCounts` message."""
    msg = jobs_pb2.ModelJobCounts(
        model=counts.model, **{s.value: counts.by_state.get(s, 0) for s in JobState}
    )
    if counts.oldest_queued_at is not None:
        msg.oldest_queued_at = counts.oldest_queued_at
    return msg
