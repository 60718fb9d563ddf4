"""Ask a running tritonserver what fnserve must answer: statuses, messages, metric families.

Run by run.sh against the bundled tritonserver (explicit model control, model `identity`).
Phases: `traffic` (successes, a model error, a bad input), `versions` (unknown version, then
unload and every lookup of the unloaded model over HTTP and gRPC, then load again) and
`metrics` (the exposition). Needs the anchors venv (tritonclient, numpy).
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

HOST = "127.0.0.1"
HTTP, GRPC, METRICS = (
    (int(p) for p in sys.argv[2:5]) if len(sys.argv) > 4 else (18800, 18801, 18802)
)
MODEL = "identity"
OK = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [0, 1, 2, 3]}]}
RAISES = {
    "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [-2, 1, 2, 3]}]
}
FAILS = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [-1, 1, 2, 3]}]}
UNKNOWN_INPUT = {"inputs": [{"name": "NOPE", "datatype": "FP32", "shape": [1, 4], "data": [0] * 4}]}


def http(method: str, path: str, body: Any = None, port: int = HTTP) -> tuple[int, str]:
    """Status and body text of one request (error statuses included)."""
    data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
    request = urllib.request.Request(f"http://{HOST}:{port}{path}", data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def show(label: str, method: str, path: str, body: Any = None) -> None:
    status, text = http(method, path, body)
    print(f"{label}: {method} {path} -> HTTP {status} {text}")


def show_grpc(label: str, call: Callable[[], Any]) -> None:
    try:
        result = call()
        print(f"{label}: gRPC OK {result if isinstance(result, bool) else ''}".rstrip())
    except InferenceServerException as exc:
        print(f"{label}: gRPC {exc.status()} {exc.message()!r}")


def grpc_infer(client: grpcclient.InferenceServerClient, x: np.ndarray, version: str = "") -> Any:
    inp = grpcclient.InferInput("INPUT0", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return lambda: client.infer(MODEL, [inp], model_version=version)


def traffic(client: grpcclient.InferenceServerClient, x: np.ndarray) -> None:
    for _ in range(3):
        show("success", "POST", f"/v2/models/{MODEL}/infer", OK)
        show_grpc("success", grpc_infer(client, x))
    show("model error", "POST", f"/v2/models/{MODEL}/infer", FAILS)
    show_grpc("model error", grpc_infer(client, -x - 1))
    show("model raises", "POST", f"/v2/models/{MODEL}/infer", RAISES)
    show_grpc("model raises", grpc_infer(client, -x - 2))
    show("unknown input", "POST", f"/v2/models/{MODEL}/infer", UNKNOWN_INPUT)
    show("unknown model", "POST", "/v2/models/nosuch/infer", OK)


def versions(client: grpcclient.InferenceServerClient, x: np.ndarray) -> None:
    show("loaded, unknown version 7", "POST", f"/v2/models/{MODEL}/versions/7/infer", OK)
    show_grpc("loaded, unknown version 7", grpc_infer(client, x, "7"))
    show("unload", "POST", f"/v2/repository/models/{MODEL}/unload")
    time.sleep(2)  # unload is asynchronous
    show("index", "POST", "/v2/repository/index", {})
    for version in ("", "1", "7"):
        tag = f"unloaded v={version or 'none'}"
        path = f"/v2/models/{MODEL}" + (f"/versions/{version}" if version else "")
        show(f"{tag} infer", "POST", f"{path}/infer", OK)
        show_grpc(f"{tag} infer", grpc_infer(client, x, version))
        show(f"{tag} ready", "GET", f"{path}/ready")
        show(f"{tag} metadata", "GET", path)
        show(f"{tag} config", "GET", f"{path}/config")
        show(f"{tag} stats", "GET", f"{path}/stats")
        show_grpc(f"{tag} metadata", partial(client.get_model_metadata, MODEL, version))
        show_grpc(f"{tag} config", partial(client.get_model_config, MODEL, version))
        show_grpc(f"{tag} ready", partial(client.is_model_ready, MODEL, version))
    text = http("GET", "/metrics", port=METRICS)[1]
    series = [line for line in text.splitlines() if line.startswith("nv_inference")]
    print(f"unloaded metrics: {len(series)} nv_inference* series {series}")
    show("load", "POST", f"/v2/repository/models/{MODEL}/load")
    show("after load", "POST", f"/v2/models/{MODEL}/infer", OK)
    show("after load, raises", "POST", f"/v2/models/{MODEL}/infer", RAISES)


def main() -> None:
    phase = sys.argv[1]
    if phase == "metrics":
        print(http("GET", "/metrics", port=METRICS)[1])
        return
    client = grpcclient.InferenceServerClient(f"{HOST}:{GRPC}")
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    {"traffic": traffic, "versions": versions}[phase](client, x)


if __name__ == "__main__":
    main()
