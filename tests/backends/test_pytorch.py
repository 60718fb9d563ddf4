"""The pytorch backend on real TorchScript and torch.export files, built here (no mocks)."""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fnserve.backends.base import ModelFileSpec
from fnserve.backends.pytorch import PyTorchBackend, PyTorchBackendFactory
from fnserve.backends.registry import factory_for
from fnserve.config.model_config import DynamicBatching, InstanceGroup, ModelConfig, Tensor
from fnserve.errors import ModelExecutionError, RepositoryError
from fnserve.model import InstanceContext
from fnserve.runtime import Runtime
from fnserve.scheduling.runner import BatchRunner
from fnserve.types import InferInput, InferRequest

CPU = InstanceContext("m", 1, 0, "KIND_CPU", "cpu", {})
W = np.arange(6, dtype=np.float32).reshape(3, 2)
B = np.array([0.5, -1.0], dtype=np.float32)


class Affine(torch.nn.Module):
    """y = x @ W + b with fixed weights; records whether autograd was on."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.from_numpy(W.copy()))
        self.bias = torch.nn.Parameter(torch.from_numpy(B.copy()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight + self.bias


class SumDiff(torch.nn.Module):
    """(a + b, a - b) as a tuple."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a + b, a - b


class Named(torch.nn.Module):
    """{"DOUBLE": 2x, "NEG": -x} as a dict, with an extra entry the config may leave out."""

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"NEG": -x, "DOUBLE": x * 2, "EXTRA": x}


class GradState(torch.nn.Module):
    """Reports whether autograd was on (TorchScript evaluates it per call), and drops out."""

    def __init__(self) -> None:
        super().__init__()
        self.dropout = torch.nn.Dropout(p=0.99)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.tensor([torch.is_grad_enabled()]), self.dropout(x)


def _script(module: torch.nn.Module, path: Path) -> Path:
    torch.jit.script(module).save(str(path))  # type: ignore[no-untyped-call]
    return path


def _export(module: torch.nn.Module, args: tuple[torch.Tensor, ...], path: Path) -> Path:
    batch = torch.export.Dim("batch", min=1, max=64)
    dynamic = tuple({0: batch} for _ in args)
    torch.export.save(torch.export.export(module, args, dynamic_shapes=dynamic), str(path))
    return path


@pytest.fixture
def affine_pt(tmp_path: Path) -> Path:
    return _script(Affine(), tmp_path / "affine.pt")


@pytest.fixture
def affine_pt2(tmp_path: Path) -> Path:
    return _export(Affine(), (torch.ones(2, 3),), tmp_path / "affine.pt2")


def _config(
    name: str,
    inputs: list[Tensor],
    outputs: list[Tensor],
    max_batch_size: int = 8,
    **kwargs: Any,
) -> ModelConfig:
    return ModelConfig(
        name=name,
        inputs=inputs,
        outputs=outputs,
        max_batch_size=max_batch_size,
        backend="pytorch",
        instance_group=(InstanceGroup(kind="KIND_CPU"),),
        **kwargs,
    )


def _affine_config(**kwargs: Any) -> ModelConfig:
    return _config("affine", [Tensor("X", "FP32", [3])], [Tensor("Y", "FP32", [2])], **kwargs)


def _sum_diff_config(names: tuple[str, str, str, str] = ("A", "B", "SUM", "DIFF")) -> ModelConfig:
    a, b, total, diff = names
    return _config(
        "sum_diff",
        [Tensor(a, "FP32", [2]), Tensor(b, "FP32", [2])],
        [Tensor(total, "FP32", [2]), Tensor(diff, "FP32", [2])],
    )


def _backend(config: ModelConfig, path: Path, context: InstanceContext = CPU) -> Any:
    return factory_for(ModelFileSpec(config, path)).create(context)


def _x(rows: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, 3)).astype(np.float32)


# the backend


def test_the_registry_builds_a_pytorch_backend(affine_pt: Path) -> None:
    factory = factory_for(ModelFileSpec(_affine_config(), affine_pt))
    assert isinstance(factory, PyTorchBackendFactory)
    assert (factory.name, factory.process_isolation) == ("pytorch", False)
    assert factory.spec.location() == str(affine_pt)
    backend = factory.create(CPU)
    assert isinstance(backend, PyTorchBackend)
    assert backend.is_async is False


