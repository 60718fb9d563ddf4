"""Triton python_backend models written the way Triton users write them, served unchanged by
the real server and driven with tritonclient: requests of a batch one by one, error codes,
`auto_complete_config`, helper modules beside model.py, a BLS target named by a BYTES input."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.serverproc import ServerProcess

pytestmark = pytest.mark.e2e

# Reads one value per request (`[0][0]`, as many Triton models do) and answers one row; a
# request whose parameter `fail` names a TritonError code is refused with that code.
FIRST_VALUE = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            fail = json.loads(request.parameters()).get("fail")
            if fail:
                error = pb_utils.TritonError(f"refused {request.request_id()}",
                                             getattr(pb_utils.TritonError, fail))
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            first = x[0][0]
            answer = np.array([[first * 10, len(requests)]], np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", answer)]))
        return responses
"""
FIRST_VALUE_CONFIG = """
backend: "python"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]
dynamic_batching { max_queue_delay_microseconds: 100000 }
"""
# No config.pbtxt: the model declares itself.
SELF_DECLARED = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input({"name": "A", "data_type": "TYPE_INT32", "dims": [3]})
        auto_complete_model_config.add_output({"name": "B", "data_type": "TYPE_INT32", "dims": [3]})
        auto_complete_model_config.set_max_batch_size(8)
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def execute(self, requests):
        out = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "A").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("B", a * 2)]))
        return out
"""
# A config.pbtxt whose input the hook contradicts: the load fails, as in Triton.
CONTRADICTED = SELF_DECLARED
CONTRADICTED_CONFIG = """
backend: "python"
input [ { name: "A" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "B" data_type: TYPE_INT32 dims: [ 3 ] } ]
"""
# Helper modules beside model.py, imported absolutely and relatively; two models each have a
# `helpers.py` of their own.
WITH_HELPERS = """
import triton_python_backend_utils as pb_utils
from helpers import offset
from .more import scale


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            y = (x * scale() + offset()).astype("float32")
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", y)]))
        return out
"""
HELPERS_CONFIG = """
backend: "python"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""
# BLS whose target model is named by a BYTES input, as Triton's bls example does.
BLS_BY_NAME = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            name = pb_utils.get_input_tensor_by_name(request, "MODEL").as_numpy()[0][0]
            call = pb_utils.InferenceRequest(
                model_name=name,
                requested_output_names=["Y"],
                inputs=[pb_utils.get_input_tensor_by_name(request, "X")],
            )
            response = call.exec()
            if response.has_error():
                out.append(pb_utils.InferenceResponse(error=response.error()))
                continue
            y = pb_utils.get_output_tensor_by_name(response, "Y")
            out.append(pb_utils.InferenceResponse([y]))
        return out
"""
BLS_CONFIG = """
backend: "python"
max_batch_size: 8
input [
  { name: "MODEL" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "X" data_type: TYPE_FP32 dims: [ 1 ] }
]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


# Custom metrics, defined in initialize as Triton's examples do.
METERED = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        labels = {"model": args["model_name"], "version": args["model_version"]}
        self.requests = pb_utils.MetricFamily(
            name="metered_requests", description="Requests seen", kind=pb_utils.MetricFamily.COUNTER
        ).Metric(labels=labels)
        self.last = pb_utils.MetricFamily(
            name="metered_last_value", description="Last X", kind=pb_utils.MetricFamily.GAUGE
        ).Metric(labels=labels)
        self.sizes = pb_utils.MetricFamily(
            name="metered_x", description="X values", kind=pb_utils.MetricFamily.HISTOGRAM
        ).Metric(labels=labels, buckets=[1.0, 10.0])

    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            self.requests.increment(1)
            self.last.set(float(x[0][0]))
            self.sizes.observe(float(x[0][0]))
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
        return out
