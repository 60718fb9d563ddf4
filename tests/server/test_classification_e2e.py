"""Triton's classification extension on the real server, driven with tritonclient HTTP and gRPC:
an output asked for with `class_count=k` comes back as its top k classes, "value:index[:label]",
labels from the output's `label_filename` (config.pbtxt) or `Tensor(..., labels=...)`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.repository.onnx_models import add_one, scale
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.e2e

# Y = X + 1 over [N, 4]; three labels for four classes: the fourth has none.
ADD_ONE = """
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt" } ]
"""
# No batching, no labels: [2, 3] read as six classes.
SCALE = """
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 2, 3 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2, 3 ] } ]
"""
# The ensemble's own labels name its output's classes (Triton reads the called model's).
ENSEMBLE = """
platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "names.txt" } ]
ensemble_scheduling { step [ { model_name: "add_one" model_version: -1
  input_map { key: "X" value: "IN" } output_map { key: "Y" value: "OUT" } } ] }
"""
ESCAPING = """
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "../labels.txt" } ]
"""
ANIMALS = """
import numpy as np
from fnserve import DynamicBatching, Tensor, model


@model(
    inputs=[Tensor("X", "INT32", [3])],
    outputs=[
        Tensor("SCORES", "INT32", [3], labels=["cat", "dog", "bird"]),
        Tensor("NAME", "BYTES", [1]),
    ],
    max_batch_size=4,
    dynamic_batching=DynamicBatching(),
)
def animals(X):
    return {"SCORES": X, "NAME": np.full((len(X), 1), b"animals", dtype=object)}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("classification_repository")
    for name, config, make in (
        ("add_one", ADD_ONE, add_one),
        ("scale", SCALE, lambda p: scale(p, 1.0)),
        ("escaping", ESCAPING, add_one),
    ):
        make(root / name / "1" / "model.onnx")
        (root / name / "config.pbtxt").write_text(config)
    (root / "add_one" / "labels.txt").write_text("zero\none\ntwo\n")
    (root / "ensemble" / "1").mkdir(parents=True)
    (root / "ensemble" / "config.pbtxt").write_text(ENSEMBLE)
    (root / "ensemble" / "names.txt").write_text("a\nb\n\nd")  # class 2: an empty label
    functions = tmp_path_factory.mktemp("functions")
    (functions / "animals.py").write_text(ANIMALS)
    with ServerProcess.start(root, functions) as running:
        yield running
        assert running.stop() == 0


def _grpc(server: ServerProcess) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(server.grpc)


def _infer(client: object, model: str, name: str, x: np.ndarray, outputs: dict[str, int]) -> Any:
    lib = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    tensor = lib.InferInput(name, list(x.shape), "FP32" if x.dtype == np.float32 else "INT32")
    tensor.set_data_from_numpy(x)
    wanted = [lib.InferRequestedOutput(o, class_count=k) for o, k in outputs.items()]
    return client.infer(model, [tensor], outputs=wanted)  # type: ignore[attr-defined]


@pytest.fixture(params=["http", "grpc"])
def client(request: pytest.FixtureRequest, server: ServerProcess) -> object:
    return server.http_client() if request.param == "http" else _grpc(server)


X = np.array([[0.5, 0.25, 1.5, 1.0], [3.0, 2.0, 1.0, 4.0]], np.float32)


def test_a_batched_output_comes_back_as_its_top_k_labelled_classes(client: object) -> None:
    result = _infer(client, "add_one", "X", X, {"Y": 2})
    assert result.as_numpy("Y").tolist() == [
        [b"2.500000:2:two", b"2.000000:3"],  # class 3 has no label
        [b"5.000000:3", b"4.000000:0:zero"],
    ]


def test_k_past_the_classes_gives_every_class(client: object) -> None:
    classes = _infer(client, "add_one", "X", X[:1], {"Y": 10}).as_numpy("Y")
    assert classes.shape == (1, 4)
    assert classes[0].tolist() == [b"2.500000:2:two", b"2.000000:3", b"1.500000:0:zero",
                                   b"1.250000:1:one"]  # fmt: skip


