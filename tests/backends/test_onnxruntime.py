"""The onnxruntime backend on real ONNX files, built here with `onnx.helper` (no mocks)."""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from fnserve.backends.base import ModelFileSpec
from fnserve.backends.onnxruntime import OnnxRuntimeBackend, OnnxRuntimeBackendFactory, describe
from fnserve.backends.registry import factory_for
from fnserve.config.model_config import DynamicBatching, InstanceGroup, ModelConfig, Tensor
from fnserve.errors import InvalidInputError, ModelExecutionError, RepositoryError
from fnserve.model import InstanceContext
from fnserve.repository.model_dirs import read_model_dir
from fnserve.runtime import Runtime
from fnserve.scheduling.runner import BatchRunner
from fnserve.types import InferInput, InferRequest, ModelState
from tests.backends.gpu import requires_cuda

CPU = InstanceContext("m", 1, 0, "KIND_CPU", "cpu", {})


def _save(
    path: Path,
    nodes: list[Any],
    inputs: list[Any],
    outputs: list[Any],
    initializers: list[Any] | None = None,
) -> Path:
    graph = helper.make_graph(nodes, path.stem, inputs, outputs, initializer=initializers or [])
    # IR 8 / opset 17: what every onnxruntime >= 1.18 loads
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def _value(name: str, elem: int, shape: list[Any]) -> Any:
    return helper.make_tensor_value_info(name, elem, shape)


@pytest.fixture
def add_one(tmp_path: Path) -> Path:
    """Y = X + 1, X and Y FP32 [N, 4]."""
    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    return _save(
        tmp_path / "add_one.onnx",
        [helper.make_node("Add", ["X", "one"], ["Y"])],
        [_value("X", TensorProto.FLOAT, ["N", 4])],
        [_value("Y", TensorProto.FLOAT, ["N", 4])],
        [one],
    )


W = np.arange(6, dtype=np.float32).reshape(3, 2)


@pytest.fixture
def matmul(tmp_path: Path) -> Path:
    """Z = X @ W with a fixed weight, X FP32 [batch, 3], Z FP32 [batch, 2]."""
    weight = helper.make_tensor("W", TensorProto.FLOAT, [3, 2], W.ravel().tolist())
    return _save(
        tmp_path / "matmul.onnx",
        [helper.make_node("MatMul", ["X", "W"], ["Z"])],
        [_value("X", TensorProto.FLOAT, ["batch", 3])],
        [_value("Z", TensorProto.FLOAT, ["batch", 2])],
        [weight],
    )


@pytest.fixture
def doubled(tmp_path: Path) -> Path:
    """Y = X * 2, INT64 [N] (rank 1: only the batch dimension)."""
    two = helper.make_tensor("two", TensorProto.INT64, [], [2])
    return _save(
        tmp_path / "doubled.onnx",
        [helper.make_node("Mul", ["X", "two"], ["Y"])],
        [_value("X", TensorProto.INT64, ["N"])],
        [_value("Y", TensorProto.INT64, ["N"])],
        [two],
    )


@pytest.fixture
def fixed(tmp_path: Path) -> Path:
    """Y = -X with a fixed shape [2, 3] and no batch dimension."""
    return _save(
        tmp_path / "fixed.onnx",
        [helper.make_node("Neg", ["X"], ["Y"])],
        [_value("X", TensorProto.FLOAT, [2, 3])],
        [_value("Y", TensorProto.FLOAT, [2, 3])],
    )


@pytest.fixture
def echo(tmp_path: Path) -> Path:
    """Y = X for strings [N, 2]."""
    return _save(
        tmp_path / "echo.onnx",
        [helper.make_node("Identity", ["X"], ["Y"])],
        [_value("X", TensorProto.STRING, ["N", 2])],
        [_value("Y", TensorProto.STRING, ["N", 2])],
    )


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
        backend="onnxruntime",
        instance_group=(InstanceGroup(kind="KIND_CPU"),),
        **kwargs,
    )


def _add_one_config(**kwargs: Any) -> ModelConfig:
    return _config("add_one", [Tensor("X", "FP32", [4])], [Tensor("Y", "FP32", [4])], **kwargs)


def _backend(config: ModelConfig, path: Path, context: InstanceContext = CPU) -> Any:
    return factory_for(ModelFileSpec(config, path)).create(context)