@pytest.mark.parametrize("fixture", ["affine_pt", "affine_pt2"])
def test_affine_equals_numpy(fixture: str, request: pytest.FixtureRequest) -> None:
    path: Path = request.getfixturevalue(fixture)
    config = _affine_config()
    runner = BatchRunner(config, _backend(config, path))
    x = _x(5)
    out = runner.check_outputs(runner.call({"X": x}, [{}]), rows=5)
    assert list(out) == ["Y"]
    np.testing.assert_allclose(out["Y"], x @ W + B, rtol=1e-6)
    assert out["Y"].dtype == np.float32


def test_the_module_is_on_the_cpu_in_eval_mode(affine_pt: Path, affine_pt2: Path) -> None:
    scripted = _backend(_affine_config(), affine_pt)
    assert scripted.device == torch.device("cpu")
    assert not scripted.module.training
    assert {p.device.type for p in scripted.module.parameters()} == {"cpu"}
    exported = _backend(_affine_config(), affine_pt2)
    assert {p.device.type for p in exported.module.parameters()} == {"cpu"}


def test_it_runs_without_grad_in_eval_mode(tmp_path: Path) -> None:
    path = _script(GradState(), tmp_path / "grad.pt")  # saved in train mode: eval() at load
    config = _config(
        "grad",
        [Tensor("X", "FP32", [3])],
        [Tensor("GRAD", "BOOL", [1]), Tensor("Y", "FP32", [3])],
        max_batch_size=0,
    )
    out = _backend(config, path).execute({"X": np.ones((4, 3), np.float32)}, [{}])
    assert out["GRAD"].tolist() == [False]
    np.testing.assert_array_equal(out["Y"], np.ones((4, 3), np.float32))  # dropout is off


