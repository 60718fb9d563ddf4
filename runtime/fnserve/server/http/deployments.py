"""fnserve's deployment API (an extension of Triton's; the admin role guards it).

```
POST   /v2/deployments?name=NAME         body: a tar.gz of model files -> the deployment served
GET    /v2/deployments                   every deployment, its versions and current models
DELETE /v2/deployments/NAME              stop serving NAME and delete its versions
POST   /v2/deployments/NAME/rollback     body {"version": N} (optional): serve version N again
```

Errors are Triton's `{"error": "..."}` with the reason (a bad archive or a failed import or
load: 400; too large: 413; an unknown deployment: 404).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from fnserve.deploy.service import DeployReport, DeployService, ModelReport
from fnserve.deploy.store import Deployment
from fnserve.errors import InvalidInputError, PayloadTooLargeError
from fnserve.server.http.body import read_body
from fnserve.server.http.codec import dumps, parse_json

Endpoint = Callable[[Request], Awaitable[Response]]


class DeploymentEndpoints:
    """Thin translations onto `DeployService`."""

    def __init__(self, service: DeployService) -> None:
        self.service = service

    async def deploy(self, request: Request) -> Response:
        name = request.query_params.get("name", "")
        if not name:
            raise InvalidInputError("the deployment needs a name: POST /v2/deployments?name=NAME")
        declared = request.headers.get("content-length", "")
        limit = self.service.settings.max_bytes
        try:
            body = await read_body(
                request.receive, limit, int(declared) if declared.isdigit() else None
            )
        except PayloadTooLargeError as exc:
            raise PayloadTooLargeError(
                f"deployment archive too large: {exc.message} (the server's --deploy-max-bytes)"
            ) from exc
        report = await self.service.deploy(name, bytes(body))
        return _json(report_json(report))

    async def list(self, request: Request) -> Response:
        found = await self.service.deployments()
        return _json({"deployments": [_deployment_json(d, m) for d, m in found]})

    async def undeploy(self, request: Request) -> Response:
        await self.service.undeploy(request.path_params["name"])
        return _json({"name": request.path_params["name"], "undeployed": True})

    async def rollback(self, request: Request) -> Response:
        body = bytes(await read_body(request.receive, 64 * 1024))
        doc = parse_json(body) if body.strip() else {}
        version = doc.get("version", 0) if isinstance(doc, dict) else None
        if type(version) is not int or version < 0:
            raise InvalidInputError('rollback body must be {"version": N} with N >= 1, or empty')
        report = await self.service.rollback(request.path_params["name"], version)
        return _json(report_json(report))


def report_json(report: DeployReport) -> dict[str, Any]:
    """The JSON answer to a deploy or rollback."""
    return {
        "name": report.name,
        "version": report.version,
        "hash": report.digest,
        "deployed_at": report.deployed_at,
        "unchanged": report.unchanged,
        "models": [_model_json(m) for m in report.models],
    }


def _model_json(model: ModelReport) -> dict[str, Any]:
    return {
        "name": model.name,
        "version": model.version,
        "state": model.state,
        "load_s": round(model.load_s, 4),
        "warmup_s": round(model.warmup_s, 4),
        "inputs": [{"name": n, "datatype": d, "shape": list(s)} for n, d, s in model.inputs],
    }


def _deployment_json(deployment: Deployment, models: list[ModelReport]) -> dict[str, Any]:
    return {
        "name": deployment.name,
        "current": deployment.current,
        "versions": [
            {
                "version": v.version,
                "hash": v.digest,
                "deployed_at": v.deployed_at,
                "models": [list(m) for m in v.models],
            }
            for v in deployment.versions
        ],  # fmt: skip
        "models": [_model_json(m) for m in models],
    }


def _json(doc: dict[str, Any]) -> Response:
    return Response(dumps(doc), 200, media_type="application/json")


def deployment_routes(
    endpoints: DeploymentEndpoints, guarded: Callable[[Endpoint], Endpoint]
) -> list[BaseRoute]:
    """The deployment API's routes, each endpoint wrapped by `guarded` (errors -> JSON)."""
    return [
        Route("/v2/deployments", guarded(endpoints.deploy), methods=["POST"]),
        Route("/v2/deployments", guarded(endpoints.list), methods=["GET"]),
        Route("/v2/deployments/{name}", guarded(endpoints.undeploy), methods=["DELETE"]),
        Route("/v2/deployments/{name}/rollback", guarded(endpoints.rollback), methods=["POST"]),
    ]
