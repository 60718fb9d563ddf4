"""`fnserve serve` as a user runs it: a subprocess, free ports, SIGTERM with work in flight."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import MODELS

pytestmark = pytest.mark.e2e


def _start(*extra: str) -> tuple[subprocess.Popen[str], dict[str, str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "fnserve", "serve", str(MODELS), "--http-port", "0",
         "--grpc-port", "0", "--metrics-port", "0", *extra],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    endpoints: dict[str, str] = {}
    deadline = time.monotonic() + 30
    while len(endpoints) < 3 and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        match = re.match(r"\s+(HTTP|gRPC|metrics)\s+(\S+)", line)
        if match:
            endpoints[match.group(1)] = match.group(2)
    assert len(endpoints) == 3, f"no startup summary; exit code {proc.poll()}"
    # Keep draining stderr so the server never blocks on a full pipe.
    threading.Thread(target=proc.stderr.read, daemon=True).start()
    return proc, endpoints


def test_serve_prints_endpoints_and_stops_gracefully_on_sigterm() -> None:
    proc, endpoints = _start("--shutdown-timeout", "10")
    try:
        base = endpoints["HTTP"]
        assert httpx.get(f"{base}/v2/health/ready").status_code == 200
        assert httpx.get(endpoints["metrics"]).status_code == 200
        body = {"inputs": [{"name": "SECONDS", "shape": [1], "datatype": "FP32", "data": [1.0]}]}
        results: list[httpx.Response] = []
        slow = threading.Thread(
            target=lambda: results.append(
                httpx.post(f"{base}/v2/models/sleeper/infer", json=body, timeout=20)
            )
        )
        slow.start()
        time.sleep(0.3)  # the 1 s request is running now
        proc.send_signal(signal.SIGTERM)
        slow.join(20)
        assert proc.wait(20) == 0
        assert results
        assert results[0].status_code == 200
        assert results[0].json()["outputs"][0]["data"] == [1.0]
    finally:
        if proc.poll() is None:
            proc.kill()


def test_serve_refuses_a_missing_path() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "fnserve", "serve", "no/such/dir"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode != 0
    assert "does not exist" in result.stderr


def test_serve_reports_an_import_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("import nonexistent_module_xyz\n")
    result = subprocess.run(
        [sys.executable, "-m", "fnserve", "serve", str(broken)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 1
    assert "importing" in result.stderr
    assert "nonexistent_module_xyz" in result.stderr