# describe


def test_describe_reads_names_datatypes_and_full_shapes(add_one: Path, matmul: Path) -> None:
    signature = describe(add_one)
    assert signature.inputs == (Tensor("X", "FP32", [-1, 4]),)
    assert signature.outputs == (Tensor("Y", "FP32", [-1, 4]),)
    assert signature.batchable()
    # the weight is an initializer, not an input
    assert describe(matmul).inputs == (Tensor("X", "FP32", [-1, 3]),)
    assert describe(matmul).outputs == (Tensor("Z", "FP32", [-1, 2]),)


def test_describe_maps_int64_and_string_types(doubled: Path, echo: Path) -> None:
    assert describe(doubled).inputs == (Tensor("X", "INT64", [-1]),)
    assert describe(doubled).batchable()  # completed as dims [1] with reshape [] (Triton's way)
    assert describe(echo).outputs == (Tensor("Y", "BYTES", [-1, 2]),)


def test_a_fixed_shape_is_not_batchable(fixed: Path) -> None:
    signature = describe(fixed)
    assert signature.inputs == (Tensor("X", "FP32", [2, 3]),)
    assert signature.outputs == (Tensor("Y", "FP32", [2, 3]),)
    assert not signature.batchable()


def test_describe_refuses_types_it_cannot_serve(tmp_path: Path) -> None:
    path = _save(
        tmp_path / "seq.onnx",
        [helper.make_node("SequenceConstruct", ["X"], ["S"])],
        [_value("X", TensorProto.FLOAT, [2])],
        [helper.make_tensor_sequence_value_info("S", TensorProto.FLOAT, [2])],
    )
    with pytest.raises(RepositoryError, match=r"tensor 'S' has type seq\(tensor\(float\)\)"):
        describe(path)


def test_describe_of_a_corrupt_file_names_it(tmp_path: Path) -> None:
    path = tmp_path / "broken.onnx"
    path.write_bytes(os.urandom(256))
    with pytest.raises(RepositoryError, match="broken.onnx"):
        describe(path)


# the backend


def test_the_registry_builds_an_onnxruntime_backend(add_one: Path) -> None:
    factory = factory_for(ModelFileSpec(_add_one_config(), add_one))
    assert isinstance(factory, OnnxRuntimeBackendFactory)
    assert (factory.name, factory.process_isolation) == ("onnxruntime", False)
    assert factory.spec.location() == str(add_one)
    backend = factory.create(CPU)
    assert isinstance(backend, OnnxRuntimeBackend)
    assert backend.is_async is False


def test_add_one_equals_numpy(add_one: Path) -> None:
    backend = _backend(_add_one_config(), add_one)
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    out = backend.execute({"X": x}, [{}])
    assert list(out) == ["Y"]
    np.testing.assert_array_equal(out["Y"], x + np.float32(1))
    assert out["Y"].dtype == np.float32


def test_matmul_equals_numpy_and_passes_the_runners_output_checks(matmul: Path) -> None:
    config = _config("matmul", [Tensor("X", "FP32", [3])], [Tensor("Z", "FP32", [2])])
    runner = BatchRunner(config, _backend(config, matmul))
    x = np.random.default_rng(1).standard_normal((7, 3)).astype(np.float32)
    outputs = runner.check_outputs(runner.call({"X": x}, [{}]), rows=7)
    np.testing.assert_allclose(outputs["Z"], x @ W, rtol=1e-6)


def test_int64_and_fixed_shape_models(doubled: Path, fixed: Path) -> None:
    # a rank-1 file leaves no dims after a batch dimension: served unbatched
    config = _config(
        "doubled", [Tensor("X", "INT64", [-1])], [Tensor("Y", "INT64", [-1])], max_batch_size=0
    )
    x = np.array([1, -2, 3], dtype=np.int64)
    out = _backend(config, doubled).execute({"X": x}, [{}])
    np.testing.assert_array_equal(out["Y"], x * 2)
    assert out["Y"].dtype == np.int64
    config = _config(
        "fixed", [Tensor("X", "FP32", [2, 3])], [Tensor("Y", "FP32", [2, 3])], max_batch_size=0
    )
    x32 = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(_backend(config, fixed).execute({"X": x32}, [{}])["Y"], -x32)


