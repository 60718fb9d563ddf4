"""Execution providers from the config, as Triton's onnxruntime backend picks them: a pure
function, checked here without onnxruntime or a GPU."""

from __future__ import annotations

import pytest

from fnserve.backends.execution_providers import (
    CPU,
    CUDA,
    OPENVINO,
    TENSORRT,
    execution_providers,
)
from fnserve.config.pbtxt import Accelerator, ExecutionAccelerators
from fnserve.errors import RepositoryError

WHERE = "model 'm' (m/1/model.onnx)"
EVERY = [TENSORRT, CUDA, OPENVINO, CPU]
NONE = ExecutionAccelerators()


def _gpu(*accelerators: Accelerator) -> ExecutionAccelerators:
    return ExecutionAccelerators(gpu=accelerators)


def _trt(**parameters: str) -> ExecutionAccelerators:
    return _gpu(Accelerator("tensorrt", parameters))


def _providers(
    accelerators: ExecutionAccelerators,
    kind: str = "KIND_GPU",
    device: str = "cuda:0",
    available: list[str] = EVERY,
) -> list[tuple[str, dict[str, object]]]:
    return execution_providers(WHERE, accelerators, kind, device, available)


class TestInstanceKind:
    def test_kind_cpu_runs_on_the_cpu_provider(self) -> None:
        assert _providers(NONE, "KIND_CPU", "cpu", [CPU]) == [(CPU, {})]

    def test_kind_gpu_runs_on_cuda_on_its_device_then_the_cpu(self) -> None:
        assert _providers(NONE, device="cuda:1") == [(CUDA, {"device_id": 1}), (CPU, {})]

    def test_kind_gpu_needs_a_cuda_device_name(self) -> None:
        with pytest.raises(RepositoryError, match="KIND_GPU needs a device 'cuda:N', got 'cpu'"):
            _providers(NONE, device="cpu")


class TestTensorRT:
    def test_tensorrt_comes_before_cuda_with_triton_parameters_mapped(self) -> None:
        accelerators = _trt(
            precision_mode="FP16",
            max_workspace_size_bytes="1073741824",
            trt_engine_cache_enable="1",
            trt_engine_cache_path="/tmp/trt-cache",
            trt_max_partition_iterations="1000",
            int8_use_native_calibration_table="false",
        )
        assert _providers(accelerators, device="cuda:2") == [
            (
                TENSORRT,
                {
                    "trt_fp16_enable": True,
                    "trt_max_workspace_size": 1073741824,
                    "trt_engine_cache_enable": True,
                    "trt_engine_cache_path": "/tmp/trt-cache",
                    "trt_max_partition_iterations": 1000,
                    "trt_int8_use_native_calibration_table": False,
                    "device_id": 2,
                },
            ),
            (CUDA, {"device_id": 2}),
            (CPU, {}),
        ]

    @pytest.mark.parametrize(
        ("mode", "options"),
        [
            ("FP32", {}),
            ("FP16", {"trt_fp16_enable": True}),
            ("BF16", {"trt_bf16_enable": True}),
            ("INT8", {"trt_int8_enable": True}),
        ],
    )
    def test_precision_modes(self, mode: str, options: dict[str, object]) -> None:
        (first, *_) = _providers(_trt(precision_mode=mode))
        assert first == (TENSORRT, {**options, "device_id": 0})

    @pytest.mark.parametrize(
        ("parameters", "error"),
        [
            ({"precision_mode": "FP8"}, "precision_mode must be one of FP32, FP16, BF16, INT8"),
            ({"max_workspace_size_bytes": "-1"}, "max_workspace_size_bytes: expected a size"),
            ({"max_workspace_size_bytes": "1GB"}, "max_workspace_size_bytes: invalid literal"),
            ({"trt_engine_cache_enable": "maybe"}, "trt_engine_cache_enable: expected 1/0"),
            ({"trt_dla_core": "first"}, "trt_dla_core: invalid literal"),
            ({"workspace": "1"}, "unknown parameter 'workspace' for the tensorrt accelerator"),
        ],
    )
    def test_bad_parameters_fail_naming_them(self, parameters: dict[str, str], error: str) -> None:
        with pytest.raises(RepositoryError, match=error) as caught:
            _providers(_trt(**parameters))
        assert str(caught.value).startswith(WHERE)

    def test_the_unknown_parameter_message_lists_the_known_ones(self) -> None:
        with pytest.raises(RepositoryError) as caught:
            _providers(_trt(workspace="1"))
        message = str(caught.value)
        assert "(known: precision_mode, int8_calibration_table_name, " in message
        for key in ("max_workspace_size_bytes", "trt_engine_cache_path", "trt_sparsity_enable"):
            assert key in message

    def test_without_the_provider_the_load_fails_saying_what_to_install(self) -> None:
        with pytest.raises(RepositoryError) as caught:
            _providers(_trt(), available=["AzureExecutionProvider", CUDA, CPU])
        assert str(caught.value) == (
            "model 'm' (m/1/model.onnx) asks for the TensorRT execution provider "
            "(TensorrtExecutionProvider), which this onnxruntime does not provide (available: "
            "AzureExecutionProvider, CUDAExecutionProvider, CPUExecutionProvider); pip install "
            "'fnserve[gpu]' (onnxruntime-gpu, in place of onnxruntime) and 'fnserve[tensorrt]' "
            "(the TensorRT libraries)"
        )

    def test_on_a_kind_cpu_instance_it_is_checked_but_not_used(self) -> None:
        # Triton's onnxruntime backend adds GPU accelerators to GPU instances only
        assert _providers(_trt(precision_mode="FP16"), "KIND_CPU", "cpu", [CPU]) == [(CPU, {})]
        with pytest.raises(RepositoryError, match="precision_mode"):
            _providers(_trt(precision_mode="FP4"), "KIND_CPU", "cpu", [CPU])