def test_an_unbatched_output_is_one_list_of_classes_without_labels(client: object) -> None:
    x = np.array([[1, 6, 2], [5, 3, 4]], np.float32)  # [2, 3]: six classes, read flat
    classes = _infer(client, "scale", "X", x, {"Y": 3}).as_numpy("Y")
    assert classes.tolist() == [b"6.000000:1", b"5.000000:3", b"4.000000:5"]


def test_an_at_model_labels_its_classes_and_other_outputs_stay_tensors(client: object) -> None:
    x = np.array([[1, 9, 5]], np.int32)
    result = _infer(client, "animals", "X", x, {"SCORES": 2, "NAME": 0})
    assert result.as_numpy("SCORES").tolist() == [[b"9:1:dog", b"5:2:bird"]]
    assert result.as_numpy("NAME").tolist() == [[b"animals"]]


def test_an_ensemble_output_is_classified_with_the_ensembles_labels(client: object) -> None:
    classes = _infer(client, "ensemble", "IN", X[1:], {"OUT": 4}).as_numpy("OUT")
    assert classes.tolist() == [[b"5.000000:3:d", b"4.000000:0:a", b"3.000000:1:b",
                                 b"2.000000:2"]]  # fmt: skip


def test_a_bytes_output_is_refused_as_triton_refuses_it(server: ServerProcess) -> None:
    x = np.array([[1, 2, 3]], np.int32)
    message = "class result not available for output due to unsupported type 'BYTES'"
    with pytest.raises(InferenceServerException) as http_error:
        _infer(server.http_client(), "animals", "X", x, {"NAME": 1})
    assert http_error.value.status() == "400"
    assert message in http_error.value.message()
    with pytest.raises(InferenceServerException) as grpc_error:
        _infer(_grpc(server), "animals", "X", x, {"NAME": 1})
    assert grpc_error.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert message in grpc_error.value.message()


def test_a_json_response_carries_the_classes_as_strings(server: ServerProcess) -> None:
    body = {
        "inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32", "data": X[0].tolist()}],
        "outputs": [{"name": "Y", "parameters": {"classification": 1}}],
    }
    answer = httpx.post(f"{server.http}/v2/models/add_one/infer", json=body)
    assert answer.status_code == 200
    (output,) = answer.json()["outputs"]
    assert output == {"name": "Y", "datatype": "BYTES", "shape": [1, 1], "data": ["2.500000:2:two"]}


def test_a_bad_count_is_refused(server: ServerProcess) -> None:
    body = {
        "inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32", "data": X[0].tolist()}],
        "outputs": [{"name": "Y", "parameters": {"classification": -1}}],
    }
    answer = httpx.post(f"{server.http}/v2/models/add_one/infer", json=body)
    assert answer.status_code == 400
    assert "'classification'" in answer.json()["error"]
    with pytest.raises(InferenceServerException) as grpc_error:
        _infer(_grpc(server), "add_one", "X", X, {"Y": -1})  # sent as an int64_param of -1
    assert grpc_error.value.status() == "StatusCode.INVALID_ARGUMENT"


def test_the_config_api_reports_label_filename(server: ServerProcess) -> None:
    (output,) = server.http_client().get_model_config("add_one")["output"]
    assert output["label_filename"] == "labels.txt"
    (output,) = _grpc(server).get_model_config("scale", as_json=True)["config"]["output"]
    assert output.get("label_filename", "") == ""  # proto3 JSON leaves out empty strings


def test_a_label_file_outside_the_model_directory_fails_the_load(server: ServerProcess) -> None:
    index = {e["name"]: e for e in server.http_client().get_model_repository_index()}
    assert index["escaping"]["state"] == "UNAVAILABLE"
    reason = index["escaping"]["reason"]
    assert "label file path '../labels.txt' for output 'Y'" in reason
    assert "is outside model directory" in reason