@pytest.mark.parametrize("fixture", ["affine_pt", "affine_pt2"])
def test_the_module_is_called_under_inference_mode(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    path: Path = request.getfixturevalue(fixture)
    backend = _backend(_affine_config(), path)
    module, seen = backend.module, []

    def spy(*args: torch.Tensor) -> Any:  # an exported graph fixes such flags at export
        seen.append((torch.is_inference_mode_enabled(), torch.is_grad_enabled()))
        result = module(*args)
        seen.append((result.is_inference(), result.requires_grad))
        return result

    backend._module = spy
    backend.execute({"X": _x(2)}, [{}])
    assert seen == [(True, False), (True, False)]


@pytest.mark.parametrize("export", [False, True])
def test_a_tuple_maps_to_the_outputs_in_order(tmp_path: Path, export: bool) -> None:
    a = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    b = np.array([[0.5, 0.5], [1.0, -1.0]], np.float32)
    path = (
        _export(SumDiff(), (torch.ones(2, 2), torch.ones(2, 2)), tmp_path / "sd.pt2")
        if export
        else _script(SumDiff(), tmp_path / "sd.pt")
    )
    out = _backend(_sum_diff_config(), path).execute({"B": b, "A": a}, [{}])
    assert list(out) == ["SUM", "DIFF"]
    np.testing.assert_array_equal(out["SUM"], a + b)
    np.testing.assert_array_equal(out["DIFF"], a - b)  # A came first: the config's order


def test_tritons_indexed_names_follow_the_config_order(tmp_path: Path) -> None:
    path = _script(SumDiff(), tmp_path / "sd.pt")
    config = _sum_diff_config(("INPUT__0", "INPUT__1", "OUTPUT__0", "OUTPUT__1"))
    a = np.full((1, 2), 5.0, np.float32)
    b = np.full((1, 2), 2.0, np.float32)
    out = _backend(config, path).execute({"INPUT__1": b, "INPUT__0": a}, [{}])
    np.testing.assert_array_equal(out["OUTPUT__0"], a + b)
    np.testing.assert_array_equal(out["OUTPUT__1"], a - b)


@pytest.mark.parametrize("export", [False, True])
def test_a_dict_is_read_by_output_name(tmp_path: Path, export: bool) -> None:
    path = (
        _export(Named(), (torch.ones(2, 3),), tmp_path / "named.pt2")
        if export
        else _script(Named(), tmp_path / "named.pt")
    )
    config = _config(
        "named",
        [Tensor("X", "FP32", [3])],
        [Tensor("DOUBLE", "FP32", [3]), Tensor("NEG", "FP32", [3])],
    )
    x = _x(2)
    out = _backend(config, path).execute({"X": x}, [{}])
    assert list(out) == ["DOUBLE", "NEG"]  # only the declared outputs
    np.testing.assert_array_equal(out["DOUBLE"], x * 2)
    np.testing.assert_array_equal(out["NEG"], -x)


def test_outputs_that_do_not_fit_the_config_are_one_model_execution_error(tmp_path: Path) -> None:
    named = _script(Named(), tmp_path / "named.pt")
    config = _config("named", [Tensor("X", "FP32", [3])], [Tensor("MISSING", "FP32", [3])])
    runner = BatchRunner(config, _backend(config, named))
    with pytest.raises(ModelExecutionError, match="dict without output.*MISSING"):
        runner.call({"X": _x(1)}, [{}])
    sum_diff = _script(SumDiff(), tmp_path / "sd.pt")
    config = _config(
        "sd", [Tensor("A", "FP32", [2]), Tensor("B", "FP32", [2])], [Tensor("S", "FP32", [2])]
    )
    runner = BatchRunner(config, _backend(config, sum_diff))
    x = np.ones((1, 2), np.float32)
    with pytest.raises(ModelExecutionError, match="returned 2 values.*declares 1 output"):
        runner.call({"A": x, "B": x}, [{}])


def test_a_wrong_input_dtype_fails_in_the_model_once_wrapped(affine_pt: Path) -> None:
    config = _affine_config()
    runner = BatchRunner(config, _backend(config, affine_pt))
    with pytest.raises(ModelExecutionError) as info:
        runner.call({"X": np.zeros((1, 3), dtype=np.float64)}, [{}])  # nothing is cast
    assert str(info.value).startswith("model 'affine' raised")
    assert str(info.value).count("model '") == 1


def test_writable_inputs_are_shared_and_read_only_ones_copied(tmp_path: Path) -> None:
    class AddInPlace(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.add_(1)

    path = _script(AddInPlace(), tmp_path / "inplace.pt")
    config = _config("inplace", [Tensor("X", "FP32", [2])], [Tensor("Y", "FP32", [2])])
    backend = _backend(config, path)
    writable = np.zeros((1, 2), np.float32)
    out = backend.execute({"X": writable}, [{}])
    assert writable.tolist() == [[1.0, 1.0]]  # zero-copy: the model saw the very buffer
    np.testing.assert_array_equal(out["Y"], [[1.0, 1.0]])
    frozen = np.frombuffer(bytes(8), dtype=np.float32).reshape(1, 2)  # a request's buffer
    out = backend.execute({"X": frozen}, [{}])
    assert frozen.tolist() == [[0.0, 0.0]]
    np.testing.assert_array_equal(out["Y"], [[1.0, 1.0]])
    reversed_rows = np.arange(4, dtype=np.float32).reshape(2, 2)[::-1]  # negative strides
    np.testing.assert_array_equal(
        backend.execute({"X": reversed_rows}, [{}])["Y"], [[3.0, 4.0], [1.0, 2.0]]
    )


def test_bf16_travels_as_its_bits(tmp_path: Path) -> None:
    class Double(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    path = _script(Double(), tmp_path / "double.pt")
    config = _config("bf16", [Tensor("X", "BF16", [2])], [Tensor("Y", "BF16", [2])])
    x = torch.tensor([[1.5, -3.0]], dtype=torch.bfloat16)
    bits = x.view(torch.int16).numpy().view(np.uint16)
    out = _backend(config, path).execute({"X": bits}, [{}])["Y"]
    assert out.dtype == np.uint16
    back = torch.from_numpy(out.view(np.int16)).view(torch.bfloat16)
    assert back.tolist() == [[3.0, -6.0]]


def test_unload_drops_the_module_and_aexecute_is_not_used(affine_pt: Path) -> None:
    backend = _backend(_affine_config(), affine_pt)
    assert backend.module is not None
    with pytest.raises(NotImplementedError):
        asyncio.run(backend.aexecute({}, []))
    backend.unload()
    assert backend.module is None


# threads and devices


def test_the_thread_count_parameter_sets_torchs_pool(affine_pt: Path) -> None:
    before = torch.get_num_threads()
    try:
        _backend(_affine_config(), affine_pt)
        assert torch.get_num_threads() == before  # absent: torch's setting stays
        parameters = {"INTRA_OP_THREAD_COUNT": "1"}
        context = InstanceContext("affine", 1, 0, "KIND_CPU", "cpu", parameters)
        _backend(_affine_config(parameters=parameters), affine_pt, context)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_a_bad_thread_count_fails_the_load(affine_pt: Path) -> None:
    context = InstanceContext("affine", 1, 0, "KIND_CPU", "cpu", {"INTRA_OP_THREAD_COUNT": "x"})
    with pytest.raises(RepositoryError, match="INTRA_OP_THREAD_COUNT must be an integer >= 0"):
        _backend(_affine_config(), affine_pt, context)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this torch has CUDA")
def test_kind_gpu_without_cuda_fails_the_load(affine_pt: Path) -> None:
    gpu = InstanceContext("affine", 1, 0, "KIND_GPU", "cuda:0", {})
    with pytest.raises(RepositoryError) as info:
        _backend(_affine_config(), affine_pt, gpu)
    message = str(info.value)
    assert "model 'affine'" in message
    assert "KIND_GPU" in message
    assert "no CUDA device" in message


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="this torch has no CUDA")
@pytest.mark.parametrize("fixture", ["affine_pt", "affine_pt2"])
def test_kind_gpu_runs_on_cuda(fixture: str, request: pytest.FixtureRequest) -> None:
    path: Path = request.getfixturevalue(fixture)
    gpu = InstanceContext("affine", 1, 0, "KIND_GPU", "cuda:0", {})
    backend = _backend(_affine_config(), path, gpu)
    assert backend.device == torch.device("cuda:0")
    assert {p.device.type for p in backend.module.parameters()} == {"cuda"}
    x = _x(4)
    out = backend.execute({"X": x}, [{}])["Y"]
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, x @ W + B, rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="this torch has no CUDA")
def test_a_cuda_device_that_does_not_exist_fails_the_load(affine_pt: Path) -> None:
    device = f"cuda:{torch.cuda.device_count()}"
    gpu = InstanceContext("affine", 1, 0, "KIND_GPU", device, {})
    with pytest.raises(RepositoryError, match=f"device {device} does not exist"):
        _backend(_affine_config(), affine_pt, gpu)


# load failures


@pytest.mark.parametrize("name", ["model.pt", "model.pt2"])
def test_a_corrupt_model_file_fails_naming_the_file(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(os.urandom(512))
    with pytest.raises(RepositoryError) as info:
        _backend(_affine_config(), path)
    assert str(path) in str(info.value)
    assert "model 'affine'" in str(info.value)
    assert f"torch cannot load {name}" in str(info.value)


def test_a_torchscript_file_named_pt2_is_refused_clearly(affine_pt: Path, tmp_path: Path) -> None:
    path = tmp_path / "model.pt2"
    path.write_bytes(affine_pt.read_bytes())
    with pytest.raises(RepositoryError, match=r"cannot load model.pt2 as a torch.export program"):
        _backend(_affine_config(), path)


def test_a_missing_model_file_fails_naming_it(tmp_path: Path) -> None:
    with pytest.raises(RepositoryError, match="model file nowhere.pt does not exist"):
        _backend(_affine_config(), tmp_path / "nowhere.pt")


@pytest.mark.parametrize("kind", ["input", "output"])
def test_a_bytes_tensor_fails_the_load_naming_it(affine_pt: Path, kind: str) -> None:
    text = [Tensor("TEXT", "BYTES", [1])]
    config = (
        _config("t", text, [Tensor("Y", "FP32", [2])])
        if kind == "input"
        else _config("t", [Tensor("X", "FP32", [3])], text)
    )
    with pytest.raises(RepositoryError, match=f"{kind} 'TEXT' is BYTES.*does not serve"):
        _backend(config, affine_pt)


def test_without_torch_the_install_line_is_given(
    affine_pt: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now fails
    monkeypatch.delitem(sys.modules, "fnserve.backends.pytorch")
    with pytest.raises(ImportError, match=r"pip install 'fnserve\[torch\]'"):
        importlib.import_module("fnserve.backends.pytorch")
    with pytest.raises(RepositoryError, match=r"model 'affine'.*pip install 'fnserve\[torch\]'"):
        factory_for(ModelFileSpec(_affine_config(), affine_pt))


# through the runtime: dynamic batching merges requests into one module call


async def test_concurrent_requests_through_the_runtime(affine_pt: Path) -> None:
    config = _affine_config(dynamic_batching=DynamicBatching(max_queue_delay_microseconds=2000))
    runtime = Runtime([ModelFileSpec(config, affine_pt)])
    await runtime.start()
    try:
        xs = [np.full((1 + i % 3, 3), i, dtype=np.float32) for i in range(12)]
        responses = await asyncio.gather(
            *(runtime.infer(InferRequest("affine", (InferInput("X", "FP32", x),))) for x in xs)
        )
    finally:
        await runtime.aclose()
    for x, response in zip(xs, responses, strict=True):
        np.testing.assert_allclose(response.outputs[0].data, x @ W + B, rtol=1e-6)