"""


def _model(root: Path, name: str, source: str, config: str | None, **files: str) -> None:
    folder = root / name / "1"
    folder.mkdir(parents=True)
    (folder / "model.py").write_text(textwrap.dedent(source))
    for stem, text in files.items():
        (folder / f"{stem}.py").write_text(text)
    if config is not None:
        (root / name / "config.pbtxt").write_text(config)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("triton_compat")
    _model(root, "first_value", FIRST_VALUE, FIRST_VALUE_CONFIG)
    _model(root, "self_declared", SELF_DECLARED, None)
    _model(root, "contradicted", CONTRADICTED, CONTRADICTED_CONFIG)
    for name, (offset, scale) in {"helped_a": (1, 2), "helped_b": (100, 3)}.items():
        _model(
            root,
            name,
            WITH_HELPERS,
            HELPERS_CONFIG,
            helpers=f"def offset():\n    return {offset}\n",
            more=f"def scale():\n    return {scale}\n",
        )
    _model(root, "bls_by_name", BLS_BY_NAME, BLS_CONFIG)
    _model(root, "metered", METERED, HELPERS_CONFIG)
    with ServerProcess.start(root) as running:
        yield running
        assert running.stop() == 0


def _x(module: type, value: float, name: str = "X") -> object:
    tensor = module.InferInput(name, [1, 1], "FP32")  # type: ignore[attr-defined]
    tensor.set_data_from_numpy(np.array([[value]], np.float32))
    return tensor


def test_each_request_of_a_batch_gets_its_own_answer(server: ServerProcess) -> None:
    """16 concurrent clients: the batcher puts several requests in one `execute`, and each
    request still reads its own `[0][0]` and gets its own row back."""
    client = server.http_client(concurrency=16)
    pending = [client.async_infer("first_value", [_x(httpclient, float(i))]) for i in range(16)]
    rows = [p.get_result().as_numpy("Y") for p in pending]
    answers = [(float(y[0][0]), float(y[0][1])) for y in rows]
    assert [a for a, _ in answers] == [i * 10.0 for i in range(16)]
    assert max(n for _, n in answers) > 1  # some executes got several requests


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_an_error_code_reaches_the_client_with_its_status(
    server: ServerProcess, protocol: str
) -> None:
    if protocol == "http":
        http = server.http_client(concurrency=16)
        with pytest.raises(InferenceServerException) as info:
            http.infer(
                "first_value",
                [_x(httpclient, 1)],
                request_id="r1",
                parameters={"fail": "INVALID_ARG"},
            )
        assert info.value.status() == "400"
    else:
        grpc = grpcclient.InferenceServerClient(server.grpc)
        with pytest.raises(InferenceServerException) as info:
            grpc.infer(
                "first_value",
                [_x(grpcclient, 1)],
                request_id="r1",
                parameters={"fail": "NOT_FOUND"},
            )
        assert info.value.status() == "StatusCode.NOT_FOUND"
    assert info.value.message() == "refused r1"


def test_auto_complete_config_declares_a_model_without_config(server: ServerProcess) -> None:
    client = server.http_client(concurrency=16)
    config = client.get_model_config("self_declared")
    assert config["max_batch_size"] == 8
    assert "dynamic_batching" in config
    assert [(t["name"], t["data_type"]) for t in config["input"]] == [("A", "TYPE_INT32")]
    a = httpclient.InferInput("A", [2, 3], "INT32")
    a.set_data_from_numpy(np.arange(6, dtype=np.int32).reshape(2, 3))
    result = client.infer("self_declared", [a]).as_numpy("B")
    assert result.tolist() == [[0, 2, 4], [6, 8, 10]]


def test_auto_complete_config_contradicting_the_config_fails_the_load(
    server: ServerProcess,
) -> None:
    index = {e["name"]: e for e in server.http_client(concurrency=16).get_model_repository_index()}
    assert index["contradicted"]["state"] == "UNAVAILABLE"
    reason = index["contradicted"]["reason"]
    assert "auto_complete_config" in reason
    assert "input 'A' has dims [4] in the configuration" in reason
    assert index["self_declared"]["state"] == "READY"


def test_helper_modules_beside_model_py_are_each_models_own(server: ServerProcess) -> None:
    client = server.http_client(concurrency=16)
    a = client.infer("helped_a", [_x(httpclient, 5)]).as_numpy("Y")
    b = client.infer("helped_b", [_x(httpclient, 5)]).as_numpy("Y")
    assert (float(a[0][0]), float(b[0][0])) == (11.0, 115.0)


def test_bls_calls_the_model_a_bytes_input_names(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc)
    name = grpcclient.InferInput("MODEL", [1, 1], "BYTES")
    name.set_data_from_numpy(np.array([[b"helped_b"]], dtype=np.object_))
    result = client.infer("bls_by_name", [name, _x(grpcclient, 2)]).as_numpy("Y")
    assert float(result[0][0]) == 106.0
    name.set_data_from_numpy(np.array([[b"nowhere"]], dtype=np.object_))
    with pytest.raises(InferenceServerException) as info:
        client.infer("bls_by_name", [name, _x(grpcclient, 2)])
    assert info.value.status() == "StatusCode.NOT_FOUND"  # the callee's error, passed on
    assert "nowhere" in str(info.value.message())


def test_custom_metrics_are_exported_on_the_metrics_port(server: ServerProcess) -> None:
    client = server.http_client(concurrency=16)
    for value in (0.5, 5.0, 50.0):
        client.infer("metered", [_x(httpclient, value)])
    text = httpx.get(server.metrics).text
    labels = 'model="metered",version="1"'
    assert "# TYPE metered_requests counter" in text
    assert f"metered_requests{{{labels}}} 3" in text
    assert f"metered_last_value{{{labels}}} 50" in text
    assert "# TYPE metered_x histogram" in text
    assert f'metered_x_bucket{{{labels},le="1"}} 1' in text
    assert f'metered_x_bucket{{{labels},le="10"}} 2' in text
    assert f'metered_x_bucket{{{labels},le="+Inf"}} 3' in text
    assert f"metered_x_sum{{{labels}}} 55.5" in text