def test_bytes_travel_as_bytes_both_ways(echo: Path) -> None:
    config = _config("echo", [Tensor("X", "BYTES", [2])], [Tensor("Y", "BYTES", [2])])
    backend = _backend(config, echo)
    x = np.array([[b"a", "é".encode()], [b"", b"xyz"]], dtype=object)
    out = backend.execute({"X": x}, [{}])["Y"]
    assert out.dtype == np.object_
    assert out.shape == (2, 2)
    assert out.tolist() == x.tolist()  # not "b'a'": onnxruntime is given str, not bytes
    with pytest.raises(InvalidInputError, match="input 'X'.*UTF-8"):
        backend.execute({"X": np.array([[b"\xff", b"a"]], dtype=object)}, [{}])


def test_only_the_declared_outputs_are_returned(tmp_path: Path) -> None:
    path = _save(
        tmp_path / "two.onnx",
        [helper.make_node("Neg", ["X"], ["A"]), helper.make_node("Abs", ["X"], ["B"])],
        [_value("X", TensorProto.FLOAT, ["N", 2])],
        [_value("A", TensorProto.FLOAT, ["N", 2]), _value("B", TensorProto.FLOAT, ["N", 2])],
    )
    config = _config("two", [Tensor("X", "FP32", [2])], [Tensor("B", "FP32", [2])])
    x = np.array([[-1.0, 2.0]], dtype=np.float32)
    out = _backend(config, path).execute({"X": x}, [{}])
    assert list(out) == ["B"]
    np.testing.assert_array_equal(out["B"], np.abs(x))


def test_a_wrong_input_dtype_is_one_model_execution_error(add_one: Path) -> None:
    config = _add_one_config()
    runner = BatchRunner(config, _backend(config, add_one))
    with pytest.raises(ModelExecutionError) as info:
        runner.call({"X": np.zeros((1, 4), dtype=np.float64)}, [{}])  # nothing is cast
    message = str(info.value)
    assert message.startswith("model 'add_one' raised InvalidArgument")
    assert "tensor(double)" in message
    assert "tensor(float)" in message
    assert message.count("model '") == 1  # wrapped once, by the runner
    assert not isinstance(info.value.__cause__, ModelExecutionError)


def test_unload_drops_the_session_and_aexecute_is_not_used(add_one: Path) -> None:
    backend = _backend(_add_one_config(), add_one)
    assert backend.session is not None
    with pytest.raises(NotImplementedError):
        asyncio.run(backend.aexecute({}, []))
    backend.unload()
    assert backend.session is None


# session options and devices


def test_thread_counts_and_optimization_level(add_one: Path) -> None:
    default = _backend(_add_one_config(), add_one).session.get_session_options()
    assert (default.intra_op_num_threads, default.inter_op_num_threads) == (1, 1)
    assert default.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    parameters = {"intra_op_thread_count": "3", "inter_op_thread_count": "2"}
    config = _add_one_config(parameters=parameters)
    context = InstanceContext("add_one", 1, 0, "KIND_CPU", "cpu", parameters)
    options = _backend(config, add_one, context).session.get_session_options()
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (3, 2)


def test_a_bad_thread_count_fails_the_load(add_one: Path) -> None:
    context = InstanceContext("add_one", 1, 0, "KIND_CPU", "cpu", {"intra_op_thread_count": "x"})
    with pytest.raises(RepositoryError, match="intra_op_thread_count must be an integer >= 0"):
        _backend(_add_one_config(), add_one, context)


@pytest.mark.skipif(
    "CUDAExecutionProvider" in ort.get_available_providers(),
    reason="this onnxruntime has CUDA",
)
def test_kind_gpu_without_cuda_says_what_to_install(add_one: Path) -> None:
    gpu = InstanceContext("add_one", 1, 0, "KIND_GPU", "cuda:0", {})
    with pytest.raises(RepositoryError) as info:
        _backend(_add_one_config(), add_one, gpu)
    message = str(info.value)
    assert "model 'add_one'" in message
    assert "KIND_GPU" in message
    assert "CUDAExecutionProvider" in message
    assert "pip install 'fnserve[gpu]'" in message


