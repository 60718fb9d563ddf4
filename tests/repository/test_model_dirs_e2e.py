"""A Triton-layout repository of ONNX models, served beside @model files, driven with
tritonclient over HTTP and gRPC."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from fnserve.backends.devices import cuda_device_count
from tests.repository.onnx_models import add_one, repository, scale
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.e2e
ECHO = """
import numpy as np
from fnserve import Tensor, model

@model(inputs=[Tensor("X", "FP32", [1])], outputs=[Tensor("Y", "FP32", [1])])
def echo(X: np.ndarray) -> np.ndarray:
    return X
"""

WRONG_DIMS = """
platform: "onnxruntime_onnx"
max_batch_size: 4
input [ { name: "X" data_type: TYPE_FP32 dims: [ 5 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


TWICE = """
import numpy as np
from fnserve import Tensor, model

@model(name="twice", version=1, inputs=[Tensor("X", "FP32", [1])],
       outputs=[Tensor("Y", "FP32", [1])])
def twice_v1(X: np.ndarray) -> np.ndarray:
    return X

@model(name="twice", version=2, inputs=[Tensor("X", "FP32", [1])],
       outputs=[Tensor("Y", "FP32", [1])])
def twice_v2(X: np.ndarray) -> np.ndarray:
    return X * 2
"""
# Triton's default, stated as many real configs do; with a specific version and KIND_AUTO.
TRANSACTIONAL = """
model_transaction_policy { decoupled: false }
version_policy { specific { versions: [ 1 ] } }
instance_group [ { count: 2 kind: KIND_AUTO } ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = repository(tmp_path_factory.mktemp("model_repository"))
    for name in ("transactional", "decoupled"):
        add_one(root / name / "1" / "model.onnx")
        add_one(root / name / "2" / "model.onnx")
        (root / name / "config.pbtxt").write_text(TRANSACTIONAL)
    (root / "decoupled" / "config.pbtxt").write_text(
        TRANSACTIONAL.replace("decoupled: false", "decoupled: true")
    )
    add_one(root / "wrong_dims" / "1" / "model.onnx")  # X is [-1, 4] in the file
    (root / "wrong_dims" / "config.pbtxt").write_text(WRONG_DIMS)
    scale(root / "unbatchable" / "1" / "model.onnx", 1.0)  # X is [2, 3] in the file
    (root / "unbatchable" / "config.pbtxt").write_text("max_batch_size: 4\n")
    add_one(root / "sixteen" / "1" / "model.onnx")  # the config sets only max_batch_size
    (root / "sixteen" / "config.pbtxt").write_text("max_batch_size: 16\n")
    functions = tmp_path_factory.mktemp("functions")
    (functions / "echo.py").write_text(ECHO)
    (functions / "twice.py").write_text(TWICE)
    with ServerProcess.start(root, functions) as running:
        yield running
        assert running.stop() == 0


def test_a_model_without_config_is_completed_from_its_file(server: ServerProcess) -> None:
    client = server.http_client()
    config = client.get_model_config("add_one")
    assert config["platform"] == "onnxruntime_onnx"
    assert config["backend"] == "onnxruntime"
    assert config["max_batch_size"] == 4  # a dynamic first dimension: Triton's default
    (declared,) = config["input"]
    assert (declared["name"], declared["data_type"], declared["dims"]) == ("X", "TYPE_FP32", [4])
    assert "dynamic_batching" in config
    metadata = client.get_model_metadata("add_one")
    assert metadata["platform"] == "onnxruntime_onnx"
    assert metadata["inputs"] == [{"name": "X", "datatype": "FP32", "shape": [-1, 4]}]
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    tensor = httpclient.InferInput("X", [3, 4], "FP32")
    tensor.set_data_from_numpy(x)
    np.testing.assert_array_equal(client.infer("add_one", [tensor]).as_numpy("Y"), x + 1)


def test_a_config_setting_only_max_batch_size_gets_the_dynamic_batcher(
    server: ServerProcess,
) -> None:
    """As Triton's backends complete it: the file batches and the config chose no scheduler."""
    config = server.http_client().get_model_config("sixteen")
    assert config["max_batch_size"] == 16
    assert "dynamic_batching" in config
    assert [(t["name"], t["dims"]) for t in config["input"]] == [("X", [4])]


def test_versions_follow_the_policy_over_grpc(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for version, factor in (("1", 1.0), ("2", 2.0), ("", 2.0)):
        tensor = grpcclient.InferInput("X", [2, 3], "FP32")
        tensor.set_data_from_numpy(x)
        result = client.infer("scale", [tensor], model_version=version)
        np.testing.assert_array_equal(result.as_numpy("Y"), x * factor)
    assert client.get_model_metadata("scale", as_json=True)["versions"] == ["1", "2"]


def test_bad_directories_fail_alone_with_their_reason(server: ServerProcess) -> None:
    index = {e["name"]: e for e in server.http_client().get_model_repository_index()}
    assert index["add_one"]["state"] == "READY"
    assert index["echo"]["state"] == "READY"
    assert index["sequenced"]["state"] == "UNAVAILABLE"
    assert "field 'sequence_batching' is not supported" in index["sequenced"]["reason"]
    assert index["garbage"]["state"] == "UNAVAILABLE"
    assert "garbage" in index["garbage"]["reason"]
    with pytest.raises(InferenceServerException, match="sequence_batching"):
        server.http_client().get_model_metadata("sequenced")


def test_decoupled_false_serves_and_decoupled_true_fails_with_the_reason(
    server: ServerProcess,
) -> None:
    client = server.http_client()
    assert client.is_model_ready("transactional")
    index = {e["name"]: e for e in client.get_model_repository_index()}
    assert index["decoupled"]["state"] == "UNAVAILABLE"
    reason = index["decoupled"]["reason"]
    assert "field 'model_transaction_policy.decoupled' is not supported" in reason
    assert "decoupled models" in reason
    grpc = grpcclient.InferenceServerClient(server.grpc)
    config = grpc.get_model_config("transactional").config
    assert not config.model_transaction_policy.decoupled


@pytest.mark.parametrize(
    ("model", "policy"),
    [
        ("add_one", {"latest": {"num_versions": 1}}),  # none configured: Triton's default
        ("scale", {"all": {}}),
        ("transactional", {"specific": {"versions": [1]}}),
        ("echo", {"latest": {"num_versions": 1}}),  # an @model: one version
        ("twice", {"all": {}}),  # an @model whose code defines two versions: both serve
    ],
)
def test_the_config_api_reports_the_version_policy(
    server: ServerProcess, model: str, policy: dict[str, dict[str, Any]]
) -> None:
    assert server.http_client().get_model_config(model)["version_policy"] == policy
    grpc = grpcclient.InferenceServerClient(server.grpc)
    reported = grpc.get_model_config(model).config.version_policy
    assert reported.WhichOneof("policy_choice") == next(iter(policy))
    assert reported.latest.num_versions == policy.get("latest", {}).get("num_versions", 0)
    assert list(reported.specific.versions) == policy.get("specific", {}).get("versions", [])


def test_kind_auto_is_reported_as_the_kind_it_ran_on(server: ServerProcess) -> None:
    """As Triton: KIND_AUTO resolves to KIND_GPU on every GPU, else KIND_CPU."""
    gpus = cuda_device_count()
    expected = ("KIND_GPU", list(range(gpus))) if gpus else ("KIND_CPU", [])
    for model in ("transactional", "add_one", "echo"):
        (group,) = server.http_client().get_model_config(model)["instance_group"]
        assert (group["kind"], group["gpus"]) == expected
    grpc = grpcclient.InferenceServerClient(server.grpc)
    (group,) = grpc.get_model_config("transactional", as_json=True)["config"]["instance_group"]
    assert (group["kind"], group["count"]) == (expected[0], 2)


def test_configs_the_onnx_file_contradicts_fail_alone(server: ServerProcess) -> None:
    """As in Triton: config dims the file's shapes contradict, and max_batch_size over a file
    whose first dims are fixed, fail their model's load; the others serve."""
    grpc = grpcclient.InferenceServerClient(server.grpc)
    index = {m.name: m for m in grpc.get_model_repository_index().models}
    assert index["add_one"].state == index["scale"].state == "READY"
    assert index["wrong_dims"].state == "UNAVAILABLE"
    reason = index["wrong_dims"].reason
    assert "model 'wrong_dims'" in reason
    assert (
        "input 'X' has dims [5] in the config, shape [-1, 5] with the batch dimension, "
        "but the model file's shape is [-1, 4]"
    ) in reason
    assert index["unbatchable"].state == "UNAVAILABLE"
    reason = index["unbatchable"].reason
    assert "model directory" in reason
    assert (
        "sets max_batch_size 4 but the model file does not support batching: tensor 'X' "
        "has shape [2, 3]"
    ) in reason
    with pytest.raises(InferenceServerException, match="has dims \\[5\\] in the config"):
        grpc.load_model("wrong_dims")


def test_wrong_input_shape_is_a_clear_400(server: ServerProcess) -> None:
    body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1, 5], "data": [0.0] * 5}]}
    answer = httpx.post(f"{server.http}/v2/models/add_one/infer", json=body)
    assert answer.status_code == 400
    assert "expected shape [-1, 4]" in answer.json()["error"]


