"""Ensembles Triton refuses at load fail their load here too, naming the ensemble, the step and
what is wrong (in the repository index, the log and a repository `load`), while the other
models, good ensembles included, serve: driven with tritonclient over HTTP and gRPC."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.repository.onnx_models import add_one
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.e2e


def _ensemble(
    step: str = 'model_name: "add_one" model_version: -1',
    input_map: str = 'input_map { key: "X" value: "IN" }',
    output_map: str = 'output_map { key: "Y" value: "OUT" }',
    max_batch_size: int = 4,
    tensor_in: str = "data_type: TYPE_FP32 dims: [ 4 ]",
) -> str:
    return f"""
platform: "ensemble"
max_batch_size: {max_batch_size}
input [ {{ name: "IN" {tensor_in} }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }} ]
ensemble_scheduling {{ step [ {{ {step} {input_map} {output_map} }} ] }}
"""


# name -> (config.pbtxt, what its index reason must say)
BAD = {
    "no_such_model": (
        _ensemble(step='model_name: "nope" model_version: -1'),
        "step 0 ('nope'): model 'nope' is not available: unknown model 'nope'",
    ),
    "no_such_version": (
        _ensemble(step='model_name: "add_one" model_version: 7'),
        "step 0 ('add_one'): model 'add_one' version 7 is not available: unknown version 7",
    ),
    "failed_step": (
        _ensemble(step='model_name: "garbage" model_version: -1'),
        "step 0 ('garbage'): model 'garbage' is not available: model 'garbage' has no "
        "available versions (version 1 is FAILED: model directory",
    ),
    "bad_input_key": (
        _ensemble(input_map='input_map { key: "Q" value: "IN" }'),
        "step 0 ('add_one'): input_map key(s) ['Q'] are not inputs of model 'add_one' "
        "(its inputs: X)",
    ),
    "bad_output_key": (
        _ensemble(output_map='output_map { key: "Z" value: "OUT" }'),
        "step 0 ('add_one'): output_map key(s) ['Z'] are not outputs of model 'add_one'",
    ),
    "bad_datatype": (
        _ensemble(tensor_in="data_type: TYPE_INT32 dims: [ 4 ]"),
        "step 0 ('add_one'): ensemble tensor 'IN' is INT32 [-1, 4] as the ensemble's input "
        "but FP32 [-1, 4] as input 'X' of model 'add_one'",
    ),
    "bad_dims": (
        _ensemble(tensor_in="data_type: TYPE_FP32 dims: [ 5 ]"),
        "step 0 ('add_one'): ensemble tensor 'IN' is FP32 [-1, 5] as the ensemble's input "
        "but FP32 [-1, 4]",
    ),
    "batch_too_large": (
        _ensemble(max_batch_size=8),
        "step 0 ('add_one'): the ensemble allows max_batch_size 8, but model 'add_one' only 4",
    ),
}
PYTHON = """
import numpy as np
from fnserve import Tensor, ensemble, model

@model(inputs=[Tensor("X", "FP32", [1])], outputs=[Tensor("A", "FP32", [1])], max_batch_size=8)
def halve(X):
    return X / 2

@model(inputs=[Tensor("A", "INT64", [1])], outputs=[Tensor("B", "INT64", [1])], max_batch_size=8)
def count(A):
    return A + 1

@model(inputs=[Tensor("A", "FP32", [1])], outputs=[Tensor("B", "FP32", [1])], max_batch_size=8)
def plus(A):
    return A + 1

mismatched = ensemble("mismatched", steps=[halve, count])
matched = ensemble("matched", steps=[halve, plus])
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("repo")
    add_one(root / "add_one" / "1" / "model.onnx")
    (root / "garbage" / "1").mkdir(parents=True)
    (root / "garbage" / "1" / "model.onnx").write_bytes(b"\x08\x01not a model")
    for name, (config, _) in {"add_two": (_ensemble(), ""), **BAD}.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(config)
    functions = tmp_path_factory.mktemp("functions")
    (functions / "pipeline.py").write_text(PYTHON)
    with ServerProcess.start(root, functions) as running:
        yield running
        assert running.stop() == 0


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_ensemble_fails_its_load_with_the_reason(server: ServerProcess, name: str) -> None:
    expected = f"ensemble '{name}' {BAD[name][1]}"
    index = {e["name"]: e for e in server.http_client().get_model_repository_index()}
    assert index[name]["state"] == "UNAVAILABLE"
    assert expected in index[name]["reason"]
    grpc = grpcclient.InferenceServerClient(server.grpc)
    (row,) = [m for m in grpc.get_model_repository_index().models if m.name == name]
    assert (row.state, expected in row.reason) == ("UNAVAILABLE", True)
    assert expected in server.output()  # logged with the state change
    with pytest.raises(InferenceServerException, match="failed to load") as failed:
        server.http_client().load_model(name)  # a repository load fails the same way
    assert expected in failed.value.message()
    assert not server.http_client().is_model_ready(name)


