"""Drive benchmarks/triton_probe/server.py: `traffic` (successes and failures), `metrics`
(print the exposition: tests/server/triton_metrics_reference.txt), `versions` (unknown version,
then unload and infer: the statuses tests/server/test_unloaded_status.py expects)."""

import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import numpy as np
import tritonclient.grpc as gc
import tritonclient.http as hc
from tritonclient.utils import InferenceServerException


class _Answer:
    def __init__(self, status_code: int, text: str) -> None:
        self.status_code, self.text = status_code, text


def _call(method: str, url: str, data: str | bytes = b"") -> _Answer:
    body = data.encode() if isinstance(data, str) else data
    request = urllib.request.Request(url, data=body or None, method=method)
    try:
        with urllib.request.urlopen(request) as answer:
            return _Answer(answer.status, answer.read().decode())
    except urllib.error.HTTPError as error:
        return _Answer(error.code, error.read().decode())


class requests:  # noqa: N801 - the two calls used below, without the dependency
    get = staticmethod(lambda url: _call("GET", url))
    post = staticmethod(lambda url, data=b"": _call("POST", url, data))


H, G, M = "127.0.0.1:18700", "127.0.0.1:18701", "http://127.0.0.1:18702/metrics"
http = hc.InferenceServerClient(H)
grpc = gc.InferenceServerClient(G)
x = np.arange(4, dtype=np.float32).reshape(1, 4)


def hin() -> list[hc.InferInput]:
    i = hc.InferInput("INPUT0", [1, 4], "FP32")
    i.set_data_from_numpy(x)
    return [i]


def gin() -> list[gc.InferInput]:
    i = gc.InferInput("INPUT0", [1, 4], "FP32")
    i.set_data_from_numpy(x)
    return [i]


def try_(label: str, fn: Callable[[], object]) -> None:
    try:
        fn()
        print(f"{label}: OK")
    except InferenceServerException as e:
        print(f"{label}: status={e.status()!r} message={e.message()!r}")


def raw_http(label: str, path: str, body: object) -> None:
    r = requests.post(f"http://{H}{path}", data=json.dumps(body))
    print(f"{label}: HTTP {r.status_code} {r.text}")


body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [0, 1, 2, 3]}]}
phase = sys.argv[1]
if phase == "traffic":
    for _ in range(3):
        http.infer("identity", hin())
        grpc.infer("identity", gin())
    try_("failing http", lambda: http.infer("failing", hin()))
    try_("failing grpc", lambda: grpc.infer("failing", gin()))
    raw_http(
        "bad input http",
        "/v2/models/identity/infer",
        {"inputs": [{"name": "NOPE", "datatype": "FP32", "shape": [1, 4], "data": [0, 1, 2, 3]}]},
    )
    raw_http("unknown model http", "/v2/models/nosuch/infer", body)
    try_("unknown model grpc", lambda: grpc.infer("nosuch", gin()))
elif phase == "versions":
    raw_http("unknown version http", "/v2/models/identity/versions/7/infer", body)
    try_("unknown version grpc", lambda: grpc.infer("identity", gin(), model_version="7"))
    r = requests.post(f"http://{H}/v2/repository/models/identity/unload")
    print("unload:", r.status_code, r.text)
    time.sleep(3)
    r = requests.post(f"http://{H}/v2/repository/index")
    print("index:", r.status_code, r.text)
    raw_http("unloaded http (no version)", "/v2/models/identity/infer", body)
    raw_http("unloaded http (version 1)", "/v2/models/identity/versions/1/infer", body)
    raw_http("unloaded http (version 7)", "/v2/models/identity/versions/7/infer", body)
    try_("unloaded grpc (no version)", lambda: grpc.infer("identity", gin()))
    try_("unloaded grpc (version 1)", lambda: grpc.infer("identity", gin(), model_version="1"))
    try_("unloaded grpc (version 7)", lambda: grpc.infer("identity", gin(), model_version="7"))
    r = requests.get(f"http://{H}/v2/models/identity/ready")
    print("ready unloaded:", r.status_code, r.text)
    r = requests.get(f"http://{H}/v2/models/identity")
    print("metadata unloaded:", r.status_code, r.text)
    r = requests.get(f"http://{H}/v2/models/identity/versions/7")
    print("metadata v7:", r.status_code, r.text)
elif phase == "metrics":
    print(requests.get(M).text)
