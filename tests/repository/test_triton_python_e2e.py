"""A Triton python_backend model directory (`config.pbtxt` + `1/model.py`) served by the real
server, driven with tritonclient over HTTP and gRPC."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.backends.triton_python_models import ADD_SUB
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.e2e

CONFIG = """
name: "add_sub"
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
dynamic_batching { }
instance_group [ { kind: KIND_CPU } ]
"""
REFUSING = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        error = pb_utils.TritonError("refused: INPUT0 looks wrong")
        return [pb_utils.InferenceResponse(output_tensors=[], error=error) for _ in requests]
"""
BROKEN = """
class TritonPythonModel:
    def initialize(self, args):
        raise ValueError("no weights for " + args["model_name"])
"""


def _model(root: Path, name: str, source: str) -> None:
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(CONFIG.replace('"add_sub"', f'"{name}"'))
    (root / name / "1" / "model.py").write_text(source)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("model_repository")
    _model(root, "add_sub", ADD_SUB)
    _model(root, "refusing", REFUSING)
    _model(root, "broken", BROKEN)
    with ServerProcess.start(root) as running:
        yield running
        assert running.stop() == 0


def _pair(rows: int) -> tuple[np.ndarray, np.ndarray]:
    a = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)
    return a, np.full((rows, 4), 0.5, np.float32)


def test_add_sub_over_http(server: ServerProcess) -> None:
    client = server.http_client()
    assert client.is_model_ready("add_sub")
    config = client.get_model_config("add_sub")
    assert config["backend"] == "python"
    a, b = _pair(3)
    inputs = [httpclient.InferInput(n, [3, 4], "FP32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer("add_sub", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_add_sub_over_grpc(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc)
    a, b = _pair(2)
    inputs = [grpcclient.InferInput(n, [2, 4], "FP32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    outputs = [grpcclient.InferRequestedOutput("OUTPUT1")]
    result = client.infer("add_sub", inputs, outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert result.as_numpy("OUTPUT0") is None  # only what was asked for


def test_an_error_response_reaches_the_client(server: ServerProcess) -> None:
    a, b = _pair(1)
    inputs = [httpclient.InferInput(n, [1, 4], "FP32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    with pytest.raises(InferenceServerException, match="refused: INPUT0 looks wrong"):
        server.http_client().infer("refusing", inputs)


def test_a_failing_initialize_fails_only_its_model(server: ServerProcess) -> None:
    index = {e["name"]: e for e in server.http_client().get_model_repository_index()}
    assert index["add_sub"]["state"] == "READY"
    assert index["broken"]["state"] == "UNAVAILABLE"
    assert "initialize(args) failed" in index["broken"]["reason"]
    assert "no weights for broken" in index["broken"]["reason"]