def test_good_ensembles_and_their_steps_serve_beside_the_bad_ones(server: ServerProcess) -> None:
    http = server.http_client()
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    tensor = httpclient.InferInput("IN", [2, 4], "FP32")
    tensor.set_data_from_numpy(x)
    np.testing.assert_array_equal(http.infer("add_two", [tensor]).as_numpy("OUT"), x + 1)
    grpc = grpcclient.InferenceServerClient(server.grpc)
    half = grpcclient.InferInput("X", [1, 1], "FP32")
    half.set_data_from_numpy(np.array([[4.0]], np.float32))
    np.testing.assert_array_equal(grpc.infer("matched", [half]).as_numpy("B"), [[3.0]])
    states = {e["name"]: e["state"] for e in http.get_model_repository_index()}
    for name in ("add_one", "add_two", "matched", "halve", "count", "plus"):
        assert states[name] == "READY", name


def test_a_python_ensemble_whose_steps_disagree_on_a_datatype_fails(server: ServerProcess) -> None:
    index = {e["name"]: e for e in server.http_client().get_model_repository_index()}
    assert index["mismatched"]["state"] == "UNAVAILABLE"
    assert (
        "ensemble 'mismatched' step 1 ('count'): ensemble tensor 'A' is FP32 [-1, 1] as output "
        "'A' of model 'halve' but INT64 [-1, 1] as input 'A' of model 'count'"
    ) in index["mismatched"]["reason"]


def test_an_ensemble_loads_once_its_missing_step_arrives(tmp_path: Path) -> None:
    """Explicit mode: a step that was missing fails the ensemble's load; once its directory is
    there, loading the ensemble loads the step first, then the ensemble, which serves."""
    root = tmp_path
    (root / "add_two" / "1").mkdir(parents=True)
    (root / "add_two" / "config.pbtxt").write_text(_ensemble())
    args = (root, "--model-control-mode", "explicit", "--load-model", "add_two", "--allow-empty")
    with ServerProcess.start(*args) as server:
        http = server.http_client()
        (row,) = [e for e in http.get_model_repository_index() if e["name"] == "add_two"]
        assert row["state"] == "UNAVAILABLE"
        assert "model 'add_one' is not available: unknown model 'add_one'" in row["reason"]
        add_one(root / "add_one" / "1" / "model.onnx")
        http.load_model("add_two")
        assert http.is_model_ready("add_two")
        assert http.is_model_ready("add_one")
        # A new ensemble over a new model, neither known before its load: the step loads too.
        add_one(root / "add_one_b" / "1" / "model.onnx")
        (root / "fresh" / "1").mkdir(parents=True)
        (root / "fresh" / "config.pbtxt").write_text(
            _ensemble(step='model_name: "add_one_b" model_version: -1')
        )
        http.load_model("fresh")
        assert http.is_model_ready("fresh")
        assert http.is_model_ready("add_one_b")
        assert server.stop() == 0


def test_an_edit_that_breaks_an_ensemble_keeps_the_old_one_serving(tmp_path: Path) -> None:
    """A reload checks the new config against the steps too; failing, the previous version
    keeps serving (READY, the reason in its row), as for any change that fails to load."""
    add_one(tmp_path / "add_one" / "1" / "model.onnx")
    (tmp_path / "add_two" / "1").mkdir(parents=True)
    config = tmp_path / "add_two" / "config.pbtxt"
    config.write_text(_ensemble())
    with ServerProcess.start(tmp_path) as server:
        http = server.http_client()
        config.write_text(_ensemble(input_map='input_map { key: "Q" value: "IN" }') + "\n")
        with pytest.raises(InferenceServerException, match="input_map key\\(s\\) \\['Q'\\]"):
            http.load_model("add_two")
        (row,) = [e for e in http.get_model_repository_index() if e["name"] == "add_two"]
        assert row["state"] == "READY"
        assert "the previous version keeps serving: ensemble 'add_two' step 0" in row["reason"]
        tensor = httpclient.InferInput("IN", [1, 4], "FP32")
        tensor.set_data_from_numpy(np.zeros((1, 4), np.float32))
        np.testing.assert_array_equal(http.infer("add_two", [tensor]).as_numpy("OUT"), [[1] * 4])
        config.write_text(_ensemble())
        http.load_model("add_two")  # fixed: loads again
        assert server.stop() == 0
