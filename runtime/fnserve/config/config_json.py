"""A model config in Triton's JSON form, as `/v2/models/{m}/config` serves it (the gRPC frontend
parses the same form into its protobuf message, so there is one source of truth)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fnserve.config.records import (
    DynamicBatching,
    EnsembleStep,
    InstanceGroup,
    QueuePolicy,
    Tensor,
    VersionPolicy,
    Warmup,
)
from fnserve.tensors import config_type

if TYPE_CHECKING:
    from fnserve.config.model_config import ModelConfig


def config_json(config: ModelConfig) -> dict[str, Any]:
    """Triton's JSON form of `config` (proto field names, `TYPE_*` datatypes)."""
    doc: dict[str, Any] = {
        "name": config.name,
        "platform": config.platform,
        "backend": config.backend,
        "version_policy": _version_policy_json(config.version_policy or VersionPolicy()),
        "max_batch_size": config.max_batch_size,
        "input": [_input_json(t) for t in config.inputs],
        "output": [_output_json(t) for t in config.outputs],
        "instance_group": [
            _group_json(config.name, i, g) for i, g in enumerate(config.instance_group)
        ],
        "parameters": {k: {"string_value": v} for k, v in config.parameters.items()},
        "model_transaction_policy": {"decoupled": False},  # the only one fnserve serves
    }
    if config.dynamic_batching is not None:
        doc["dynamic_batching"] = _batching_json(config.dynamic_batching)
    if config.warmup:
        doc["model_warmup"] = [_warmup_json(w) for w in config.warmup]
    if config.ensemble:
        doc["ensemble_scheduling"] = {"step": [_step_json(s) for s in config.ensemble]}
        # as Triton shows one: no backend, no instances of its own (its steps do the work)
        doc["backend"] = ""
        doc["instance_group"] = []
    return doc


def _version_policy_json(p: VersionPolicy) -> dict[str, Any]:
    if p.choice == "latest":
        return {"latest": {"num_versions": p.num_versions}}
    if p.choice == "all":
        return {"all": {}}
    return {"specific": {"versions": list(p.versions)}}


def _step_json(s: EnsembleStep) -> dict[str, Any]:
    return {
        "model_name": s.model_name,
        "model_version": s.model_version,
        "input_map": dict(s.input_map),
        "output_map": dict(s.output_map),
    }


def _warmup_json(w: Warmup) -> dict[str, Any]:
    inputs: dict[str, Any] = {}
    for name, i in w.inputs.items():
        source: dict[str, Any] = (
            {"zero_data": True}
            if i.data == "zero"
            else {"random_data": True}
            if i.data == "random"
            else {"input_data_file": i.data}
        )
        inputs[name] = {"data_type": config_type(i.datatype), "dims": list(i.dims), **source}
    return {"name": w.name, "batch_size": w.batch_size, "inputs": inputs, "count": w.count}


def _input_json(t: Tensor) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": t.name,
        "data_type": config_type(t.datatype),
        "format": t.format,
        "dims": list(t.dims),
        "optional": t.optional,
    }
    if t.reshape is not None:
        doc["reshape"] = {"shape": list(t.reshape)}
    return doc


def _output_json(t: Tensor) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": t.name,
        "data_type": config_type(t.datatype),
        "dims": list(t.dims),
        "label_filename": t.label_filename,  # Triton prints it, "" when unset
    }
    if t.reshape is not None:
        doc["reshape"] = {"shape": list(t.reshape)}
    return doc


def _group_json(model: str, index: int, g: InstanceGroup) -> dict[str, Any]:
    return {
        "name": g.name or f"{model}_{index}",
        "kind": g.kind,
        "count": g.count,
        "gpus": list(g.gpus),
    }


def _policy_json(p: QueuePolicy) -> dict[str, Any]:
    return {
        "timeout_action": p.timeout_action,
        "default_timeout_microseconds": p.default_timeout_microseconds,
        "allow_timeout_override": p.allow_timeout_override,
        "max_queue_size": p.max_queue_size,
    }


def _batching_json(b: DynamicBatching) -> dict[str, Any]:
    return {
        "preferred_batch_size": list(b.preferred_batch_size),
        "max_queue_delay_microseconds": b.max_queue_delay_microseconds,
        "preserve_ordering": b.preserve_ordering,
        "priority_levels": b.priority_levels,
        "default_priority_level": b.default_priority_level,
        "default_queue_policy": _policy_json(b.default_queue_policy),
        "priority_queue_policy": {
            str(level): _policy_json(p) for level, p in b.priority_queue_policy.items()
        },
    }
