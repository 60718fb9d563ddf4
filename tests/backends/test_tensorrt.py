"""The TensorRT plan backend.

On any machine: the rules over an engine's inputs and outputs (`backends/plan.py`, pure), and
what happens without the tensorrt package or without CUDA (the plan model fails to load with
the reason, the other models serve; end to end through a real server). On a CUDA machine:
engines built here from ONNX files with TensorRT's builder, served and checked against numpy.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import tritonclient.http as httpclient
from onnx import TensorProto, helper

from fnserve.backends.base import ModelFileSpec
from fnserve.backends.plan import EngineIO, EngineTensor, check_config, check_shape
from fnserve.backends.registry import factory_for
from fnserve.config.model_config import InstanceGroup, ModelConfig, Tensor
from fnserve.errors import InvalidInputError, RepositoryError
from fnserve.model import InstanceContext
from fnserve.repository.model_dirs import read_model_dir
from fnserve.runtime import Runtime
from fnserve.types import InferInput, InferRequest, ModelState
from tests.backends.gpu import HAS_CUDA, requires_cuda
from tests.repository.onnx_models import add_one
from tests.serverproc import ServerProcess

HAS_TENSORRT = importlib.util.find_spec("tensorrt") is not None
PLAN_CONFIG = """
platform: "tensorrt_plan"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

# an engine like one built from add_one.onnx with a profile of batch 1..8
X = EngineTensor("X", True, "FP32", (-1, 4), (1, 4), (8, 4))
Y = EngineTensor("Y", False, "FP32", (-1, 4))
IO = EngineIO((X, Y))


def _config(max_batch_size: int = 8, **changes: Any) -> ModelConfig:
    fields: dict[str, Any] = {
        "name": "plan",
        "inputs": [Tensor("X", "FP32", [4])],
        "outputs": [Tensor("Y", "FP32", [4])],
        "max_batch_size": max_batch_size,
        "backend": "tensorrt",
        "platform": "tensorrt_plan",
    }
    return ModelConfig(**(fields | changes))


# the engine's inputs and outputs (pure rules)


class TestEngineIO:
    def test_a_dynamic_first_dimension_is_the_batch_up_to_the_profile_max(self) -> None:
        assert IO.max_batch_size() == 8
        signature = IO.signature()
        assert signature.inputs == (Tensor("X", "FP32", [-1, 4]),)
        assert signature.outputs == (Tensor("Y", "FP32", [-1, 4]),)
        assert signature.batchable()
        assert signature.max_batch_size == 8

    def test_the_smallest_input_maximum_wins(self) -> None:
        z = EngineTensor("Z", True, "INT32", (-1,), (1,), (3,))
        assert EngineIO((X, z, Y)).max_batch_size() == 3

    def test_a_fixed_first_dimension_means_no_batch(self) -> None:
        fixed = EngineTensor("X", True, "FP32", (2, 4), (2, 4), (2, 4))
        io = EngineIO((fixed, EngineTensor("Y", False, "FP32", (2, 4))))
        assert io.max_batch_size() == 0
        assert not io.signature().batchable()


class TestCheckConfig:
    def test_a_matching_config_passes(self) -> None:
        check_config("m", _config(), IO)
        check_config("m", _config(4), IO)  # a smaller batch than the profile allows

    @pytest.mark.parametrize(
        ("config", "error"),
        [
            (_config(16), "max_batch_size is 16, but the engine's optimization profile 0 allows"),
            (_config(outputs=[Tensor("Z", "FP32", [4])]), "output 'Z', which the engine does"),
            (_config(inputs=[Tensor("X", "FP16", [4])]), "'X' is FP16 in the config but FP32"),
            (_config(inputs=[Tensor("X", "FP32", [5])]), r"\[-1, 5\] in the config \(with the"),
            (_config(0), r"'X' has shape \[4\] in the config but \[-1, 4\] in the engine"),
            (
                _config(inputs=[Tensor("X", "FP32", [4], optional=True)]),
                "optional in the config, but a TensorRT engine needs every input",
            ),
        ],
    )
    def test_a_config_that_contradicts_the_engine_fails(
        self, config: ModelConfig, error: str
    ) -> None:
        with pytest.raises(RepositoryError, match=error):
            check_config("model 'plan'", config, IO)

    def test_every_engine_input_must_be_declared(self) -> None:
        z = EngineTensor("Z", True, "INT32", (-1,), (1,), (8,))
        with pytest.raises(RepositoryError, match="the engine needs input.*Z.*does not declare"):
            check_config("m", _config(), EngineIO((X, z, Y)))

    def test_only_inputs_bound_the_batch(self) -> None:
        # an output the config leaves out may have any shape
        check_config("m", _config(), EngineIO((X, Y, EngineTensor("W", False, "FP32", (2,)))))


