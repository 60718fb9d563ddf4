"""The checks a `ModelConfig` passes when it is built (that is, when `@model` runs at import
time, or a config.pbtxt is read): each refusal is a `ModelConfigError` naming the model, the
field, the value and what is allowed. Also where a setting given both as a field and as a
parameter is reconciled."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from fnserve.config.records import (
    EXECUTION_TIMEOUT_KEY,
    IDLE_TIMEOUT_KEY,
    MAX_INSTANCES_KEY,
    MIN_INSTANCES_KEY,
    DynamicBatching,
    EnsembleStep,
    InstanceGroup,
    QueuePolicy,
    Tensor,
    Warmup,
)
from fnserve.errors import ModelConfigError
from fnserve.tensors import DATATYPES

if TYPE_CHECKING:
    from fnserve.config.model_config import ModelConfig

_KINDS = ("KIND_AUTO", "KIND_CPU", "KIND_GPU")
_ACTIONS = ("REJECT", "DELAY")
_ISOLATIONS = ("thread", "process")
_FORMATS = ("FORMAT_NONE", "FORMAT_NCHW", "FORMAT_NHWC")  # Triton's input formats


def validate(config: ModelConfig) -> None:
    """Check `config` and fill the settings held in two places (see `_merge_parameters`).

    Raises:
        ModelConfigError: a field holds a value Triton would refuse.
    """
    _ConfigValidator(config).validate()
    _merge_parameters(config)
    _check_instance_bounds(config)


def _is_int(value: object) -> bool:
    return type(value) is int


def _merge_parameters(config: ModelConfig) -> None:
    """Settings held in two places: a field (from `@model`) and `parameters` (config.pbtxt,
    Triton's JSON). The field fills the parameter so the config JSON shows it; a parameter
    alone fills the field. Both given and different is an error."""
    for key, parse in _FIELD_PARAMETERS.items():
        name = config.name
        raw = config.parameters.get(key)
        from_parameter = None if raw is None else parse(name, key, raw)
        value = getattr(config, key)
        if value is None:
            object.__setattr__(config, key, from_parameter)
            continue
        value = parse(name, key, value)
        if from_parameter is not None and from_parameter != value:
            raise ModelConfigError(
                f"model '{name}': {key}={value:g} disagrees with parameter {key}={raw!r}; "
                f"set one of them"
            )
        object.__setattr__(config, key, value)
        object.__setattr__(config, "parameters", {**config.parameters, key: f"{value:g}"})


def _check_instance_bounds(config: ModelConfig) -> None:
    low, high = config.min_instances or 0, config.max_instances
    if high is not None and high < max(low, 1):
        raise ModelConfigError(
            f"model '{config.name}': max_instances={high} must be at least 1 and at least "
            f"min_instances={low}"
        )
    if high is not None and config.ensemble:
        raise ModelConfigError(f"ensemble '{config.name}' has no instances to scale")


def _seconds(model: str, key: str, raw: object) -> float:
    try:
        value = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        value = -1.0
    if isinstance(raw, bool) or not value >= 0 or value == float("inf"):
        raise ModelConfigError(
            f"model '{model}': {key} must be a number of seconds >= 0 (0: no limit), got {raw!r}"
        )
    return value


def _count(model: str, key: str, raw: object) -> int:
    try:
        value = int(str(raw))
    except ValueError:
        value = -1
    if isinstance(raw, bool) or isinstance(raw, float) or value < 0:
        raise ModelConfigError(f"model '{model}': {key} must be an integer >= 0, got {raw!r}")
    return value


# Field name == parameter key -> its parser (model name, key, raw value).
_FIELD_PARAMETERS: dict[str, Callable[[str, str, object], float]] = {
    EXECUTION_TIMEOUT_KEY: _seconds,
    IDLE_TIMEOUT_KEY: _seconds,
    MIN_INSTANCES_KEY: _count,
    MAX_INSTANCES_KEY: _count,
}


class _ConfigValidator:
    """Checks one ModelConfig; every message names the model, the field and the value."""

    def __init__(self, config: ModelConfig) -> None:
        self.config = config

    def fail(self, detail: str) -> None:
        raise ModelConfigError(f"model '{self.config.name}': {detail}")

    def validate(self) -> None:
        c = self.config
        if not isinstance(c.name, str) or not c.name or "/" in c.name:
            raise ModelConfigError(
                f"model name must be a non-empty string without '/', got {c.name!r}"
            )
        if isinstance(c.version, bool) or not isinstance(c.version, int) or c.version < 1:
            self.fail(f"version must be an integer >= 1, got {c.version!r}")
        if (
            isinstance(c.max_batch_size, bool)
            or not isinstance(c.max_batch_size, int)
            or c.max_batch_size < 0
        ):
            self.fail(f"max_batch_size must be an integer >= 0, got {c.max_batch_size!r}")
        self._tensors("inputs", c.inputs)
        self._tensors("outputs", c.outputs)
        for group in c.instance_group:
            self._group(group)
        if c.dynamic_batching is not None:
            self._batching(c.dynamic_batching)
        for key, value in c.parameters.items():
            if not isinstance(key, str) or not isinstance(value, str):
                self.fail(f"parameters must map strings to strings, got {key!r}: {value!r}")
        for sample in c.warmup:
            self._warmup(sample)
        if c.ensemble:
            self._ensemble(c.ensemble)

    def _ensemble(self, steps: Sequence[EnsembleStep]) -> None:
        """Every step reads tensors that exist, every output is produced, once, with no cycle."""
        available = {t.name for t in self.config.inputs}
        produced: dict[str, int] = {}
        for index, step in enumerate(steps):
            for tensor in step.output_map.values():
                if tensor in produced or tensor in available:
                    self.fail(f"ensemble tensor '{tensor}' is written twice (step {index})")
                produced[tensor] = index
        pending = list(enumerate(steps))
        while pending:  # a topological pass: a step runs once all it reads exists
            ready = [(i, s) for i, s in pending if set(s.input_map.values()) <= available]
            if not ready:
                i, s = pending[0]
                missing = sorted(set(s.input_map.values()) - available)
                self.fail(
                    f"ensemble step {i} ('{s.model_name}') reads {missing}, which no ensemble "
                    f"input or earlier step provides (or the steps form a cycle)"
                )
            for i, s in ready:
                pending.remove((i, s))
                available |= set(s.output_map.values())
        missing = sorted(t.name for t in self.config.outputs if t.name not in available)
        if missing:
            self.fail(f"ensemble output(s) {missing} are produced by no step")

    def _warmup(self, w: Warmup) -> None:
        where = f"warmup '{w.name}'"
        if not _is_int(w.count) or w.count < 1:
            self.fail(f"{where}: count must be an integer >= 1, got {w.count!r}")
        limit = self.config.max_batch_size or 1
        if not _is_int(w.batch_size) or not 0 <= w.batch_size <= limit:
            self.fail(f"{where}: batch_size must be between 0 and {limit}, got {w.batch_size!r}")
        declared = {t.name: t for t in self.config.inputs}
        unknown = sorted(set(w.inputs) - set(declared))
        missing = sorted(n for n, t in declared.items() if not t.optional and n not in w.inputs)
        if unknown or missing:
            self.fail(f"{where}: unknown input(s) {unknown}, missing input(s) {missing}")
        for name, i in w.inputs.items():
            if i.datatype != declared[name].datatype:
                self.fail(
                    f"{where}: input '{name}' has datatype {i.datatype}, the model declares "
                    f"{declared[name].datatype}"
                )
            if any(not _is_int(d) or d < 1 for d in i.dims):
                self.fail(f"{where}: input '{name}' needs concrete dims (>= 1), got {list(i.dims)}")

    def _tensors(self, field_name: str, tensors: Sequence[Tensor]) -> None:
        if not tensors:
            self.fail(f"{field_name} must declare at least one tensor")
        seen: set[str] = set()
        for t in tensors:
            if not isinstance(t, Tensor):
                self.fail(f"{field_name} must hold Tensor(...) declarations, got {t!r}")
            if type(t.name) is not str or not t.name or t.name in seen:
                self.fail(
                    f"{field_name}: tensor names must be unique and non-empty, got {t.name!r}"
                )
            seen.add(t.name)
            if type(t.datatype) is not str or t.datatype not in DATATYPES:
                self.fail(
                    f"{field_name} '{t.name}': datatype {t.datatype!r} is not one of "
                    f"{', '.join(DATATYPES)}"
                )
            if not t.dims or any(not _is_int(d) or d < -1 for d in t.dims):
                self.fail(
                    f"{field_name} '{t.name}': dims must be a non-empty list of integers >= -1, "
                    f"got {list(t.dims)}"
                )
            if t.reshape is not None:
                self._reshape(field_name, t)
            if t.format not in _FORMATS:
                self.fail(
                    f"{field_name} '{t.name}': format must be one of {', '.join(_FORMATS)}, "
                    f"got {t.format!r}"
                )
            if type(t.optional) is not bool:
                self.fail(f"{field_name} '{t.name}': optional must be true or false")
            if field_name == "outputs" and t.optional:
                self.fail(f"output '{t.name}': only inputs can be optional")
            if t.labels is not None or t.label_filename:
                self._labels(field_name, t)

    def _labels(self, field_name: str, t: Tensor) -> None:
        if field_name != "outputs":
            self.fail(f"input '{t.name}': only outputs can have labels")
        if t.labels is None or any(type(label) is not str for label in t.labels):
            self.fail(f"output '{t.name}': labels must be a list of strings, got {t.labels!r}")

    def _reshape(self, field_name: str, t: Tensor) -> None:
        """Triton's rule: the same elements, and as many variable dims on both sides (the
        n-th variable dim of `reshape` takes the n-th of `dims`)."""
        assert t.reshape is not None
        if any(not _is_int(d) or d < -1 for d in t.reshape):
            self.fail(
                f"{field_name} '{t.name}': reshape must be a list of integers >= -1, "
                f"got {list(t.reshape)}"
            )
        fixed = [math.prod(d for d in dims if d != -1) for dims in (t.dims, t.reshape)]
        variable = [list(dims).count(-1) for dims in (t.dims, t.reshape)]
        if fixed[0] != fixed[1] or variable[0] != variable[1]:
            self.fail(
                f"{field_name} '{t.name}': reshape {list(t.reshape)} does not hold the same "
                f"elements as dims {list(t.dims)} (fixed sizes multiply to {fixed[1]} and "
                f"{fixed[0]}; variable dims {variable[1]} and {variable[0]})"
            )

    def _group(self, g: InstanceGroup) -> None:
        if not isinstance(g, InstanceGroup):
            self.fail(f"instance_group must hold InstanceGroup(...) entries, got {g!r}")
        if isinstance(g.count, bool) or not isinstance(g.count, int) or g.count < 1:
            self.fail(f"instance_group count must be an integer >= 1, got {g.count!r}")
        if type(g.kind) is not str or g.kind not in _KINDS:
            self.fail(f"instance_group kind must be one of {', '.join(_KINDS)}, got {g.kind!r}")
        if g.gpus and g.kind == "KIND_CPU":
            self.fail(f"instance_group gpus {list(g.gpus)} given for KIND_CPU; use KIND_GPU")
        if any(not _is_int(i) or i < 0 for i in g.gpus):
            self.fail(f"instance_group gpus must be GPU indices >= 0, got {list(g.gpus)}")
        if g.isolation not in _ISOLATIONS:
            self.fail(
                f"instance_group isolation must be 'thread' or 'process', got {g.isolation!r}"
            )

    def _batching(self, b: DynamicBatching) -> None:
        c = self.config
        if not isinstance(b, DynamicBatching):
            self.fail(f"dynamic_batching must be DynamicBatching(...), got {b!r}")
        if not c.batching:
            self.fail("dynamic_batching needs max_batch_size >= 1")
        for size in b.preferred_batch_size:
            if not _is_int(size) or not 1 <= size <= c.max_batch_size:
                self.fail(
                    f"preferred_batch_size {size!r} must be between 1 and max_batch_size "
                    f"{c.max_batch_size}"
                )
        if not _is_int(b.max_queue_delay_microseconds) or b.max_queue_delay_microseconds < 0:
            self.fail(
                f"max_queue_delay_microseconds must be >= 0, got {b.max_queue_delay_microseconds!r}"
            )
        if not _is_int(b.priority_levels) or b.priority_levels < 0:
            self.fail(f"priority_levels must be >= 0, got {b.priority_levels!r}")
        levels = b.priority_levels
        if type(b.preserve_ordering) is not bool:
            self.fail(f"preserve_ordering must be true or false, got {b.preserve_ordering!r}")
        if not _is_int(b.default_priority_level) or (
            levels and not 1 <= b.default_priority_level <= levels
        ):
            self.fail(
                f"default_priority_level {b.default_priority_level!r} must be between 1 and "
                f"priority_levels {levels}"
            )
        for level, policy in b.priority_queue_policy.items():
            if not levels or not _is_int(level) or not 1 <= level <= levels:
                self.fail(f"priority_queue_policy level {level!r} is outside 1..{levels}")
            self._policy(policy)
        self._policy(b.default_queue_policy)

    def _policy(self, p: QueuePolicy) -> None:
        if not isinstance(p, QueuePolicy):
            self.fail(f"queue policy must be QueuePolicy(...), got {p!r}")
        if type(p.timeout_action) is not str or p.timeout_action not in _ACTIONS:
            self.fail(f"timeout_action must be REJECT or DELAY, got {p.timeout_action!r}")
        if type(p.allow_timeout_override) is not bool:
            self.fail(
                f"allow_timeout_override must be true or false, got {p.allow_timeout_override!r}"
            )
        numbers = (p.default_timeout_microseconds, p.max_queue_size)
        if not all(_is_int(n) for n in numbers) or min(numbers) < 0:
            self.fail("default_timeout_microseconds and max_queue_size must be >= 0")
