"""Which ONNX Runtime execution providers an instance asks for, chosen from its config as
Triton's onnxruntime backend does; pure (no onnxruntime import), so it is checked on any machine.

A KIND_GPU instance gets the config's GPU accelerators first (`tensorrt`: the TensorRT execution
provider, its parameters mapped to TensorRT EP options; `cuda`: options for the CUDA provider),
then the CUDA provider on the instance's device; every instance then gets the CPU accelerators
(`openvino`) and last the CPU provider, which runs whatever the others cannot. On a KIND_CPU
instance the GPU accelerators are checked but not used (Triton ignores them there).

    execution_providers("model 'm'", ExecutionAccelerators(gpu=(Accelerator("tensorrt",
        {"precision_mode": "FP16"}),)), "KIND_GPU", "cuda:0", available)
    -> [("TensorrtExecutionProvider", {"trt_fp16_enable": True, "device_id": 0}),
        ("CUDAExecutionProvider", {"device_id": 0}), ("CPUExecutionProvider", {})]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fnserve.config.pbtxt import Accelerator, ExecutionAccelerators
from fnserve.errors import RepositoryError

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"
OPENVINO = "OpenVINOExecutionProvider"
Provider = tuple[str, dict[str, Any]]
OptionValue = bool | int | str

# What to install when the installed onnxruntime lacks a provider.
_INSTALL = {
    CUDA: "pip install 'fnserve[gpu]' (onnxruntime-gpu, in place of onnxruntime), or use KIND_CPU",
    TENSORRT: "pip install 'fnserve[gpu]' (onnxruntime-gpu, in place of onnxruntime) and "
    "'fnserve[tensorrt]' (the TensorRT libraries)",
    OPENVINO: "pip install onnxruntime-openvino (in place of onnxruntime)",
}
_WORDS = {CUDA: "CUDA", TENSORRT: "TensorRT", OPENVINO: "OpenVINO"}
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def _flag(raw: str) -> bool:
    word = raw.strip().lower()
    if word not in _TRUE | _FALSE:
        raise ValueError("expected 1/0, true/false, yes/no or on/off")
    return word in _TRUE


def _int(raw: str) -> int:
    return int(raw.strip())


def _size(raw: str) -> int:
    value = int(raw.strip())
    if value < 0:
        raise ValueError("expected a size in bytes >= 0")
    return value


def _text(raw: str) -> str:
    return raw


# Triton's TensorRT accelerator parameters that keep their name as TensorRT EP options.
_INT_KEYS = ("trt_max_partition_iterations", "trt_min_subgraph_size", "trt_dla_core",
             "trt_builder_optimization_level", "trt_auxiliary_streams",
             "trt_ep_context_embed_mode")  # fmt: skip
_FLAG_KEYS = ("trt_dla_enable", "trt_engine_cache_enable", "trt_dump_subgraphs",
              "trt_force_sequential_engine_build", "trt_context_memory_sharing_enable",
              "trt_layer_norm_fp32_fallback", "trt_timing_cache_enable", "trt_force_timing_cache",
              "trt_detailed_build_log", "trt_build_heuristics_enable", "trt_sparsity_enable",
              "trt_cuda_graph_enable", "trt_dump_ep_context_model")  # fmt: skip
_TEXT_KEYS = ("trt_engine_cache_path", "trt_engine_cache_prefix", "trt_timing_cache_path",
              "trt_tactic_sources", "trt_extra_plugin_lib_paths", "trt_profile_min_shapes",
              "trt_profile_max_shapes", "trt_profile_opt_shapes",
              "trt_ep_context_file_path")  # fmt: skip
# Triton's TensorRT accelerator parameters -> (TensorRT EP option, how its value is read), as
# in Triton's onnxruntime backend; `precision_mode` is read on its own (one key, several options).
_TENSORRT_OPTIONS: dict[str, tuple[str, Callable[[str], OptionValue]]] = {
    "max_workspace_size_bytes": ("trt_max_workspace_size", _size),
    "int8_calibration_table_name": ("trt_int8_calibration_table_name", _text),
    "int8_use_native_calibration_table": ("trt_int8_use_native_calibration_table", _flag),
    **{key: (key, _int) for key in _INT_KEYS},
    **{key: (key, _flag) for key in _FLAG_KEYS},
    **{key: (key, _text) for key in _TEXT_KEYS},
}
_PRECISIONS = {"FP32": {}, "FP16": {"trt_fp16_enable": True},
               "BF16": {"trt_bf16_enable": True}, "INT8": {"trt_int8_enable": True}}  # fmt: skip
# Triton passes these CUDA accelerator parameters as booleans; the rest go through as text.
_CUDA_FLAGS = frozenset({"do_copy_in_default_stream", "use_ep_level_unified_stream"})
GPU_ACCELERATORS = ("tensorrt", "cuda")
CPU_ACCELERATORS = ("openvino",)


def execution_providers(
    where: str,
    accelerators: ExecutionAccelerators,
    kind: str,
    device: str,
    available: Sequence[str],
) -> list[Provider]:
    """The providers (name, options) to open a session with, in priority order.

    Args:
        where: the model, for messages ("model 'm' (path)").
        accelerators: the config's execution accelerators.
        kind: the instance's kind, KIND_CPU or KIND_GPU.
        device: the instance's device, "cpu" or "cuda:N".
        available: the providers the installed onnxruntime has
            (`onnxruntime.get_available_providers()`).

    Raises:
        RepositoryError: an unknown accelerator or parameter, a parameter value that does not
            parse, a GPU device that is not "cuda:N", or a provider this onnxruntime lacks.
    """
    gpu = _gpu_providers(where, accelerators.gpu, kind, device)
    _once_each(where, "cpu", accelerators.cpu)
    cpu = [_cpu_provider(where, a) for a in accelerators.cpu]
    providers = [*gpu, *cpu, (CPU, {})]
    for name, _ in providers:
        if name not in available:
            raise RepositoryError(_missing(where, name, available))
    return providers


def _gpu_providers(
    where: str, accelerators: Sequence[Accelerator], kind: str, device: str
) -> list[Provider]:
    """TensorRT (if asked) then CUDA for KIND_GPU; nothing for KIND_CPU (after the checks)."""
    _once_each(where, "gpu", accelerators)
    tensorrt: dict[str, OptionValue] | None = None
    cuda: dict[str, OptionValue] = {}
    for accelerator in accelerators:
        if accelerator.name == "tensorrt":
            tensorrt = _tensorrt_options(where, accelerator.parameters)
        elif accelerator.name == "cuda":
            cuda = _cuda_options(where, accelerator.parameters)
        else:
            raise RepositoryError(_unknown(where, accelerator.name, "gpu", GPU_ACCELERATORS))
    if kind != "KIND_GPU":
        return []
    index = {"device_id": _device_index(where, device)}
    first = [] if tensorrt is None else [(TENSORRT, {**tensorrt, **index})]
    return [*first, (CUDA, {**cuda, **index})]


def _once_each(where: str, side: str, accelerators: Sequence[Accelerator]) -> None:
    names = [a.name for a in accelerators]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise RepositoryError(
            f"{where}: {side} execution accelerator '{repeated[0]}' is given more than once"
        )


def _cpu_provider(where: str, accelerator: Accelerator) -> Provider:
    if accelerator.name not in CPU_ACCELERATORS:
        raise RepositoryError(_unknown(where, accelerator.name, "cpu", CPU_ACCELERATORS))
    if accelerator.parameters:
        raise RepositoryError(
            f"{where}: the openvino accelerator takes no parameters, got "
            f"{', '.join(sorted(accelerator.parameters))}"
        )
    return (OPENVINO, {"device_type": "CPU"})  # Triton's one setting for OpenVINO


def _tensorrt_options(where: str, parameters: Mapping[str, str]) -> dict[str, OptionValue]:
    """Triton's TensorRT accelerator parameters as TensorRT execution provider options."""
    options: dict[str, OptionValue] = {}
    for key, raw in parameters.items():
        if key == "precision_mode":
            if raw not in _PRECISIONS:
                raise RepositoryError(
                    f"{where}: tensorrt accelerator parameter precision_mode must be one of "
                    f"{', '.join(_PRECISIONS)}, got {raw!r}"
                )
            options.update(_PRECISIONS[raw])
            continue
        if key not in _TENSORRT_OPTIONS:
            raise RepositoryError(
                f"{where}: unknown parameter '{key}' for the tensorrt accelerator (known: "
                f"precision_mode, {', '.join(sorted(_TENSORRT_OPTIONS))})"
            )
        option, read = _TENSORRT_OPTIONS[key]
        try:
            options[option] = read(raw)
        except ValueError as exc:
            raise RepositoryError(
                f"{where}: tensorrt accelerator parameter {key}: {exc}, got {raw!r}"
            ) from None
    return options


