"""Triton's config.pbtxt: parsed with protobuf text format against `model_config.proto`.

`parse_config` reads the text into `inference.ModelConfig` (a misspelt field or a bad value is
a parse error with its line and column), refuses every field fnserve does not implement (named,
with the reason: a field silently ignored would serve something other than what was
configured), and returns the message for the repository to complete from the model file.
`to_model_config` turns a completed message into fnserve's `ModelConfig`, and
`to_accelerators` reads its `optimization.execution_accelerators` (which only the onnxruntime
backend uses, as in Triton).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import text_format
from google.protobuf.message import Message

from fnserve.config.model_config import (
    DynamicBatching,
    EnsembleStep,
    InstanceGroup,
    ModelConfig,
    QueuePolicy,
    Tensor,
    VersionPolicy,
    Warmup,
    WarmupInput,
)
from fnserve.errors import ModelConfigError
from fnserve.protocol import model_config_pb2 as pb
from fnserve.tensors import config_type, protocol_type

# Triton's platform names and the backend that serves each.
PLATFORM_BACKENDS = {
    "ensemble": "ensemble",
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "tensorrt_plan": "tensorrt",
}
BACKEND_PLATFORMS = {backend: platform for platform, backend in PLATFORM_BACKENDS.items()}

# Fields fnserve reads; any other field that is set is refused with `_UNSUPPORTED`'s reason.
_SUPPORTED = frozenset(
    {
        "name", "platform", "backend", "max_batch_size", "default_model_filename", "parameters",
        "version_policy", "version_policy.latest", "version_policy.latest.num_versions",
        "version_policy.all", "version_policy.specific", "version_policy.specific.versions",
        "input", "input.name", "input.data_type", "input.dims", "input.optional",
        "input.reshape", "input.reshape.shape", "input.format",
        "output", "output.name", "output.data_type", "output.dims",
        "output.reshape", "output.reshape.shape", "output.label_filename",
        "instance_group", "instance_group.name", "instance_group.count", "instance_group.kind",
        "instance_group.gpus",
        "dynamic_batching", "dynamic_batching.preferred_batch_size",
        "dynamic_batching.max_queue_delay_microseconds", "dynamic_batching.preserve_ordering",
        "dynamic_batching.priority_levels", "dynamic_batching.default_priority_level",
        "dynamic_batching.default_queue_policy", "dynamic_batching.priority_queue_policy",
        "model_warmup", "model_warmup.name", "model_warmup.batch_size", "model_warmup.inputs",
        "model_warmup.count",
        "ensemble_scheduling", "ensemble_scheduling.step", "ensemble_scheduling.step.model_name",
        "ensemble_scheduling.step.model_version", "ensemble_scheduling.step.input_map",
        "ensemble_scheduling.step.output_map",
        "optimization", "optimization.execution_accelerators",
        "optimization.execution_accelerators.gpu_execution_accelerator",
        "optimization.execution_accelerators.gpu_execution_accelerator.name",
        "optimization.execution_accelerators.gpu_execution_accelerator.parameters",
        "optimization.execution_accelerators.cpu_execution_accelerator",
        "optimization.execution_accelerators.cpu_execution_accelerator.name",
        "optimization.execution_accelerators.cpu_execution_accelerator.parameters",
        # `decoupled: false` (the default, which many configs state) sets no field inside
        "model_transaction_policy",
    }
)  # fmt: skip
# Every field of a queue policy is supported.
_QUEUE_POLICIES = (
    "dynamic_batching.default_queue_policy.",
    "dynamic_batching.priority_queue_policy.",
)
_UNSUPPORTED = {
    "sequence_batching": "sequence batching is not implemented yet",
    "optimization.graph": "graph optimization levels are not implemented (onnxruntime runs "
    "every graph optimization)",
    "optimization.priority": "model priorities are not implemented",
    "optimization.cuda": "CUDA graphs and CUDA stream settings are not implemented",
    "optimization.input_pinned_memory": "pinned-memory settings are not implemented",
    "optimization.output_pinned_memory": "pinned-memory settings are not implemented",
    "optimization.gather_kernel_buffer_threshold": "the gather kernel is not implemented",
    "optimization.eager_batching": "eager batching is not implemented",
    "input.is_shape_tensor": "shape tensors are TensorRT-only and not implemented",
    "output.is_shape_tensor": "shape tensors are TensorRT-only and not implemented",
    "input.allow_ragged_batch": "ragged batching is not implemented",
    "batch_input": "batch inputs are not implemented",
    "batch_output": "batch outputs are not implemented",
    "response_cache": "the response cache is not implemented",
    "model_transaction_policy.decoupled": "decoupled models (several responses per request) "
    "are not implemented; only decoupled: false is served",
}


# The one backend that reads `optimization.execution_accelerators` (Triton's ORT backend).
ACCELERATED_BACKEND = "onnxruntime"


@dataclass(frozen=True)
class Accelerator:
    """One of Triton's execution accelerators: a name and its string parameters.

    Example:
        `Accelerator("tensorrt", {"precision_mode": "FP16"})`
    """

    name: str
    parameters: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ExecutionAccelerators:
    """`optimization.execution_accelerators`: the GPU and CPU accelerators, in config order."""

    gpu: tuple[Accelerator, ...] = ()
    cpu: tuple[Accelerator, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.gpu or self.cpu)


def parse_config(text: str, where: str) -> pb.ModelConfig:
    """Parse config.pbtxt text and refuse the fields fnserve does not implement.

    Args:
        text: the file's content.
        where: the file, for messages.

    Raises:
        ModelConfigError: a syntax error, an unknown field, or an unsupported field.
    """
    message = pb.ModelConfig()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as exc:
        raise ModelConfigError(f"'{where}': {exc}") from exc
    for path in _set_fields(message):
        if path in _SUPPORTED or path.startswith(_QUEUE_POLICIES):
            continue
        reason = _UNSUPPORTED.get(path, "fnserve does not implement it")
        raise ModelConfigError(f"'{where}': field '{path}' is not supported: {reason}")
    return message


def _set_fields(message: Message, prefix: str = "") -> Iterator[str]:
    """Dotted paths of every field set in `message` (repeated fields: once per field)."""
    for descriptor, value in message.ListFields():
        path = f"{prefix}{descriptor.name}"
        yield path
        if descriptor.message_type is None or descriptor.message_type.GetOptions().map_entry:
            continue
        items = value if descriptor.is_repeated else [value]
        for item in items:
            yield from _set_fields(item, path + ".")


def datatype(code: int, where: str) -> str:
    """The protocol datatype ("FP32") of a config `TYPE_*` value."""
    name = pb.DataType.Name(code)
    if name == "TYPE_INVALID":
        raise ModelConfigError(f"{where}: data_type is missing")
    return protocol_type(name)


def config_datatype(protocol: str) -> int:
    """The config `TYPE_*` value of a protocol datatype."""
    return int(pb.DataType.Value(config_type(protocol)))


def to_model_config(
    message: pb.ModelConfig,
    version: int,
    warmup_dir: Path | None = None,
    model_dir: Path | None = None,
) -> ModelConfig:
    """fnserve's `ModelConfig` for one version of a completed config message.

    Args:
        message: the completed config.
        version: the version it is for.
        warmup_dir: where `input_data_file`s of warmup samples are (`<model>/warmup/`).
        model_dir: the model's directory, where outputs' `label_filename`s are read.

    Raises:
        ModelConfigError: a value fnserve (or Triton) refuses, or a label file that cannot
            be read or lies outside the model directory.
    """
    name = message.name
    backend = message.backend or PLATFORM_BACKENDS.get(message.platform, message.platform)
    return ModelConfig(
        name=name,
        inputs=[_tensor(t, name, optional=t.optional) for t in message.input],
        outputs=[_output(t, name, model_dir) for t in message.output],
        version=version,
        max_batch_size=message.max_batch_size,
        dynamic_batching=_batching(message) if message.HasField("dynamic_batching") else None,
        instance_group=[_group(g) for g in message.instance_group] or (InstanceGroup(),),
        parameters={k: v.string_value for k, v in message.parameters.items()},
        backend=backend,
        platform=message.platform or BACKEND_PLATFORMS.get(backend, ""),
        warmup=[_warmup(w, warmup_dir) for w in message.model_warmup],
        ensemble=[
            EnsembleStep(s.model_name, dict(s.input_map), dict(s.output_map), s.model_version)
            for s in message.ensemble_scheduling.step
        ],
        version_policy=_version_policy(message.version_policy),
    )


def to_accelerators(message: pb.ModelConfig) -> ExecutionAccelerators:
    """The execution accelerators of a completed config message (its backend is set).

    Raises:
        ModelConfigError: accelerators are set for a backend that does not use them (only
            onnxruntime does); ignoring them would serve something other than configured.
    """
    eas = message.optimization.execution_accelerators
    accelerators = ExecutionAccelerators(
        gpu=tuple(Accelerator(a.name, dict(a.parameters)) for a in eas.gpu_execution_accelerator),
        cpu=tuple(Accelerator(a.name, dict(a.parameters)) for a in eas.cpu_execution_accelerator),
    )
    if accelerators and message.backend != ACCELERATED_BACKEND:
        raise ModelConfigError(
            f"model '{message.name}': field 'optimization.execution_accelerators' is not "
            f"supported by backend '{message.backend}': only the {ACCELERATED_BACKEND} "
            f"backend uses execution accelerators"
        )
    return accelerators


def _warmup(w: pb.ModelWarmup, warmup_dir: Path | None) -> Warmup:
    inputs = {}
    for name, i in w.inputs.items():
        where = f"warmup '{w.name}' input '{name}'"
        source = i.WhichOneof("input_data_type")
        if source == "input_data_file":
            data = str((warmup_dir or Path("warmup")) / i.input_data_file)
        elif source == "random_data":
            data = "random"
        else:
            data = "zero"
        inputs[name] = WarmupInput(datatype(i.data_type, where), list(i.dims), data)
    return Warmup(w.name, inputs, w.batch_size, w.count or 1)


def _version_policy(p: pb.ModelVersionPolicy) -> VersionPolicy:
    """The policy as configured; none is Triton's default, the latest version."""
    choice = p.WhichOneof("policy_choice")
    if choice == "all":
        return VersionPolicy("all")
    if choice == "specific":
        return VersionPolicy("specific", versions=list(p.specific.versions))
    return VersionPolicy(num_versions=p.latest.num_versions if choice == "latest" else 1)