class TestCudaAndOpenVino:
    def test_cuda_parameters_go_to_the_cuda_provider(self) -> None:
        cuda = Accelerator(
            "cuda", {"cudnn_conv_use_max_workspace": "0", "use_ep_level_unified_stream": "1"}
        )
        assert _providers(_gpu(cuda)) == [
            (
                CUDA,
                {
                    "cudnn_conv_use_max_workspace": "0",
                    "use_ep_level_unified_stream": True,
                    "device_id": 0,
                },
            ),
            (CPU, {}),
        ]

    def test_openvino_runs_before_the_cpu_provider(self) -> None:
        accelerators = ExecutionAccelerators(cpu=(Accelerator("openvino"),))
        openvino = (OPENVINO, {"device_type": "CPU"})
        assert _providers(accelerators, "KIND_CPU", "cpu") == [openvino, (CPU, {})]
        assert _providers(accelerators) == [(CUDA, {"device_id": 0}), openvino, (CPU, {})]

    def test_openvino_takes_no_parameters(self) -> None:
        accelerators = ExecutionAccelerators(cpu=(Accelerator("openvino", {"device": "GPU"}),))
        with pytest.raises(RepositoryError, match="openvino accelerator takes no parameters"):
            _providers(accelerators, "KIND_CPU", "cpu")

    def test_kind_gpu_without_cuda_says_what_to_install(self) -> None:
        with pytest.raises(RepositoryError) as caught:
            _providers(NONE, available=[CPU])
        message = str(caught.value)
        assert "asks for KIND_GPU, which needs the CUDA execution provider" in message
        assert "pip install 'fnserve[gpu]'" in message
        assert "or use KIND_CPU" in message

    def test_openvino_missing_says_what_to_install(self) -> None:
        accelerators = ExecutionAccelerators(cpu=(Accelerator("openvino"),))
        with pytest.raises(RepositoryError, match="pip install onnxruntime-openvino"):
            _providers(accelerators, "KIND_CPU", "cpu", [CPU])


class TestUnknownAccelerators:
    @pytest.mark.parametrize("kind", ["KIND_CPU", "KIND_GPU"])
    def test_an_unknown_gpu_accelerator_is_named(self, kind: str) -> None:
        with pytest.raises(RepositoryError) as caught:
            _providers(_gpu(Accelerator("tensorrt-llm")), kind)
        assert str(caught.value) == (
            "model 'm' (m/1/model.onnx): unknown gpu execution accelerator 'tensorrt-llm' "
            "(fnserve's onnxruntime backend knows tensorrt, cuda)"
        )

    def test_an_unknown_cpu_accelerator_is_named(self) -> None:
        accelerators = ExecutionAccelerators(cpu=(Accelerator("tensorrt"),))
        with pytest.raises(RepositoryError, match="unknown cpu execution accelerator 'tensorrt'"):
            _providers(accelerators, "KIND_CPU", "cpu")

    def test_an_accelerator_given_twice_is_refused(self) -> None:
        twice = _gpu(Accelerator("tensorrt"), Accelerator("tensorrt"))
        with pytest.raises(RepositoryError, match="'tensorrt' is given more than once"):
            _providers(twice)
