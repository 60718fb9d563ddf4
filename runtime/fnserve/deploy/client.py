"""The client side of `fnserve deploy`: calls a server's deployment API over HTTP(S).

Standard library only (urllib): the CLI needs no extra package to push a deployment.

Example:
    ```python
    client = DeployClient("http://127.0.0.1:8000", token="...")
    report = client.deploy("plus", pack(Path("plus.py")))
    ```
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any


class DeployClientError(Exception):
    """The server refused the request (its reason) or could not be reached."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class DeployClient:
    """Calls one server's `/v2/deployments` API.

    Args:
        server: base URL, e.g. "http://127.0.0.1:8000" (a bare host:port means http).
        token: the admin bearer token ("": send none).
        timeout_s: how long one call may take (a deployment loads and warms up first).
        context: TLS settings for an https server (default: the system's CAs).
    """

    def __init__(
        self,
        server: str,
        token: str = "",
        timeout_s: float = 600.0,
        context: ssl.SSLContext | None = None,
    ) -> None:
        self.server = (server if "://" in server else f"http://{server}").rstrip("/")
        self._token = token
        self._timeout_s = timeout_s
        self._context = context

    def deploy(self, name: str, archive: bytes) -> dict[str, Any]:
        """Push `archive` (a tar.gz) as deployment `name`; the server's report."""
        query = urllib.parse.urlencode({"name": name})
        return self._call("POST", f"/v2/deployments?{query}", archive, "application/gzip")

    def deployments(self) -> list[dict[str, Any]]:
        """Every deployment on the server."""
        deployments: list[dict[str, Any]] = self._call("GET", "/v2/deployments")["deployments"]
        return deployments

    def rollback(self, name: str, version: int = 0) -> dict[str, Any]:
        """Serve an earlier version of `name` (0: the one before the current)."""
        body = json.dumps({"version": version} if version else {}).encode()
        path = f"/v2/deployments/{urllib.parse.quote(name, safe='')}/rollback"
        return self._call("POST", path, body, "application/json")

    def undeploy(self, name: str) -> None:
        """Stop serving `name` and delete it on the server."""
        self._call("DELETE", f"/v2/deployments/{urllib.parse.quote(name, safe='')}")

    def _call(
        self, method: str, path: str, body: bytes | None = None, content_type: str = ""
    ) -> dict[str, Any]:
        request = urllib.request.Request(self.server + path, data=body, method=method)
        if content_type:
            request.add_header("Content-Type", content_type)
        if self._token:
            request.add_header("Authorization", f"Bearer {self._token}")
        try:
            with urllib.request.urlopen(
                request, timeout=self._timeout_s, context=self._context
            ) as response:
                answer: dict[str, Any] = json.loads(response.read() or b"{}")
                return answer
        except urllib.error.HTTPError as exc:
            raise DeployClientError(_reason(exc), exc.code) from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise DeployClientError(f"cannot reach {self.server}: {reason}") from exc


def _reason(exc: urllib.error.HTTPError) -> str:
    raw = exc.read()
    try:
        return str(json.loads(raw)["error"])
    except (ValueError, KeyError, TypeError):
        return raw.decode(errors="replace").strip() or f"HTTP {exc.code}"