class TestCheckShape:
    def test_shapes_within_the_profile_pass(self) -> None:
        check_shape("plan", X, (1, 4))
        check_shape("plan", X, (8, 4))

    @pytest.mark.parametrize("shape", [(9, 4), (0, 4), (2, 5), (4,)])
    def test_shapes_outside_the_profile_are_invalid_input(self, shape: tuple[int, ...]) -> None:
        with pytest.raises(InvalidInputError) as caught:
            check_shape("plan", X, shape)
        assert str(caught.value) == (
            f"model 'plan' input 'X': shape {list(shape)} is outside the TensorRT engine's "
            f"optimization profile 0 (min [1, 4], max [8, 4])"
        )


# without the tensorrt package, or without CUDA (this machine)


@pytest.mark.skipif(HAS_TENSORRT, reason="the tensorrt package is installed")
class TestWithoutTensorRT:
    def test_the_registry_says_what_to_install(self, tmp_path: Path) -> None:
        plan = tmp_path / "model.plan"
        plan.write_bytes(b"not a plan")
        with pytest.raises(RepositoryError) as caught:
            factory_for(ModelFileSpec(_config(), plan))
        message = str(caught.value)
        assert message.startswith(f"model 'plan' ({plan}) needs backend 'tensorrt', which ")
        assert "No module named 'tensorrt'" in message
        assert message.endswith("pip install 'fnserve[tensorrt]'")

    def test_completing_a_config_from_a_plan_says_what_to_install(self, tmp_path: Path) -> None:
        (tmp_path / "plan" / "1").mkdir(parents=True)
        (tmp_path / "plan" / "1" / "model.plan").write_bytes(b"not a plan")
        with pytest.raises(
            RepositoryError, match=r"cannot read .*pip install 'fnserve\[tensorrt\]'"
        ):
            read_model_dir(tmp_path / "plan")


