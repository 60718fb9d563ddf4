"""The HTTP/REST frontend: Triton's exact paths (KServe v2 + Triton extensions) on Starlette.

Paths follow the router regexes of Triton's `http_server.cc`: a model name is `[^/]+`, a version
is digits only; any other path answers 404 `{"error":"Not Found"}` and a known path with the
wrong method 405. Triton endpoints that fnserve does not implement (trace, logging, shared
memory, generate) answer 501 with a JSON error, so clients fail with a clear message.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from fnserve.config.server import ServerConfig
from fnserve.deploy.service import DeployService, DeploySettings
from fnserve.errors import InvalidInputError, UnavailableError, UnsupportedError
from fnserve.limits import check_model, quote
from fnserve.server.http import documents
from fnserve.server.http.body import ClientDisconnectedError, read_body
from fnserve.server.http.codec import dumps, parse_json
from fnserve.server.http.deployments import DeploymentEndpoints, deployment_routes
from fnserve.server.http.errors import error_body, error_response
from fnserve.server.http.infer import InferEndpoint
from fnserve.server.http.jobs import JobEndpoints, job_routes

if TYPE_CHECKING:
    from fnserve.jobs.service import JobService
    from fnserve.runtime import Runtime

Endpoint = Callable[[Request], Awaitable[Response]]

_MODEL = "/v2/models/{model_name}"
_VERSIONED = "/v2/models/{model_name}/versions/{version:int}"
_JSON = "application/json"
_INFER_PATH = re.compile(r"/v2/models/([^/]+)(?:/versions/([0-9]+))?/infer")


def json_response(doc: Any, status_code: int = 200) -> Response:
    """A compact JSON response with `Content-Type: application/json`."""
    return Response(dumps(doc), status_code, media_type=_JSON)


def _error(exc: BaseException) -> Response:
    status, body = error_response(exc)
    return Response(body, status, media_type=_JSON)


def _guarded(endpoint: Endpoint) -> Endpoint:
    """Turn every exception an endpoint raises into Triton's JSON error response."""

    @functools.wraps(endpoint)
    async def run(request: Request) -> Response:
        try:
            return await endpoint(request)
        except ClientDisconnectedError:
            return Response(status_code=400)  # nobody is listening any more
        except Exception as exc:
            return _error(exc)

    return run


class _Endpoints:
    """Every endpoint except inference; thin translations onto `Runtime`."""

    def __init__(self, runtime: Runtime, config: ServerConfig) -> None:
        self.runtime = runtime
        self.limit = config.max_body_bytes
        self.limits = config.input_limits()
        self.repository_refusal = config.repository_api_refusal()

    def _check_repository_api(self) -> None:
        if self.repository_refusal:  # Triton's none and poll modes
            raise UnavailableError(self.repository_refusal)

    def _version(self, request: Request) -> str:
        """The path's version ("" for latest), once the name and version pass the limits."""
        version = request.path_params.get("version")
        version = "" if version is None else str(version)
        check_model(request.path_params.get("model_name", ""), version, self.limits)
        return version

    async def live(self, request: Request) -> Response:
        return Response(status_code=200 if self.runtime.is_live() else 400)

    async def ready(self, request: Request) -> Response:
        return Response(status_code=200 if self.runtime.is_ready() else 400)

    async def server_metadata(self, request: Request) -> Response:
        return json_response(documents.server_metadata(self.runtime.server_metadata()))

    async def model_ready(self, request: Request) -> Response:
        if self.runtime.model_ready(request.path_params["model_name"], self._version(request)):
            return Response(status_code=200)
        return Response(error_body("Model version not ready"), 400, media_type=_JSON)

    async def model_metadata(self, request: Request) -> Response:
        name = request.path_params["model_name"]
        metadata = self.runtime.model_metadata(name, self._version(request))
        return json_response(documents.model_metadata(metadata))

    async def model_config(self, request: Request) -> Response:
        config = self.runtime.reported_config(
            request.path_params["model_name"], self._version(request)
        )
        return json_response(config.to_json())

    async def statistics(self, request: Request) -> Response:
        name = request.path_params.get("model_name", "")
        return json_response(
            documents.statistics(self.runtime.statistics(name, self._version(request)))
        )

    async def repository_index(self, request: Request) -> Response:
        _no_repository_name(request)
        ready = (await self._json_body(request)).get("ready", False)
        if type(ready) is not bool:
            raise InvalidInputError(f"'ready' must be true or false, got {quote(ready)}")
        entries = self.runtime.repository_index(ready)
        return json_response([documents.index_entry(entry) for entry in entries])

    async def load(self, request: Request) -> Response:
        _no_repository_name(request)
        self._check_repository_api()
        parameters = await self._parameters(request)
        if "config" in parameters or any(key.startswith("file:") for key in parameters):
            raise UnsupportedError(
                "loading a model with a config override or files is not supported by fnserve"
            )
        name = request.path_params["model_name"]
        check_model(name, "", self.limits)
        await self.runtime.load_model(name)
        return Response(status_code=200)

    async def unload(self, request: Request) -> Response:
        _no_repository_name(request)
        self._check_repository_api()
        dependents = (await self._parameters(request)).get("unload_dependents", False)
        if type(dependents) is not bool:
            raise InvalidInputError(
                f"'unload_dependents' must be true or false, got {quote(dependents)}"
            )
        name = request.path_params["model_name"]
        check_model(name, "", self.limits)
        await self.runtime.unload_model(name, dependents)
        return Response(status_code=200)

    async def _json_body(self, request: Request) -> dict[str, Any]:
        body = bytes(await read_body(request.receive, self.limit, _content_length(request)))
        if not body.strip():
            return {}
        doc = parse_json(body)
        if type(doc) is not dict:
            raise InvalidInputError("request body must be a JSON object")
        return doc

    async def _parameters(self, request: Request) -> dict[str, Any]:
        parameters = (await self._json_body(request)).get("parameters", {})
        if type(parameters) is not dict:
            raise InvalidInputError("'parameters' must be a JSON object")
        return parameters


