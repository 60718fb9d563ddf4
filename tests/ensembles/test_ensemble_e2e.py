"""Ensembles served by the real server: Triton's config.pbtxt ensemble over ONNX models and a
Python `ensemble(...)` over @model steps, called with tritonclient over HTTP and gRPC."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.repository.onnx_models import add_one
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.e2e
ADD_TWO = """
platform: "ensemble"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling {
  step [
    { model_name: "add_one" model_version: -1
      input_map { key: "X" value: "IN" } output_map { key: "Y" value: "mid" } },
    { model_name: "add_one" model_version: -1
      input_map { key: "X" value: "mid" } output_map { key: "Y" value: "OUT" } }
  ]
}
"""
PIPELINE = """
import numpy as np
from fnserve import DynamicBatching, Tensor, ensemble, model

@model(inputs=[Tensor("TEXT", "BYTES", [1])], outputs=[Tensor("LEN", "FP32", [1])],
       max_batch_size=16, dynamic_batching=DynamicBatching())
def measure(TEXT):
    return np.array([[float(len(t[0]))] for t in TEXT], np.float32)

@model(inputs=[Tensor("LEN", "FP32", [1])], outputs=[Tensor("SCORE", "FP32", [1])],
       max_batch_size=16, dynamic_batching=DynamicBatching())
def score(LEN):
    return LEN * 10

pipeline = ensemble("pipeline", steps=[measure, score])
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("repo")
    add_one(root / "add_one" / "1" / "model.onnx")
    (root / "add_two" / "1").mkdir(parents=True)
    (root / "add_two" / "config.pbtxt").write_text(ADD_TWO)
    functions = tmp_path_factory.mktemp("functions")
    (functions / "pipeline.py").write_text(PIPELINE)
    with ServerProcess.start(root, functions) as running:
        yield running
        assert running.stop() == 0


def test_config_pbtxt_ensemble_over_onnx_steps(server: ServerProcess) -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    http = httpclient.InferenceServerClient(server.http.removeprefix("http://"))
    tensor = httpclient.InferInput("IN", [2, 4], "FP32")
    tensor.set_data_from_numpy(x)
    np.testing.assert_array_equal(http.infer("add_two", [tensor]).as_numpy("OUT"), x + 2)
    grpc = grpcclient.InferenceServerClient(server.grpc)
    gtensor = grpcclient.InferInput("IN", [2, 4], "FP32")
    gtensor.set_data_from_numpy(x)
    np.testing.assert_array_equal(grpc.infer("add_two", [gtensor]).as_numpy("OUT"), x + 2)
    assert http.get_model_metadata("add_two")["platform"] == "ensemble"
    config = http.get_model_config("add_two")
    assert [s["model_name"] for s in config["ensemble_scheduling"]["step"]] == [
        "add_one",
        "add_one",
    ]
    assert (config["platform"], config["backend"]) == ("ensemble", "")  # as Triton shows it
    assert config["instance_group"] == []
    stats = http.get_inference_statistics("add_one")["model_stats"][0]
    assert stats["inference_count"] >= 8  # two steps x two requests x two rows


def test_python_ensemble_with_bytes(server: ServerProcess) -> None:
    http = httpclient.InferenceServerClient(server.http.removeprefix("http://"))
    text = np.array([[b"abc"], [b"hello"]], dtype=object)
    tensor = httpclient.InferInput("TEXT", [2, 1], "BYTES")
    tensor.set_data_from_numpy(text)
    result = http.infer("pipeline", [tensor]).as_numpy("SCORE")
    np.testing.assert_array_equal(result, np.array([[30.0], [50.0]], np.float32))
    index = {e["name"]: e["state"] for e in http.get_model_repository_index()}
    assert index["pipeline"] == index["measure"] == index["score"] == "READY"


def _metric(server: ServerProcess, name: str, model: str) -> float:
    for line in httpx.get(server.metrics).text.splitlines():
        if line.startswith(f'{name}{{model="{model}",version="1"}} '):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} for {model}")