def _cuda_options(where: str, parameters: Mapping[str, str]) -> dict[str, OptionValue]:
    """CUDA provider options, passed through as Triton does (onnxruntime refuses unknown ones
    when the session opens)."""
    options: dict[str, OptionValue] = {}
    for key, raw in parameters.items():
        try:
            options[key] = _flag(raw) if key in _CUDA_FLAGS else raw
        except ValueError as exc:
            raise RepositoryError(
                f"{where}: cuda accelerator parameter {key}: {exc}, got {raw!r}"
            ) from None
    return options


def _device_index(where: str, device: str) -> int:
    prefix, _, index = device.partition(":")
    if prefix != "cuda" or not index.isdigit():
        raise RepositoryError(f"{where}: KIND_GPU needs a device 'cuda:N', got {device!r}")
    return int(index)


def _unknown(where: str, name: str, side: str, known: Sequence[str]) -> str:
    return (
        f"{where}: unknown {side} execution accelerator '{name}' (fnserve's onnxruntime "
        f"backend knows {', '.join(known)})"
    )


def _missing(where: str, provider: str, available: Sequence[str]) -> str:
    what = f"the {_WORDS.get(provider, provider)} execution provider ({provider})"
    if provider == CUDA:
        what = f"KIND_GPU, which needs {what}"
    return (
        f"{where} asks for {what}, which this onnxruntime does not provide (available: "
        f"{', '.join(available) or 'none'}); {_INSTALL.get(provider, 'install a build with it')}"
    )