@pytest.fixture
def stub_tensorrt(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in `tensorrt` module where the package is missing: these tests stop before
    TensorRT is called (no GPU), so an empty module is enough to import the backend."""
    if not HAS_TENSORRT:
        monkeypatch.setitem(sys.modules, "tensorrt", types.ModuleType("tensorrt"))
    # imported afresh against the stand-in, and forgotten afterwards
    monkeypatch.setitem(sys.modules, "fnserve.backends.tensorrt", types.ModuleType("placeholder"))
    monkeypatch.delitem(sys.modules, "fnserve.backends.tensorrt")


@pytest.mark.usefixtures("stub_tensorrt")
@pytest.mark.skipif(HAS_CUDA, reason="a CUDA device is present")
class TestWithoutCuda:
    async def test_a_plan_placed_on_the_cpu_fails_only_its_model(self, tmp_path: Path) -> None:
        plan = tmp_path / "model.plan"
        plan.write_bytes(b"not a plan")
        onnx = add_one(tmp_path / "add_one" / "1" / "model.onnx")
        runtime = Runtime([ModelFileSpec(_config(), plan), *read_model_dir(onnx.parents[1])])
        await runtime.start()
        try:
            index = {e.name: e for e in runtime.repository_index()}
            # KIND_AUTO without a CUDA device places the instance on the CPU
            assert index["plan"].state is ModelState.FAILED
            assert "TensorRT plans run on a CUDA GPU only" in index["plan"].reason
            assert "pip install 'fnserve[tensorrt]'" in index["plan"].reason
            x = np.ones((2, 4), dtype=np.float32)
            response = await runtime.infer(InferRequest("add_one", (InferInput("X", "FP32", x),)))
            np.testing.assert_array_equal(response.outputs[0].data, x + 1)
        finally:
            await runtime.aclose()

    def test_kind_cpu_is_refused(self, tmp_path: Path) -> None:
        cpu = InstanceContext("plan", 1, 0, "KIND_CPU", "cpu", {})
        config = _config(instance_group=(InstanceGroup(kind="KIND_CPU"),))
        with pytest.raises(RepositoryError, match="run on a CUDA GPU only.*KIND_CPU in the config"):
            factory_for(ModelFileSpec(config, tmp_path / "model.plan")).create(cpu)

    def test_kind_gpu_without_cuda_says_so(self, tmp_path: Path) -> None:
        gpu = InstanceContext("plan", 1, 0, "KIND_GPU", "cuda:0", {})
        with pytest.raises(RepositoryError, match="KIND_GPU but this torch has no CUDA device"):
            factory_for(ModelFileSpec(_config(), tmp_path / "model.plan")).create(gpu)


@pytest.mark.e2e
@pytest.mark.skipif(HAS_TENSORRT, reason="the tensorrt package is installed")
def test_a_server_lists_plans_unavailable_with_the_reason_and_serves_the_rest(
    tmp_path: Path,
) -> None:
    root = tmp_path / "model_repository"
    add_one(root / "add_one" / "1" / "model.onnx")
    (root / "declared" / "1").mkdir(parents=True)
    (root / "declared" / "1" / "model.plan").write_bytes(b"not a plan")
    (root / "declared" / "config.pbtxt").write_text(PLAN_CONFIG)
    (root / "completed" / "1").mkdir(parents=True)
    (root / "completed" / "1" / "model.plan").write_bytes(b"not a plan")
    with ServerProcess.start(root) as server:
        client = httpclient.InferenceServerClient(server.http.removeprefix("http://"))
        index = {e["name"]: e for e in client.get_model_repository_index()}
        for name in ("declared", "completed"):
            assert index[name]["state"] == "UNAVAILABLE"
            assert "No module named 'tensorrt'" in index[name]["reason"]
            assert "pip install 'fnserve[tensorrt]'" in index[name]["reason"]
        assert "needs backend 'tensorrt'" in index["declared"]["reason"]
        assert index["add_one"]["state"] == "READY"
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        tensor = httpclient.InferInput("X", [2, 4], "FP32")
        tensor.set_data_from_numpy(x)
        np.testing.assert_array_equal(client.infer("add_one", [tensor]).as_numpy("Y"), x + 1)
        assert server.stop() == 0


# on a CUDA machine: engines built here with TensorRT's builder


def _build_plan(
    onnx_file: Path, plan: Path, profile: dict[str, tuple[tuple[int, ...], ...]]
) -> Path:
    """Build `plan` from `onnx_file` with one optimization profile (name: (min, opt, max));
    FP32 only, which TensorRT 10 and 11 (strongly typed) build alike."""
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(onnx_file.read_bytes()):
        raise AssertionError([str(parser.get_error(i)) for i in range(parser.num_errors)])
    config = builder.create_builder_config()
    optimization = builder.create_optimization_profile()
    for name, (low, opt, high) in profile.items():
        optimization.set_shape(name, low, opt, high)
    config.add_optimization_profile(optimization)
    serialized = builder.build_serialized_network(network, config)
    assert serialized is not None, "TensorRT could not build the engine (see its log)"
    plan.parent.mkdir(parents=True, exist_ok=True)
    plan.write_bytes(bytes(serialized))
    return plan


def _onnx(path: Path, graph: Any) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def _matmul_onnx(path: Path) -> Path:
    """Z = X @ W over FP32 [N, 3] x [3, 2]."""
    w = np.arange(6, dtype=np.float32).reshape(3, 2)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Z"])],
        "matmul",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["N", 2])],
        [helper.make_tensor("W", TensorProto.FLOAT, [3, 2], w.ravel().tolist())],
    )
    return _onnx(path, graph)


def _scale_onnx(path: Path) -> Path:
    """Y = X * 2 over FP32 [N, K], both dynamic."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["X", "two"], ["Y"])],
        "scale2",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", "K"])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", "K"])],
        [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])],
    )
    return _onnx(path, graph)


@pytest.fixture
def plan_repository(tmp_path: Path) -> Path:
    """add_one (batch 1..8), matmul (batch 1..4), scale2 ([1..8, 1..6]) as plans, no configs."""
    root = tmp_path / "plans"
    _build_plan(
        add_one(tmp_path / "add_one.onnx"),
        root / "add_one" / "1" / "model.plan",
        {"X": ((1, 4), (4, 4), (8, 4))},
    )
    _build_plan(
        _matmul_onnx(tmp_path / "matmul.onnx"),
        root / "matmul" / "1" / "model.plan",
        {"X": ((1, 3), (2, 3), (4, 3))},
    )
    _build_plan(_scale_onnx(tmp_path / "scale.onnx"), root / "scale2" / "1" / "model.plan",
                {"X": ((1, 1), (4, 3), (8, 6))})  # fmt: skip
    return root


def _specs(root: Path) -> list[Any]:
    return [spec for model in sorted(root.iterdir()) for spec in read_model_dir(model)]