def _content_length(request: Request) -> int | None:
    value = request.headers.get("content-length", "")
    return int(value) if value.isdigit() else None


def _no_repository_name(request: Request) -> None:
    if "repository" in request.path_params:
        raise UnsupportedError("'repository_name' specification is not supported")


def _unsupported(feature: str) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        return _error(UnsupportedError(f"{feature} is not supported by fnserve"))

    return endpoint


async def _http_exception(request: Request, exc: Exception) -> Response:
    """404 and 405 from the router, as Triton's JSON errors."""
    if not isinstance(exc, HTTPException):  # registered for HTTPException only
        return _error(exc)
    response = Response(error_body(exc.detail), exc.status_code, media_type=_JSON)
    response.headers.update(exc.headers or {})
    return response


def _model_routes(endpoints: _Endpoints, infer: InferEndpoint) -> list[BaseRoute]:
    routes: list[BaseRoute] = []
    for prefix in (_MODEL, _VERSIONED):
        routes += [
            Route(prefix + "/infer", infer, methods=["POST"]),
            Route(prefix, _guarded(endpoints.model_metadata)),
            Route(prefix + "/ready", _guarded(endpoints.model_ready)),
            Route(prefix + "/config", _guarded(endpoints.model_config)),
            Route(prefix + "/stats", _guarded(endpoints.statistics)),
            Route(prefix + "/generate", _unsupported("generate"), methods=["POST"]),
            Route(prefix + "/generate_stream", _unsupported("generate"), methods=["POST"]),
        ]
    trace = _unsupported("trace setting")
    routes.append(Route(_MODEL + "/trace/setting", trace, methods=["GET", "POST"]))
    return routes


def _repository_routes(endpoints: _Endpoints) -> list[BaseRoute]:
    routes: list[BaseRoute] = []
    for prefix in ("/v2/repository", "/v2/repository/{repository}"):
        routes += [
            Route(prefix + "/index", _guarded(endpoints.repository_index), methods=["POST"]),
            Route(prefix + "/models/{model_name}/load", _guarded(endpoints.load), methods=["POST"]),
            Route(
                prefix + "/models/{model_name}/unload", _guarded(endpoints.unload), methods=["POST"]
            ),
        ]
    return routes


def _unsupported_routes() -> list[BaseRoute]:
    routes: list[BaseRoute] = [
        Route("/v2/trace/setting", _unsupported("trace setting"), methods=["GET", "POST"]),
        Route("/v2/logging", _unsupported("logging"), methods=["GET", "POST"]),
    ]
    for kind, name in (("system", "system"), ("cuda", "CUDA")):
        feature = _unsupported(f"{name} shared memory")
        base = f"/v2/{kind}sharedmemory"
        routes += [
            Route(base + "/status", feature),
            Route(base + "/region/{region}/status", feature),
            Route(base + "/region/{region}/register", feature, methods=["POST"]),
            Route(base + "/region/{region}/unregister", feature, methods=["POST"]),
            Route(base + "/unregister", feature, methods=["POST"]),
        ]
    return routes


def http_app(runtime: Runtime, config: ServerConfig, jobs: JobService | None = None) -> Starlette:
    """Build the ASGI app serving Triton's HTTP/REST API on `runtime`.

    Args:
        runtime: what every endpoint calls.
        config: server settings (`max_body_bytes` bounds request bodies).
        jobs: the durable jobs service (None: the job routes answer 501).
    """
    endpoints = _Endpoints(runtime, config)
    infer = InferEndpoint(runtime, config.max_body_bytes, config.input_limits())
    routes: list[BaseRoute] = [
        # before the model routes, where "stats" would match as a model name
        Route("/v2/models/stats", _guarded(endpoints.statistics)),
        *_model_routes(endpoints, infer),  # early: inference is the router's hot path
        Route("/v2/health/live", _guarded(endpoints.live)),
        Route("/v2/health/ready", _guarded(endpoints.ready)),
        Route("/v2", _guarded(endpoints.server_metadata)),
        *_repository_routes(endpoints),
        *job_routes(JobEndpoints(jobs, infer), _guarded),
        *deployment_routes(DeploymentEndpoints(_deploy_service(runtime, config)), _guarded),
        *_unsupported_routes(),
    ]
    return TritonHttpApp(infer, routes=routes, exception_handlers={HTTPException: _http_exception})


def _deploy_service(runtime: Runtime, config: ServerConfig) -> DeployService:
    settings = DeploySettings(
        config.state_dir, config.deploy_max_bytes, config.deploy_validate_timeout_s
    )
    return DeployService(runtime, settings)


class TritonHttpApp(Starlette):
    """Starlette, with `POST .../infer` dispatched before the middleware stack and router.

    The inference endpoint turns every error into a response itself, so skipping Starlette's
    layers changes nothing but the cost: about 20 us of CPU per request, measured.
    """

    def __init__(self, infer: InferEndpoint, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._infer = infer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            match = _INFER_PATH.fullmatch(scope["path"])
            if match is not None:
                model, version = match.groups()
                params = {"model_name": model}
                if version is not None:
                    params["version"] = str(int(version))  # as the router's int convertor does
                scope["path_params"] = params
                await self._infer(scope, receive, send)
                return
        await super().__call__(scope, receive, send)