@pytest.mark.gpu
@pytest.mark.skipif(
    "CUDAExecutionProvider" not in ort.get_available_providers(),
    reason="this onnxruntime has no CUDA",
)
def test_kind_gpu_runs_on_cuda(add_one: Path) -> None:
    gpu = InstanceContext("add_one", 1, 0, "KIND_GPU", "cuda:0", {})
    backend = _backend(_add_one_config(), add_one, gpu)
    assert backend.session.get_providers()[0] == "CUDAExecutionProvider"
    x = np.ones((2, 4), dtype=np.float32)
    np.testing.assert_array_equal(backend.execute({"X": x}, [{}])["Y"], x + 1)


# load failures


def test_a_corrupt_model_file_fails_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(os.urandom(512))
    with pytest.raises(RepositoryError) as info:
        _backend(_add_one_config(), path)
    assert str(path) in str(info.value)
    assert "model 'add_one'" in str(info.value)


def test_a_missing_model_file_fails_naming_it(tmp_path: Path) -> None:
    with pytest.raises(RepositoryError, match="nowhere.onnx"):
        _backend(_add_one_config(), tmp_path / "nowhere.onnx")


@pytest.mark.parametrize(
    ("inputs", "outputs", "error"),
    [
        ([Tensor("X", "FP32", [4])], [Tensor("NOPE", "FP32", [4])], "output 'NOPE'.*does not"),
        ([Tensor("X", "FP64", [4])], [Tensor("Y", "FP32", [4])], "'X' is FP64 in the config"),
        (
            [Tensor("X", "FP32", [4]), Tensor("EXTRA", "FP32", [4])],
            [Tensor("Y", "FP32", [4])],
            "input 'EXTRA'",
        ),
    ],
)
def test_a_config_that_contradicts_the_file_fails_the_load(
    add_one: Path, inputs: list[Tensor], outputs: list[Tensor], error: str
) -> None:
    with pytest.raises(RepositoryError, match=error):
        _backend(_config("add_one", inputs, outputs), add_one)


@pytest.mark.parametrize(
    ("max_batch_size", "dims", "error"),
    [
        (
            8,
            [5],
            r"input 'X' has dims \[5\] in the config, shape \[-1, 5\] with the batch "
            r"dimension, but the model file's shape is \[-1, 4\]",
        ),
        (8, [4, 1], r"'X' has dims \[4, 1\] in the config.*file's shape is \[-1, 4\]"),
        (0, [2, 4, 1], r"'X' has dims \[2, 4, 1\] in the config, but the model file's shape"),
    ],
)
def test_config_dims_the_file_contradicts_fail_the_load(
    add_one: Path, max_batch_size: int, dims: list[int], error: str
) -> None:
    """As Triton's ORT backend (CompareDimsSupported): a -1 in the file takes any config dim,
    a fixed one must be equal, the ranks must agree (with the batch dimension)."""
    config = _config("add_one", [Tensor("X", "FP32", dims)], [Tensor("Y", "FP32", [4])],
                     max_batch_size)  # fmt: skip
    with pytest.raises(RepositoryError, match=f"model 'add_one' .*{error}"):
        _backend(config, add_one)


def test_config_dims_a_dynamic_file_dim_accepts(add_one: Path) -> None:
    unbatched = _config("add_one", [Tensor("X", "FP32", [3, 4])], [Tensor("Y", "FP32", [-1, 4])], 0)
    assert isinstance(_backend(unbatched, add_one), OnnxRuntimeBackend)  # -1 in the file: any
    loose = _config("add_one", [Tensor("X", "FP32", [-1])], [Tensor("Y", "FP32", [4])], 8)
    with pytest.raises(RepositoryError, match=r"'X' has dims \[-1\].*shape is \[-1, 4\]"):
        _backend(loose, add_one)  # a fixed dim in the file takes only itself, as in Triton


def test_a_batching_config_over_a_fixed_first_dim_fails_the_load(fixed: Path) -> None:
    config = _config("fixed", [Tensor("X", "FP32", [3])], [Tensor("Y", "FP32", [3])], 2)
    with pytest.raises(
        RepositoryError,
        match=r"input 'X' has shape \[2, 3\] in the model file, "
        r"whose first dimension must be -1 \(dynamic\) for max_batch_size 2",
    ):
        _backend(config, fixed)