@pytest.mark.gpu
@requires_cuda
def test_configs_are_completed_from_the_plans(plan_repository: Path) -> None:
    configs = {spec.config.name: spec.config for spec in _specs(plan_repository)}
    add = configs["add_one"]
    assert (add.platform, add.backend, add.max_batch_size) == ("tensorrt_plan", "tensorrt", 8)
    assert add.dynamic_batching is not None
    assert add.inputs == (Tensor("X", "FP32", [4]),)
    assert add.outputs == (Tensor("Y", "FP32", [4]),)
    assert configs["matmul"].max_batch_size == 4
    assert configs["scale2"].inputs == (Tensor("X", "FP32", [-1]),)


@pytest.mark.gpu
@requires_cuda
async def test_plans_answer_like_numpy_with_dynamic_batches(plan_repository: Path) -> None:
    runtime = Runtime(_specs(plan_repository))
    await runtime.start()
    try:
        index = {e.name: e for e in runtime.repository_index()}
        assert all(e.state is ModelState.READY for e in index.values()), index
        rng = np.random.default_rng(0)
        xs = [rng.standard_normal((1 + i % 3, 4)).astype(np.float32) for i in range(16)]
        responses = await asyncio.gather(
            *(runtime.infer(InferRequest("add_one", (InferInput("X", "FP32", x),))) for x in xs)
        )
        for x, response in zip(xs, responses, strict=True):
            np.testing.assert_array_equal(response.outputs[0].data, x + np.float32(1))
        stats = {s.name: s for s in runtime.version_stats()}
        assert stats["add_one"].execution_count < len(xs)  # requests were batched together
        x = rng.standard_normal((3, 3)).astype(np.float32)
        response = await runtime.infer(InferRequest("matmul", (InferInput("X", "FP32", x),)))
        w = np.arange(6, dtype=np.float32).reshape(3, 2)
        np.testing.assert_allclose(response.outputs[0].data, x @ w, rtol=1e-5, atol=1e-5)
        x = rng.standard_normal((2, 5)).astype(np.float32)
        response = await runtime.infer(InferRequest("scale2", (InferInput("X", "FP32", x),)))
        np.testing.assert_array_equal(response.outputs[0].data, x * 2)
    finally:
        await runtime.aclose()


@pytest.mark.gpu
@requires_cuda
async def test_a_shape_outside_the_profile_is_invalid_input(plan_repository: Path) -> None:
    runtime = Runtime(_specs(plan_repository))
    await runtime.start()
    try:
        x = np.zeros((2, 7), dtype=np.float32)  # K = 7 > the profile's 6
        with pytest.raises(InvalidInputError, match=r"outside the TensorRT engine's optimization"):
            await runtime.infer(InferRequest("scale2", (InferInput("X", "FP32", x),)))
    finally:
        await runtime.aclose()


@pytest.mark.gpu
@requires_cuda
def test_a_corrupt_plan_fails_naming_tensorrt_and_the_gpu(tmp_path: Path) -> None:
    plan = tmp_path / "model.plan"
    plan.write_bytes(b"not a plan")
    gpu = InstanceContext("plan", 1, 0, "KIND_GPU", "cuda:0", {})
    with pytest.raises(RepositoryError, match=r"TensorRT .* cannot deserialize model.plan"):
        factory_for(ModelFileSpec(_config(), plan)).create(gpu)


@pytest.mark.gpu
@requires_cuda
def test_each_instance_has_its_own_engine_context_and_stream(plan_repository: Path) -> None:
    from fnserve.backends.tensorrt import TensorRTBackend

    (spec,) = read_model_dir(plan_repository / "add_one")
    factory = factory_for(spec)
    a = factory.create(InstanceContext("add_one", 1, 0, "KIND_GPU", "cuda:0", {}))
    b = factory.create(InstanceContext("add_one", 1, 1, "KIND_GPU", "cuda:0", {}))
    assert isinstance(a, TensorRTBackend)
    assert isinstance(b, TensorRTBackend)
    assert a.engine is not b.engine
    for rows in (1, 5, 8):  # any batch the profile allows
        x = np.full((rows, 4), rows, dtype=np.float32)
        np.testing.assert_array_equal(a.execute({"X": x}, [{}])["Y"], x + 1)
    x = np.ones((3, 4), dtype=np.float32)
    np.testing.assert_array_equal(a.execute({"X": x}, [{}])["Y"], x + 1)
    np.testing.assert_array_equal(b.execute({"X": x * 2}, [{}])["Y"], x * 2 + 1)
    a.unload()
    assert a.engine is None
    np.testing.assert_array_equal(b.execute({"X": x}, [{}])["Y"], x + 1)
    b.unload()
