"""The container's HEALTHCHECK: exit 0 when `GET /v2/health/ready` answers 200, else 1.

The image carries no curl, so the check is this stdlib-only script, run by the image's own
Python. `FNSERVE_HEALTH_URL` overrides the address (e.g. `https://...` when the server runs with
`--tls-cert`); by default it asks 127.0.0.1 on `FNSERVE_HTTP_PORT` (8000, the image's port).
A server that is draining after SIGTERM answers 400 here, so the container turns unhealthy.
"""

from __future__ import annotations

import os
import ssl
import sys
import urllib.error
import urllib.request


def health_url() -> str:
    port = os.environ.get("FNSERVE_HTTP_PORT", "8000")
    return os.environ.get("FNSERVE_HEALTH_URL", f"http://127.0.0.1:{port}/v2/health/ready")


def main() -> int:
    # A server's own certificate is rarely issued for 127.0.0.1: check liveness, not identity.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(health_url(), timeout=2, context=context) as reply:
            return 0 if reply.status == 200 else 1
    except (urllib.error.URLError, OSError) as exc:
        sys.stderr.write(f"not ready: {exc}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