def _tensor(t: Any, model: str, optional: bool = False) -> Tensor:
    where = f"model '{model}' tensor '{t.name}'"
    reshape = list(t.reshape.shape) if t.HasField("reshape") else None
    layout = pb.ModelInput.Format.Name(t.format) if isinstance(t, pb.ModelInput) else None
    return Tensor(
        t.name, datatype(t.data_type, where), list(t.dims), optional, reshape,
        layout or "FORMAT_NONE",
    )  # fmt: skip


def _output(t: pb.ModelOutput, model: str, model_dir: Path | None) -> Tensor:
    tensor = _tensor(t, model)
    if not t.label_filename:
        return tensor
    labels = read_labels(t.label_filename, f"output '{t.name}' in model '{model}'", model_dir)
    return dataclasses.replace(tensor, labels=labels, label_filename=t.label_filename)


def read_labels(filename: str, where: str, model_dir: Path | None) -> tuple[str, ...]:
    """The lines of a label file in the model directory, as Triton reads them: split at
    newlines (a last newline ends the last label); bytes that are not UTF-8 come back
    unchanged in the answers (held as surrogate escapes).

    Raises:
        ModelConfigError: no model directory, a path outside it (Triton's message), or a
            file that cannot be read.
    """
    if model_dir is None:
        raise ModelConfigError(f"label file '{filename}' for {where}: no model directory")
    path = model_dir / filename
    if not path.resolve().is_relative_to(model_dir.resolve()):
        raise ModelConfigError(
            f"label file path '{filename}' for {where} is outside model directory"
        )
    try:
        text = path.read_bytes().decode("utf-8", "surrogateescape")
    except OSError as exc:
        raise ModelConfigError(
            f"label file '{filename}' for {where} cannot be read: {exc.strerror}"
        ) from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return tuple(lines)