def test_explicit_mode_loads_only_what_is_named(tmp_path: Path) -> None:
    root = repository(tmp_path / "repo")
    with ServerProcess.start(
        root, "--model-control-mode", "explicit", "--load-model", "add_one"
    ) as server:
        client = server.http_client()
        assert client.is_model_ready("add_one")
        assert not client.is_model_ready("scale")
        client.load_model("scale")
        assert client.is_model_ready("scale")
        assert server.stop() == 0


@pytest.mark.parametrize("mode", ["none", "poll"])
def test_none_and_poll_modes_refuse_loads_and_unloads_as_triton(tmp_path: Path, mode: str) -> None:
    root = repository(tmp_path / "repo")
    with ServerProcess.start(root, "--model-control-mode", mode) as server:
        refused = "explicit model load / unload is not allowed if polling is enabled"
        http, grpc = server.http_client(), grpcclient.InferenceServerClient(server.grpc)
        for call in (http.load_model, http.unload_model):
            with pytest.raises(InferenceServerException, match=refused) as caught:
                call("scale")
            assert caught.value.status() == "503"
        for call in (grpc.load_model, grpc.unload_model):
            with pytest.raises(InferenceServerException, match=refused) as caught:
                call("scale")
            assert caught.value.status() == "StatusCode.UNAVAILABLE"
        assert http.is_model_ready("scale")  # nothing was unloaded
        assert server.stop() == 0


