"""A Triton-layout repository of PyTorch models (TorchScript `model.pt`, torch.export
`model.pt2`), served by the real server and driven with tritonclient over HTTP and gRPC."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.serverproc import ServerProcess

pytestmark = pytest.mark.e2e
W = np.arange(6, dtype=np.float32).reshape(3, 2)
B = np.array([0.5, -1.0], dtype=np.float32)

AFFINE_CONFIG = """
name: "affine"
platform: "pytorch_libtorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 2 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
dynamic_batching { max_queue_delay_microseconds: 2000 }
parameters { key: "INTRA_OP_THREAD_COUNT" value: { string_value: "1" } }
"""
SUM_DIFF_CONFIG = """
platform: "pytorch_libtorch"
default_model_filename: "model.pt2"
max_batch_size: 8
input [
  { name: "A" data_type: TYPE_FP32 dims: [ 2 ] },
  { name: "B" data_type: TYPE_FP32 dims: [ 2 ] }
]
output [
  { name: "SUM" data_type: TYPE_FP32 dims: [ 2 ] },
  { name: "DIFF" data_type: TYPE_FP32 dims: [ 2 ] }
]
dynamic_batching { }
"""
BROKEN_CONFIG = """
platform: "pytorch_libtorch"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


class Affine(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.from_numpy(W.copy()))
        self.bias = torch.nn.Parameter(torch.from_numpy(B.copy()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight + self.bias


class SumDiff(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a + b, a - b


class Named(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"SUM": a + b, "PRODUCT": a * b}


class Rows(torch.nn.Module):
    """Needs rows of exactly 6 values, which nothing in a TorchScript file says."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(-1, 2, 3).sum(1)


def repository(root: Path) -> Path:
    """affine (TorchScript), sum_diff (torch.export) and broken (not a model) under `root`;
    and without config.pbtxt: affine_auto (TorchScript), named_auto (torch.export) and
    rows_auto (TorchScript whose shapes fnserve cannot guess)."""
    for name, config in (
        ("affine", AFFINE_CONFIG),
        ("sum_diff", SUM_DIFF_CONFIG),
        ("broken", BROKEN_CONFIG),
    ):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(config)
    traced = torch.jit.trace(Affine(), torch.ones(2, 3))  # type: ignore[no-untyped-call]
    traced.save(str(root / "affine" / "1" / "model.pt"))
    batch = torch.export.Dim("batch", min=1, max=8)
    program = torch.export.export(
        SumDiff(), (torch.ones(2, 2), torch.ones(2, 2)), dynamic_shapes=({0: batch}, {0: batch})
    )
    torch.export.save(program, str(root / "sum_diff" / "1" / "model.pt2"))
    (root / "broken" / "1" / "model.pt").write_bytes(b"not a TorchScript archive")
    for name in ("affine_auto", "named_auto", "rows_auto"):
        (root / name / "1").mkdir(parents=True)
    traced.save(str(root / "affine_auto" / "1" / "model.pt"))
    named = torch.export.export(
        Named(), (torch.ones(2, 2), torch.ones(2, 2)), dynamic_shapes=({0: batch}, {0: batch})
    )
    torch.export.save(named, str(root / "named_auto" / "1" / "model.pt2"))
    torch.jit.script(Rows()).save(str(root / "rows_auto" / "1" / "model.pt"))  # type: ignore[no-untyped-call]
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = repository(tmp_path_factory.mktemp("torch_repository"))
    with ServerProcess.start(root) as running:
        yield running
        assert running.stop() == 0


def test_config_and_metadata_say_pytorch(server: ServerProcess) -> None:
    client = server.http_client(concurrency=8)
    config = client.get_model_config("affine")
    assert config["platform"] == "pytorch_libtorch"
    assert config["backend"] == "pytorch"
    assert config["max_batch_size"] == 8
    metadata = client.get_model_metadata("affine")
    assert metadata["platform"] == "pytorch_libtorch"
    assert metadata["inputs"] == [{"name": "INPUT__0", "datatype": "FP32", "shape": [-1, 3]}]
    assert metadata["outputs"] == [{"name": "OUTPUT__0", "datatype": "FP32", "shape": [-1, 2]}]


def test_torchscript_over_http_equals_numpy(server: ServerProcess) -> None:
    client = server.http_client(concurrency=8)
    xs = [np.random.default_rng(i).standard_normal((1 + i % 4, 3)).astype(np.float32)
          for i in range(16)]  # fmt: skip
    pending = []
    for x in xs:  # concurrent requests: dynamic batching may merge them
        tensor = httpclient.InferInput("INPUT__0", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        pending.append(client.async_infer("affine", [tensor]))
    for x, request in zip(xs, pending, strict=True):
        np.testing.assert_allclose(request.get_result().as_numpy("OUTPUT__0"), x @ W + B, rtol=1e-6)


def test_exported_program_over_grpc_maps_the_tuple_in_order(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc)
    a = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)
    b = np.array([[0.5, 0.5], [1.0, -1.0], [2.0, 0.0]], np.float32)
    tensors = []
    for name, value in (("B", b), ("A", a)):  # sent in either order: the config's order counts
        tensor = grpcclient.InferInput(name, list(value.shape), "FP32")
        tensor.set_data_from_numpy(value)
        tensors.append(tensor)
    result = client.infer("sum_diff", tensors)
    np.testing.assert_array_equal(result.as_numpy("SUM"), a + b)
    np.testing.assert_array_equal(result.as_numpy("DIFF"), a - b)
    x = np.ones((2, 3), np.float32)
    tensor = grpcclient.InferInput("INPUT__0", [2, 3], "FP32")
    tensor.set_data_from_numpy(x)
    np.testing.assert_allclose(client.infer("affine", [tensor]).as_numpy("OUTPUT__0"), x @ W + B)


def test_an_unloadable_file_fails_only_its_model(server: ServerProcess) -> None:
    index = {e["name"]: e for e in server.http_client(concurrency=8).get_model_repository_index()}
    assert index["affine"]["state"] == "READY"
    assert index["sum_diff"]["state"] == "READY"
    assert index["broken"]["state"] == "UNAVAILABLE"
    assert "torch cannot load model.pt" in index["broken"]["reason"]


# configs completed from the model files (no config.pbtxt)


def test_a_torchscript_file_alone_serves_unbatched_with_forwards_names(
    server: ServerProcess,
) -> None:
    client = server.http_client(concurrency=8)
    metadata = client.get_model_metadata("affine_auto")
    assert metadata["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 3]}]
    assert metadata["outputs"] == [{"name": "OUTPUT__0", "datatype": "FP32", "shape": [-1, -1]}]
    config = client.get_model_config("affine_auto")
    assert config["platform"] == "pytorch_libtorch"
    assert config.get("max_batch_size", 0) == 0  # TorchScript marks no batch dimension
    x = np.random.default_rng(3).standard_normal((5, 3)).astype(np.float32)
    tensor = httpclient.InferInput("x", [5, 3], "FP32")
    tensor.set_data_from_numpy(x)
    result = client.infer("affine_auto", [tensor]).as_numpy("OUTPUT__0")
    np.testing.assert_allclose(result, x @ W + B, rtol=1e-6)


def test_an_exported_program_alone_serves_batched_with_its_dict_keys(
    server: ServerProcess,
) -> None:
    client = grpcclient.InferenceServerClient(server.grpc)
    config = client.get_model_config("named_auto", as_json=True)["config"]
    assert int(config["max_batch_size"]) == 8  # the exported bound of the batch dimension
    assert "dynamic_batching" in config
    metadata = client.get_model_metadata("named_auto", as_json=True)
    assert [(t["name"], t["datatype"], t["shape"]) for t in metadata["inputs"]] == [
        ("a", "FP32", ["-1", "2"]),
        ("b", "FP32", ["-1", "2"]),
    ]
    assert [t["name"] for t in metadata["outputs"]] == ["SUM", "PRODUCT"]
    a = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)
    b = np.array([[0.5, 0.5], [1.0, -1.0], [2.0, 0.0]], np.float32)
    tensors = []
    for name, value in (("a", a), ("b", b)):
        tensor = grpcclient.InferInput(name, list(value.shape), "FP32")
        tensor.set_data_from_numpy(value)
        tensors.append(tensor)
    result = client.infer("named_auto", tensors)
    np.testing.assert_array_equal(result.as_numpy("SUM"), a + b)
    np.testing.assert_array_equal(result.as_numpy("PRODUCT"), a * b)


def test_a_torchscript_file_it_cannot_describe_fails_with_the_remedy(
    server: ServerProcess,
) -> None:
    index = {e["name"]: e for e in server.http_client(concurrency=8).get_model_repository_index()}
    assert index["rows_auto"]["state"] == "UNAVAILABLE"
    reason = index["rows_auto"]["reason"]
    assert "TorchScript keeps no tensor shapes or dtypes" in reason
    assert "declare input and output in config.pbtxt" in reason
    assert index["affine_auto"]["state"] == "READY"