def test_an_ensemble_counts_its_requests_and_executions(tmp_path: Path) -> None:
    """As Triton's ensemble scheduler: each successful request is one execution of the
    ensemble over its batch size (a request's rows; 1 without batching)."""
    add_one(tmp_path / "repo" / "add_one" / "1" / "model.onnx")
    (tmp_path / "repo" / "add_two" / "1").mkdir(parents=True)
    (tmp_path / "repo" / "add_two" / "config.pbtxt").write_text(ADD_TWO)
    (tmp_path / "functions").mkdir()
    (tmp_path / "functions" / "pipeline.py").write_text(PIPELINE)
    with ServerProcess.start(tmp_path / "repo", tmp_path / "functions") as server:
        http = httpclient.InferenceServerClient(server.http.removeprefix("http://"))
        grpc = grpcclient.InferenceServerClient(server.grpc)
        for rows in (2, 3):
            tensor = httpclient.InferInput("IN", [rows, 4], "FP32")
            tensor.set_data_from_numpy(np.zeros((rows, 4), np.float32))
            http.infer("add_two", [tensor])
        text = grpcclient.InferInput("TEXT", [4, 1], "BYTES")
        text.set_data_from_numpy(np.array([[b"a"]] * 4, dtype=object))
        grpc.infer("pipeline", [text])
        bad = httpclient.InferInput("IN", [1, 5], "FP32")  # refused: not counted
        bad.set_data_from_numpy(np.zeros((1, 5), np.float32))
        with pytest.raises(InferenceServerException):
            http.infer("add_two", [bad])
        for model, requests, rows in (("add_two", 2, 5), ("pipeline", 1, 4)):
            stats = grpc.get_inference_statistics(model, as_json=True)["model_stats"][0]
            assert stats["inference_stats"]["success"]["count"] == str(requests)
            assert (stats["inference_count"], stats["execution_count"]) == (
                str(rows),
                str(requests),
            )
            assert _metric(server, "nv_inference_count", model) == rows
            assert _metric(server, "nv_inference_exec_count", model) == requests
        batches = http.get_inference_statistics("add_two")["model_stats"][0]["batch_stats"]
        assert sorted((b["batch_size"], b["compute_infer"]["count"]) for b in batches) == [
            (2, 1),
            (3, 1),
        ]
        assert server.stop() == 0


def test_a_missing_step_model_fails_the_ensembles_load_naming_it(tmp_path: Path) -> None:
    """As in Triton: refused at load, not READY and failing every request (more such
    ensembles in test_ensemble_checks_e2e.py)."""
    (tmp_path / "add_two" / "1").mkdir(parents=True)
    (tmp_path / "add_two" / "config.pbtxt").write_text(ADD_TWO)
    with ServerProcess.start(tmp_path) as server:
        http = httpclient.InferenceServerClient(server.http.removeprefix("http://"))
        (row,) = http.get_model_repository_index()
        assert row["state"] == "UNAVAILABLE"
        assert "step 0 ('add_one'): model 'add_one' is not available" in row["reason"]
        tensor = httpclient.InferInput("IN", [1, 4], "FP32")
        tensor.set_data_from_numpy(np.zeros((1, 4), np.float32))
        with pytest.raises(Exception, match="model 'add_one' is not available"):
            http.infer("add_two", [tensor])
        assert server.stop() == 0


def test_explicit_loads_bring_an_ensembles_steps_and_unload_dependents_takes_them(
    tmp_path: Path,
) -> None:
    """As in Triton: loading an ensemble loads its step models; unloading it with
    `unload_dependents` unloads them too, except those another serving ensemble still uses."""
    add_one(tmp_path / "add_one" / "1" / "model.onnx")
    for name in ("add_two", "add_two_again"):
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "config.pbtxt").write_text(ADD_TWO)
    args = (tmp_path, "--model-control-mode", "explicit", "--load-model", "add_two")
    with ServerProcess.start(*args) as server:
        http = httpclient.InferenceServerClient(server.http.removeprefix("http://"))
        grpc = grpcclient.InferenceServerClient(server.grpc)

        def ready() -> set[str]:
            return {e["name"] for e in http.get_model_repository_index() if e["state"] == "READY"}

        assert "model_repository(unload_dependents)" in http.get_server_metadata()["extensions"]
        assert ready() == {"add_two", "add_one"}  # the step came with its ensemble
        tensor = httpclient.InferInput("IN", [1, 4], "FP32")
        tensor.set_data_from_numpy(np.zeros((1, 4), np.float32))
        np.testing.assert_array_equal(http.infer("add_two", [tensor]).as_numpy("OUT"), [[2] * 4])

        http.load_model("add_two_again")
        http.unload_model("add_two", unload_dependents=True)
        assert ready() == {"add_two_again", "add_one"}  # add_one: add_two_again still uses it
        grpc.unload_model("add_two_again", unload_dependents=True)
        assert ready() == set()  # the last ensemble using it took it along

        http.load_model("add_two")  # brings add_one back
        http.unload_model("add_two")  # without unload_dependents: the step stays
        assert ready() == {"add_one"}
        assert server.stop() == 0
