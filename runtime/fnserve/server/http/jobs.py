"""The durable jobs HTTP API, beside KServe v2.

- `POST /v2/models/{name}[/versions/{v}]/jobs`: the body of `/infer` (JSON, or binary with
  `Inference-Header-Content-Length`), optional `Idempotency-Key` and `Callback-URL` headers;
  202 with the job and `Location: /v2/jobs/{id}`, or 200 with the job an idempotency key
  already named.
- `GET /v2/jobs/{id}[?wait=SECONDS]`, `POST /v2/jobs/{id}/cancel`: the job.
- `GET /v2/jobs/{id}/result`: exactly what `/infer` would have answered (409 until succeeded).
- `GET /v2/jobs?model=&state=&limit=&page_token=`: `{"jobs": [...], "next_page_token": ...}`.
- `GET /v2/jobs/counts`: `{"models": [{"model", "queued", ..., "oldest_queued_at"}]}`, every
  job of the store counted (with PostgreSQL: the whole fleet's).

With `--no-jobs` the routes stay and answer 501, so clients get a clear reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from fnserve.errors import InvalidInputError, UnsupportedError
from fnserve.jobs.codec import BinaryOutputs
from fnserve.jobs.document import counts_document, job_document
from fnserve.jobs.model import JobState
from fnserve.jobs.service import JobService
from fnserve.limits import quote
from fnserve.server.http.body import compress, response_encoding
from fnserve.server.http.codec import OutputPlan, dumps, encode_response
from fnserve.server.http.infer import InferEndpoint

Endpoint = Callable[[Request], Any]

_JSON = "application/json"
_STATES = {state.value: state for state in JobState}


class JobEndpoints:
    """The job routes' handlers.

    Args:
        service: the jobs service (None: jobs are turned off, every route answers 501).
        infer: the inference endpoint, whose body decoding and limits submit shares.
    """

    def __init__(self, service: JobService | None, infer: InferEndpoint) -> None:
        self._service = service
        self._infer = infer

    @property
    def service(self) -> JobService:
        if self._service is None:
            raise UnsupportedError("durable jobs are turned off on this server (--no-jobs)")
        return self._service

    async def submit(self, request: Request) -> Response:
        service = self.service
        infer_request, plan = await self._infer.decode(request.scope, request.receive)
        job, created = await service.submit(
            infer_request,
            idempotency_key=request.headers.get("idempotency-key"),
            callback_url=request.headers.get("callback-url"),
            binary=BinaryOutputs(plan.default_binary, dict(plan.binary)),
        )
        response = _json(job_document(job), 202 if created else 200)
        response.headers["location"] = f"/v2/jobs/{job.id}"
        return response

    async def get(self, request: Request) -> Response:
        wait_s = _wait_seconds(request.query_params.get("wait"))
        job = await self.service.get(request.path_params["job_id"], wait_s)
        return _json(job_document(job))

    async def result(self, request: Request) -> Response:
        stored = await self.service.stored_result(request.path_params["job_id"])
        plan = OutputPlan(stored.binary.default, stored.binary.outputs)
        body, header_length = encode_response(stored.response, plan)
        headers = {}
        media_type = _JSON
        if header_length is not None:
            media_type = "application/octet-stream"
            headers["inference-header-content-length"] = str(header_length)
        encoding = response_encoding(request.headers.get("accept-encoding", "").encode())
        if encoding is not None:
            body = compress(body, encoding)
            headers["content-encoding"] = encoding.decode()
        return Response(body, 200, headers=headers, media_type=media_type)

    async def cancel(self, request: Request) -> Response:
        job = await self.service.cancel(request.path_params["job_id"])
        return _json(job_document(job))

    async def counts(self, request: Request) -> Response:
        counts = await self.service.counts()
        return _json({"models": [counts_document(c) for c in counts]})

    async def list(self, request: Request) -> Response:
        query = request.query_params
        state = query.get("state") or None
        if state is not None and state not in _STATES:
            raise InvalidInputError(
                f"state must be one of {', '.join(_STATES)}, got {quote(state)}"
            )
        jobs, token = await self.service.list(
            model=query.get("model") or None,
            state=None if state is None else _STATES[state],
            limit=_int(query.get("limit"), "limit", 100),
            page_token=query.get("page_token") or None,
        )
        return _json({"jobs": [job_document(j) for j in jobs], "next_page_token": token})


def job_routes(endpoints: JobEndpoints, guarded: Callable[[Endpoint], Endpoint]) -> list[BaseRoute]:
    """The job routes, each handler wrapped by `guarded` (errors -> JSON error responses)."""
    routes: list[BaseRoute] = [
        Route(prefix + "/jobs", guarded(endpoints.submit), methods=["POST"])
        for prefix in ("/v2/models/{model_name}", "/v2/models/{model_name}/versions/{version:int}")
    ]
    return [
        *routes,
        Route("/v2/jobs", guarded(endpoints.list), methods=["GET"]),
        Route("/v2/jobs/counts", guarded(endpoints.counts), methods=["GET"]),  # before {job_id}
        Route("/v2/jobs/{job_id}", guarded(endpoints.get), methods=["GET"]),
        Route("/v2/jobs/{job_id}/result", guarded(endpoints.result), methods=["GET"]),
        Route("/v2/jobs/{job_id}/cancel", guarded(endpoints.cancel), methods=["POST"]),
    ]


def _json(doc: Any, status_code: int = 200) -> Response:
    return Response(dumps(doc), status_code, media_type=_JSON)


def _wait_seconds(value: str | None) -> float:
    if value is None or value == "":
        return 0.0
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:  # also refuses NaN
        raise InvalidInputError(f"wait must be a number of seconds >= 0, got {quote(value)}")
    return seconds


def _int(value: str | None, name: str, default: int) -> int:
    if value is None or value == "":
        return default
    if not value.isdigit() or len(value) > 9:
        raise InvalidInputError(f"{name} must be a positive integer, got {quote(value)}")
    return int(value)