def _group(g: pb.ModelInstanceGroup) -> InstanceGroup:
    kind = pb.ModelInstanceGroup.Kind.Name(g.kind)
    if kind == "KIND_MODEL":
        raise ModelConfigError(f"instance group '{g.name}': KIND_MODEL is not supported")
    return InstanceGroup(count=g.count or 1, kind=kind, gpus=list(g.gpus), name=g.name)  # type: ignore[arg-type]


def _policy(p: pb.ModelQueuePolicy) -> QueuePolicy:
    return QueuePolicy(
        timeout_action=pb.ModelQueuePolicy.TimeoutAction.Name(p.timeout_action),  # type: ignore[arg-type]
        default_timeout_microseconds=p.default_timeout_microseconds,
        allow_timeout_override=p.allow_timeout_override,
        max_queue_size=p.max_queue_size,
    )


def _batching(message: pb.ModelConfig) -> DynamicBatching:
    b = message.dynamic_batching
    return DynamicBatching(
        preferred_batch_size=list(b.preferred_batch_size),
        max_queue_delay_microseconds=b.max_queue_delay_microseconds,
        preserve_ordering=b.preserve_ordering,
        priority_levels=b.priority_levels,
        default_priority_level=b.default_priority_level,
        default_queue_policy=_policy(b.default_queue_policy),
        priority_queue_policy={k: _policy(v) for k, v in b.priority_queue_policy.items()},
    )