def test_load_model_without_explicit_mode_is_refused(tmp_path: Path) -> None:
    root = repository(tmp_path / "repo")
    with pytest.raises(RuntimeError, match="--load-model requires --model-control-mode explicit"):
        ServerProcess.start(root, "--load-model", "add_one")


def test_a_changed_model_file_is_served_after_a_load(tmp_path: Path) -> None:
    root = repository(tmp_path / "repo")
    with ServerProcess.start(root) as server:
        client = grpcclient.InferenceServerClient(server.grpc)
        x = np.ones((2, 3), np.float32)

        def infer() -> np.ndarray:
            tensor = grpcclient.InferInput("X", [2, 3], "FP32")
            tensor.set_data_from_numpy(x)
            result: np.ndarray = client.infer("scale", [tensor], model_version="2").as_numpy("Y")
            return result

        np.testing.assert_array_equal(infer(), x * 2)
        scale(root / "scale" / "2" / "model.onnx", 3.0)
        client.load_model("scale")
        np.testing.assert_array_equal(infer(), x * 3)
        assert server.stop() == 0


def test_a_backend_fnserve_lacks_fails_only_that_model(tmp_path: Path) -> None:
    root = repository(tmp_path / "repo")
    (root / "planned" / "1").mkdir(parents=True)
    (root / "planned" / "1" / "model.plan").write_bytes(b"not used")
    (root / "planned" / "config.pbtxt").write_text(
        'platform: "tensorrt_plan"\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    )
    with ServerProcess.start(root) as server:
        index = {e["name"]: e for e in server.http_client().get_model_repository_index()}
        assert index["planned"]["state"] == "UNAVAILABLE"
        assert "backend 'tensorrt'" in index["planned"]["reason"]
        assert index["add_one"]["state"] == "READY"
        assert server.stop() == 0