def test_max_batch_size_over_a_model_that_cannot_batch_fails_completion(
    fixed: Path, tmp_path: Path
) -> None:
    """Triton: "model does not support batching while non-zero max_batch_size is specified";
    stripping the fixed first dim instead would serve a model failing at other batch sizes."""
    directory = _model_dir(tmp_path, "fixed", fixed, "max_batch_size: 2\n")
    with pytest.raises(
        RepositoryError,
        match=r"sets max_batch_size 2 but the model file does "
        r"not support batching: tensor 'X' has shape \[2, 3\]",
    ):
        read_model_dir(directory)
    (spec,) = read_model_dir(_model_dir(tmp_path, "unbatched", fixed, "max_batch_size: 0\n"))
    assert (spec.config.max_batch_size, spec.config.inputs[0].dims) == (0, (2, 3))


def test_an_input_the_config_leaves_out_fails_the_load(tmp_path: Path) -> None:
    path = _save(
        tmp_path / "sum.onnx",
        [helper.make_node("Add", ["A", "B"], ["S"])],
        [_value("A", TensorProto.FLOAT, ["N"]), _value("B", TensorProto.FLOAT, ["N"])],
        [_value("S", TensorProto.FLOAT, ["N"])],
    )
    config = _config("sum", [Tensor("A", "FP32", [-1])], [Tensor("S", "FP32", [-1])], 0)
    with pytest.raises(RepositoryError, match="needs input.*B.*does not declare"):
        _backend(config, path)


