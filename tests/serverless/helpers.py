"""Driving a real server in the serverless tests: infer, index, metrics, waiting on them."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import tritonclient.http as httpclient

from tests.serverproc import ServerProcess

MODELS = Path(__file__).parent / "memory_models.py"


def infer(
    server: ServerProcess, name: str, x: float = 1.0, sleep_s: float = 0.0
) -> dict[str, int | float]:
    """One request over HTTP (tritonclient); Y, BUILT and CALLS of the answer."""
    client = httpclient.InferenceServerClient(server.http.removeprefix("http://"))
    inputs = [httpclient.InferInput("X", [1, 1], "FP32")]
    inputs[0].set_data_from_numpy(np.array([[x]], np.float32))
    if sleep_s:
        inputs.append(httpclient.InferInput("SLEEP_S", [1, 1], "FP32"))
        inputs[1].set_data_from_numpy(np.array([[sleep_s]], np.float32))
    result = client.infer(name, inputs)
    return {k: result.as_numpy(k).item() for k in ("Y", "BUILT", "CALLS")}


def index(server: ServerProcess) -> dict[str, tuple[str, str]]:
    """name -> (state, reason) from the repository index (Triton's words)."""
    rows = httpx.post(f"{server.http}/v2/repository/index", json={}).json()
    return {r["name"]: (r.get("state", ""), r.get("reason", "")) for r in rows}


def metric(server: ServerProcess, family: str, **labels: str) -> float:
    """The value of one sample of /metrics (0 when absent)."""
    text = httpx.get(server.metrics).text
    for line in text.splitlines():
        match = re.match(rf"{family}\{{(.*)\}} (\S+)$", line)
        if match and all(f'{k}="{v}"' in match.group(1) for k, v in labels.items()):
            return float(match.group(2))
    return 0.0


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
