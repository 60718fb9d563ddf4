"""Triton's `reshape`, served by the real server and driven with tritonclient: requests and
responses carry `dims`, the model takes and gives `reshape`."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.repository.onnx_models import channel_sums, row_double
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.e2e

# As Triton's densenet_onnx example declares its model: no batching, a leading 1 reshaped away.
CHANNEL_SUMS = """
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, 4, 4 ]
          reshape { shape: [ 1, 3, 4, 4 ] } } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 3 ] reshape { shape: [ 1, 3, 1, 1 ] } } ]
"""
# The same elements in another shape: the load says so.
BAD_RESHAPE = """
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 3, 4, 4 ] reshape { shape: [ 1, 3, 4, 5 ] } } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 3 ] reshape { shape: [ 1, 3, 1, 1 ] } } ]
"""
# A batching @model taking one value per row: dims [1] on the wire, [] for the model.
ROWS = """
import numpy as np
from fnserve import DynamicBatching, Tensor, model


@model(
    inputs=[Tensor("X", "FP32", [1], reshape=[])],
    outputs=[Tensor("Y", "FP32", [2], reshape=[2, 1])],
    max_batch_size=8,
    dynamic_batching=DynamicBatching(),
)
def rows(X):
    assert X.ndim == 1, X.shape  # the model sees one value per row
    return {"Y": np.stack([X, -X], axis=1)[:, :, None]}  # [rows, 2, 1]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("reshape_repository")
    for name, config in (("channel_sums", CHANNEL_SUMS), ("bad_reshape", BAD_RESHAPE)):
        channel_sums(root / name / "1" / "model.onnx")
        (root / name / "config.pbtxt").write_text(config)
    row_double(root / "row_double" / "1" / "model.onnx")  # no config: completed
    functions = tmp_path_factory.mktemp("functions")
    (functions / "rows.py").write_text(ROWS)
    with ServerProcess.start(root, functions) as running:
        yield running
        assert running.stop() == 0


def test_a_densenet_style_reshape_serves_and_is_reported(server: ServerProcess) -> None:
    client = server.http_client()
    x = np.arange(48, dtype=np.float32).reshape(3, 4, 4)
    tensor = httpclient.InferInput("X", [3, 4, 4], "FP32")
    tensor.set_data_from_numpy(x)
    y = client.infer("channel_sums", [tensor]).as_numpy("Y")
    np.testing.assert_array_equal(y, x.sum(axis=(1, 2)))  # shape [3], as declared by dims
    config = client.get_model_config("channel_sums")
    (declared,) = config["input"]
    assert declared["reshape"] == {"shape": [1, 3, 4, 4]}
    assert declared["format"] == "FORMAT_NCHW"
    assert client.get_model_metadata("channel_sums")["outputs"] == [
        {"name": "Y", "datatype": "FP32", "shape": [3]}
    ]


def test_a_reshape_of_other_elements_fails_the_load(server: ServerProcess) -> None:
    index = {e["name"]: e for e in server.http_client().get_model_repository_index()}
    assert index["bad_reshape"]["state"] == "UNAVAILABLE"
    assert (
        "reshape [1, 3, 4, 5] does not hold the same elements as dims [3, 4, 4]"
        in (index["bad_reshape"]["reason"])
    )


def test_a_batch_only_tensor_completes_as_dims_1_reshaped_away(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc)
    config = client.get_model_config("row_double", as_json=True)["config"]
    assert int(config["max_batch_size"]) == 4
    (declared,) = config["input"]
    assert declared["dims"] == ["1"]
    assert "reshape" in declared
    x = np.array([[1], [2], [3]], np.int64)
    tensor = grpcclient.InferInput("X", [3, 1], "INT64")
    tensor.set_data_from_numpy(x)
    np.testing.assert_array_equal(client.infer("row_double", [tensor]).as_numpy("Y"), x * 2)


def test_an_at_model_declares_reshape_too(server: ServerProcess) -> None:
    client = server.http_client()
    pending = []
    for value in (1.0, 2.0, 3.0):  # batched together: the model gets [rows], gives [rows, 2, 1]
        tensor = httpclient.InferInput("X", [1, 1], "FP32")
        tensor.set_data_from_numpy(np.array([[value]], np.float32))
        pending.append((value, client.async_infer("rows", [tensor])))
    for value, request in pending:
        assert request.get_result().as_numpy("Y").tolist() == [[value, -value]]
