"""docs/openapi.yaml against the real server, with schemathesis: every operation, generated
valid and invalid requests.

Properties: no answer is a server error (except the statuses an operation lists in
`x-fnserve-server-errors`: 501 for an unsupported feature, 500 for a failed load), and every
answer conforms to the description (status documented, content type, body schema). The
campaign is bounded by the hypothesis profile (see conftest.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import RunningServer

if TYPE_CHECKING:  # schemathesis defines its OpenAPI case alias for type checkers only
    from schemathesis.specs.openapi.schemas import OpenApiCase

SPEC = Path(__file__).parents[2] / "docs" / "openapi.yaml"
schema = schemathesis.openapi.from_path(SPEC)
CHECKS = [status_code_conformance, content_type_conformance, response_schema_conformance]
# Per operation: about 70 operations, so the whole campaign stays within seconds by default.
EXAMPLES = max(2, settings().max_examples // 20)


@pytest.fixture(scope="module")
def base_url(server: RunningServer) -> str:
    return f"http://{server.http_url}"


@schema.parametrize()
@settings(max_examples=EXAMPLES, suppress_health_check=list(HealthCheck), deadline=None)
def test_rest_api_conforms(case: OpenApiCase, base_url: str) -> None:
    response = case.call(base_url=base_url, timeout=30)
    # 5xx only where the description says so (x-fnserve-server-errors: 501 for a feature
    # fnserve lacks, 500 for a failed load, as Triton answers)
    by_design = case.operation.definition.raw.get("x-fnserve-server-errors", [])
    if response.status_code not in by_design:
        assert response.status_code < 500, (response.status_code, response.text[:300])
    case.validate_response(response, checks=CHECKS, excluded_checks=[not_a_server_error])


def test_every_route_is_described() -> None:
    """Every HTTP route the app serves has a path in the description, and no other."""
    from starlette.routing import Route

    from fnserve.config.server import ServerConfig
    from fnserve.repository.discover import discover
    from fnserve.runtime import Runtime
    from fnserve.server.http.routes import http_app
    from tests.conftest import MODELS

    app = http_app(Runtime(discover([MODELS])), ServerConfig())
    served = {
        route.path.replace("{version:int}", "{version}")
        for route in app.routes
        if isinstance(route, Route)
    }
    described = set(schema.raw_schema["paths"])
    assert served == described
