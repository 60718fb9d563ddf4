"""The HTTP frontend's access check: an ASGI layer in front of the whole app (inference too).

Each path maps to its Triton API group with the router's own patterns (a model name is
`[^/]+`, a version digits); a path that is no endpoint passes on, and the router answers 404.
A refused request is answered at once, before its body is read, in Triton's `{"error": ...}`
form (401 with `WWW-Authenticate: Bearer`, 403).
"""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Receive, Scope, Send

from fnserve.errors import FnserveError, UnauthenticatedError
from fnserve.server.auth import AccessPolicy
from fnserve.server.http.errors import error_response

_MODEL = r"/v2/models/[^/]+(?:/versions/[0-9]+)?"
_GROUPS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(pattern), group)
    for pattern, group in (
        (
            _MODEL + r"/infer|" + _MODEL + r"/generate(?:_stream)?|" + _MODEL + r"/jobs|"
            r"/v2/jobs(?:/[^/]+(?:/result|/cancel)?)?",
            "inference",
        ),
        (r"/v2/health/(?:live|ready)|" + _MODEL + r"/ready", "health"),
        (r"/v2/models/stats|" + _MODEL + r"/stats", "statistics"),
        (r"/v2|" + _MODEL, "metadata"),
        (_MODEL + r"/config", "model-config"),
        (r"/v2/repository/.*|/v2/deployments(?:/.*)?", "model-repository"),
        (r"/v2/trace/setting|/v2/models/[^/]+/trace/setting", "trace"),
        (r"/v2/logging", "logging"),
        (r"/v2/(?:system|cuda)sharedmemory/.*", "shared-memory"),
    )
]


def api_group(path: str) -> str | None:
    """The Triton API group of a request path; None for a path that is no endpoint."""
    for pattern, group in _GROUPS:
        if pattern.fullmatch(path):
            return group
    return None


class HttpAccessGuard:
    """Wraps an ASGI app: requests the policy refuses are answered here.

    Args:
        app: the HTTP app.
        policy: who may call what.
    """

    def __init__(self, app: ASGIApp, policy: AccessPolicy) -> None:
        self._app = app
        self._policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            group = api_group(scope["path"])
            if group is not None:
                raw: list[tuple[bytes, bytes]] = scope["headers"]

                def header(name: str) -> bytes | None:
                    key = name.encode("latin-1")
                    return next((value for k, value in raw if k == key), None)

                try:
                    self._policy.check(group, header, f"{scope['method']} {scope['path']}")
                except FnserveError as exc:
                    await _refuse(exc, send)
                    return
        await self._app(scope, receive, send)


def guard_http(app: ASGIApp, policy: AccessPolicy) -> ASGIApp:
    """`app` behind the policy's checks; `app` itself when the policy refuses nothing."""
    return HttpAccessGuard(app, policy) if policy.active else app


async def _refuse(exc: FnserveError, send: Send) -> None:
    status, body = error_response(exc)
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    if isinstance(exc, UnauthenticatedError):
        headers.append((b"www-authenticate", b'Bearer realm="fnserve"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