def test_without_onnxruntime_the_install_line_is_given(
    add_one: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` now fails
    monkeypatch.delitem(sys.modules, "fnserve.backends.onnxruntime")
    with pytest.raises(ImportError, match=r"pip install 'fnserve\[onnx\]'"):
        importlib.import_module("fnserve.backends.onnxruntime")
    with pytest.raises(RepositoryError, match=r"model 'add_one'.*pip install 'fnserve\[onnx\]'"):
        factory_for(ModelFileSpec(_add_one_config(), add_one))


def test_other_backends_of_model_files_are_refused(add_one: Path) -> None:
    config = ModelConfig(
        name="t",
        inputs=[Tensor("X", "FP32", [-1, 4])],
        outputs=[Tensor("Y", "FP32", [-1, 4])],
        backend="openvino",
    )
    with pytest.raises(RepositoryError, match="backend 'openvino', which fnserve does not"):
        factory_for(ModelFileSpec(config, add_one))


# through the runtime: dynamic batching merges requests into one session run


async def test_concurrent_requests_through_the_runtime(add_one: Path) -> None:
    config = _add_one_config(dynamic_batching=DynamicBatching(max_queue_delay_microseconds=2000))
    runtime = Runtime([ModelFileSpec(config, add_one)])
    await runtime.start()
    try:
        xs = [np.full((1 + i % 3, 4), i, dtype=np.float32) for i in range(12)]
        responses = await asyncio.gather(
            *(runtime.infer(InferRequest("add_one", (InferInput("X", "FP32", x),))) for x in xs)
        )
    finally:
        await runtime.aclose()
    for x, response in zip(xs, responses, strict=True):
        np.testing.assert_array_equal(response.outputs[0].data, x + 1)


# execution accelerators (optimization.execution_accelerators): providers from the config

ACCELERATED = """
instance_group [ { kind: %s } ]
optimization { execution_accelerators {
  gpu_execution_accelerator : [ {
    name : "tensorrt"
    parameters { key: "precision_mode" value: "FP16" }
    parameters { key: "trt_engine_cache_enable" value: "1" }
    parameters { key: "trt_engine_cache_path" value: "%s" }
  } ]
} }
"""


def _model_dir(root: Path, name: str, onnx_file: Path, config: str) -> Path:
    (root / name / "1").mkdir(parents=True)
    (root / name / "1" / "model.onnx").write_bytes(onnx_file.read_bytes())
    (root / name / "config.pbtxt").write_text(config)
    return root / name


def test_gpu_accelerators_are_not_used_by_kind_cpu_instances(add_one: Path, tmp_path: Path) -> None:
    config = ACCELERATED % ("KIND_CPU", tmp_path / "cache")
    (spec,) = read_model_dir(_model_dir(tmp_path, "accelerated", add_one, config))
    assert spec.accelerators.gpu[0].name == "tensorrt"
    backend = factory_for(spec).create(InstanceContext("accelerated", 1, 0, "KIND_CPU", "cpu", {}))
    assert isinstance(backend, OnnxRuntimeBackend)
    assert backend.session.get_providers() == ["CPUExecutionProvider"]  # as in Triton
    x = np.ones((2, 4), dtype=np.float32)
    np.testing.assert_array_equal(backend.execute({"X": x}, [{}])["Y"], x + 1)


@pytest.mark.skipif(
    "TensorrtExecutionProvider" in ort.get_available_providers(),
    reason="this onnxruntime has TensorRT",
)
def test_a_missing_tensorrt_provider_fails_the_load_saying_what_to_install(
    add_one: Path, tmp_path: Path
) -> None:
    config = ACCELERATED % ("KIND_GPU", tmp_path / "cache")
    (spec,) = read_model_dir(_model_dir(tmp_path, "accelerated", add_one, config))
    gpu = InstanceContext("accelerated", 1, 0, "KIND_GPU", "cuda:0", {})
    with pytest.raises(RepositoryError) as info:
        factory_for(spec).create(gpu)
    message = str(info.value)
    assert message.startswith("model 'accelerated' (")
    assert "asks for the TensorRT execution provider (TensorrtExecutionProvider), which " in message
    assert f"(available: {', '.join(ort.get_available_providers())})" in message
    assert "pip install 'fnserve[gpu]'" in message


async def test_an_unknown_accelerator_fails_only_its_model(add_one: Path, tmp_path: Path) -> None:
    unknown = (
        'optimization { execution_accelerators { cpu_execution_accelerator [ { name: "dnnl" } ] } }'
    )
    bad = read_model_dir(_model_dir(tmp_path, "bad", add_one, unknown))
    good = read_model_dir(_model_dir(tmp_path, "good", add_one, ""))
    runtime = Runtime([*bad, *good])
    await runtime.start()
    try:
        index = {e.name: e for e in runtime.repository_index()}
        assert index["bad"].state is ModelState.FAILED
        assert "unknown cpu execution accelerator 'dnnl'" in index["bad"].reason
        x = np.zeros((1, 4), dtype=np.float32)
        response = await runtime.infer(InferRequest("good", (InferInput("X", "FP32", x),)))
        np.testing.assert_array_equal(response.outputs[0].data, x + 1)
    finally:
        await runtime.aclose()


# on a GPU: the CUDA and TensorRT execution providers really run (onnxruntime-gpu needed)


@pytest.mark.gpu
@requires_cuda
def test_the_cuda_provider_runs_with_its_options(add_one: Path, tmp_path: Path) -> None:
    config = """
    instance_group [ { kind: KIND_GPU gpus: [ 0 ] } ]
    optimization { execution_accelerators { gpu_execution_accelerator : [ {
      name : "cuda"
      parameters { key: "do_copy_in_default_stream" value: "true" }
    } ] } }
    """
    (spec,) = read_model_dir(_model_dir(tmp_path, "on_cuda", add_one, config))
    gpu = InstanceContext("on_cuda", 1, 0, "KIND_GPU", "cuda:0", {})
    backend = factory_for(spec).create(gpu)
    assert isinstance(backend, OnnxRuntimeBackend)
    session = backend.session
    assert session.get_providers()[0] == "CUDAExecutionProvider"
    options = session.get_provider_options()["CUDAExecutionProvider"]
    assert (options["device_id"], options["do_copy_in_default_stream"]) == ("0", "1")
    x = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_array_equal(backend.execute({"X": x}, [{}])["Y"], x + np.float32(1))


@pytest.mark.gpu
@requires_cuda
async def test_the_tensorrt_provider_runs_with_its_options(add_one: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    specs = read_model_dir(
        _model_dir(tmp_path, "on_trt", add_one, ACCELERATED % ("KIND_GPU", cache))
    )
    runtime = Runtime(specs)
    await runtime.start()
    try:
        index = {e.name: e for e in runtime.repository_index()}
        assert index["on_trt"].state is ModelState.READY, index["on_trt"].reason
        x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
        response = await runtime.infer(InferRequest("on_trt", (InferInput("X", "FP32", x),)))
    finally:
        await runtime.aclose()
    # FP16 (precision_mode) rounds; the engine cache (trt_engine_cache_*) holds the engine built
    np.testing.assert_allclose(response.outputs[0].data, x + 1, rtol=1e-2, atol=1e-2)
    assert any(cache.iterdir())
