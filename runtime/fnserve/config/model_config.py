"""Model configuration: frozen records named after Triton's `model_config.proto`.

Validation runs when a `ModelConfig` is built (that is, when `@model` runs at import time) and
raises `ModelConfigError` naming the model, the field, the value and what is allowed.
`ModelConfig.to_json()` gives the JSON form Triton serves at `/v2/models/{m}/config`; the gRPC
frontend parses that same form into the protobuf message, so there is one source of truth.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from fnserve.config.tensor_plan import TensorPlan
from fnserve.errors import ModelConfigError
from fnserve.limits import quote
from fnserve.tensors import DATATYPES, config_type

InstanceKind = Literal["KIND_AUTO", "KIND_CPU", "KIND_GPU"]
TimeoutAction = Literal["REJECT", "DELAY"]
Isolation = Literal["thread", "process"]
_KINDS = ("KIND_AUTO", "KIND_CPU", "KIND_GPU")
_ACTIONS = ("REJECT", "DELAY")
_ISOLATIONS = ("thread", "process")
# The `parameters` key that carries the execution timeout (what a config.pbtxt would set).
EXECUTION_TIMEOUT_KEY = "execution_timeout_s"
IDLE_TIMEOUT_KEY = "idle_timeout_s"
MIN_INSTANCES_KEY = "min_instances"
MAX_INSTANCES_KEY = "max_instances"


def _freeze(record: object, name: str, kind: type[tuple[Any, ...]] | type[dict[Any, Any]]) -> None:
    """Replace field `name` of a frozen record by its tuple/dict copy, or refuse it."""
    value = getattr(record, name)
    try:
        frozen = kind(value)
    except (TypeError, ValueError):
        shape = "a list" if kind is tuple else "a mapping"
        raise ModelConfigError(
            f"{type(record).__name__} {name} must be {shape}, got {quote(value)}"
        ) from None
    object.__setattr__(record, name, frozen)


def _is_int(value: object) -> bool:
    return type(value) is int


@dataclass(frozen=True)
class Tensor:
    """An input or output declaration.

    Args:
        name: tensor name on the wire.
        datatype: protocol name: BOOL, UINT8..UINT64, INT8..INT64, FP16, FP32, FP64, BYTES, BF16.
        dims: shape without the batch dimension when max_batch_size > 0; -1 means any size.
        optional: (inputs only) the request may leave it out.

    Example:
        `Tensor("INPUT0", "FP32", [-1])`
    """

    name: str
    datatype: str
    dims: Sequence[int]
    optional: bool = False

    def __post_init__(self) -> None:
        dims = self.dims
        # Checked here because tuple(4) would say "'int' object is not iterable"; the values
        # are checked with the rest of the model's declaration.
        if isinstance(dims, str | bytes) or not isinstance(dims, Sequence):
            raise ModelConfigError(
                f"tensor '{self.name}': dims must be a list of ints such as [4] or [-1], "
                f"got {dims!r}"
            )
        _freeze(self, "dims", tuple)


@dataclass(frozen=True)
class QueuePolicy:
    """Triton's ModelQueuePolicy: how long a request may wait and how many may wait.

    Args:
        timeout_action: REJECT fails a request whose timeout expired; DELAY runs it after the
            others.
        default_timeout_microseconds: 0 means no timeout.
        allow_timeout_override: a request's `timeout` parameter may shorten the default.
        max_queue_size: requests beyond this many waiting are rejected at once; 0 = unbounded.
    """

    timeout_action: TimeoutAction = "REJECT"
    default_timeout_microseconds: int = 0
    allow_timeout_override: bool = False
    max_queue_size: int = 0


@dataclass(frozen=True)
class DynamicBatching:
    """Triton's dynamic batcher settings.

    Args:
        preferred_batch_size: batch sizes to dispatch as soon as they can be formed.
        max_queue_delay_microseconds: how long a request may wait for a batch to fill.
        preserve_ordering: responses leave in the order requests arrived.
        priority_levels: number of levels (1 is the highest); 0 disables priorities.
        default_priority_level: level of requests that give no (or an out-of-range) priority.
        default_queue_policy: queue policy for every level without its own.
        priority_queue_policy: per-level queue policies.
    """

    preferred_batch_size: Sequence[int] = ()
    max_queue_delay_microseconds: int = 0
    preserve_ordering: bool = False
    priority_levels: int = 0
    default_priority_level: int = 0
    default_queue_policy: QueuePolicy = field(default_factory=QueuePolicy)
    priority_queue_policy: Mapping[int, QueuePolicy] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _freeze(self, "preferred_batch_size", tuple)
        _freeze(self, "priority_queue_policy", dict)

    def queue_policy(self, level: int) -> QueuePolicy:
        """The policy that governs priority `level`."""
        return self.priority_queue_policy.get(level, self.default_queue_policy)


@dataclass(frozen=True)
class InstanceGroup:
    """Triton's instance group: `count` instances of the model on each device of `kind`.

    Args:
        count: instances per device (per GPU listed in `gpus` for KIND_GPU).
        kind: KIND_CPU, KIND_GPU, or KIND_AUTO (GPU when one exists, else CPU).
        gpus: GPU indices for KIND_GPU; empty means every visible GPU.
        name: group name; defaults to `<model>_<index>`.
        isolation: "thread" runs each instance on its own thread of the server process;
            "process" runs it in a worker process (fnserve only: not in Triton's config JSON).
    """

    count: int = 1
    kind: InstanceKind = "KIND_AUTO"
    gpus: Sequence[int] = ()
    name: str = ""
    isolation: Isolation = "thread"

    def __post_init__(self) -> None:
        _freeze(self, "gpus", tuple)


@dataclass(frozen=True)
class WarmupInput:
    """One input of a warmup request (Triton's ModelWarmup.Input).

    Args:
        datatype: protocol datatype (FP32, BYTES, ...).
        dims: its shape without the batch dimension (the sample's `batch_size` adds it).
        data: "zero" (zeros; empty strings for BYTES), "random", or the path of a file of
            raw little-endian values (BYTES: 4-byte length + bytes per element), as Triton's
            `input_data_file` (relative to the model directory's `warmup/` folder).
    """

    datatype: str
    dims: Sequence[int]
    data: str = "zero"

    def __post_init__(self) -> None:
        _freeze(self, "dims", tuple)


@dataclass(frozen=True)
class Warmup:
    """One warmup sample (Triton's ModelWarmup): run `count` times before the model is READY.

    Args:
        name: the sample's name, for messages.
        inputs: every input the model needs, by name.
        batch_size: rows per request (0 or 1 for a model without batching).
        count: how many times it runs.
    """

    name: str
    inputs: Mapping[str, WarmupInput]
    batch_size: int = 1
    count: int = 1

    def __post_init__(self) -> None:
        _freeze(self, "inputs", dict)


@dataclass(frozen=True)
class EnsembleStep:
    """One step of an ensemble (Triton's ModelEnsembling.Step).

    Args:
        model_name: the model this step runs.
        model_version: its version, -1 for the latest ready one.
        input_map: the step model's input name -> the ensemble tensor it reads.
        output_map: the step model's output name -> the ensemble tensor it writes.
    """

    model_name: str
    input_map: Mapping[str, str]
    output_map: Mapping[str, str]
    model_version: int = -1

    def __post_init__(self) -> None:
        _freeze(self, "input_map", dict)
        _freeze(self, "output_map", dict)


@dataclass(frozen=True)
class ModelConfig:
    """Everything fnserve knows about one model version; validated on construction.

    Raises:
        ModelConfigError: a field holds a value Triton would refuse.
    """

    name: str
    inputs: Sequence[Tensor]
    outputs: Sequence[Tensor]
    version: int = 1
    max_batch_size: int = 0
    dynamic_batching: DynamicBatching | None = None
    instance_group: Sequence[InstanceGroup] = (InstanceGroup(),)
    parameters: Mapping[str, str] = field(default_factory=dict)
    backend: str = "python"
    execution_timeout_s: float | None = None
    idle_timeout_s: float | None = None  # scale to zero after this long unused (0: never)
    min_instances: int | None = None  # > 0: never scaled to zero nor evicted
    max_instances: int | None = None  # set: instances follow the load, up to this many
    platform: str = ""  # Triton's platform name, when a config.pbtxt gives one
    warmup: Sequence[Warmup] = ()
    ensemble: Sequence[EnsembleStep] = ()  # the steps of an ensemble (platform "ensemble")

    def __post_init__(self) -> None:
        for name in ("inputs", "outputs", "instance_group", "warmup", "ensemble"):
            _freeze(self, name, tuple)
        _freeze(self, "parameters", dict)
        _ConfigValidator(self).validate()
        _merge_parameters(self)
        _check_instance_bounds(self)

    @property
    def batching(self) -> bool:
        """Whether requests carry a leading batch dimension."""
        return self.max_batch_size > 0

    def input(self, name: str) -> Tensor | None:
        """The input declaration called `name`, if any."""
        return self._inputs_by_name.get(name)

    # Looked up on every request: built once (a frozen dataclass still allows cached_property).
    @functools.cached_property
    def _inputs_by_name(self) -> dict[str, Tensor]:
        return {t.name: t for t in self.inputs}

    @functools.cached_property
    def plan(self) -> TensorPlan:
        """Its tensor declarations compiled for the fast checks of every request."""
        return TensorPlan(self)

    @functools.cached_property
    def input_datatypes(self) -> dict[str, str]:
        """Input name -> datatype, in declaration order."""
        return {t.name: t.datatype for t in self.inputs}

    @functools.cached_property
    def output_datatypes(self) -> dict[str, str]:
        """Output name -> datatype, in declaration order."""
        return {t.name: t.datatype for t in self.outputs}

    def full_shape(self, tensor: Tensor) -> list[int]:
        """Shape as clients see it: `[-1] + dims` when batching, else `dims`."""
        return [-1, *tensor.dims] if self.batching else list(tensor.dims)

    def matches_dims(self, tensor: Tensor, shape: tuple[int, ...]) -> bool:
        """Whether a full `shape` (batch dimension included when batching) fits `tensor.dims`."""
        dims = shape[1:] if self.batching else shape
        if self.batching and not shape or len(dims) != len(tensor.dims):
            return False
        return all(d == s or s == -1 for d, s in zip(dims, tensor.dims, strict=True))

    def to_json(self) -> dict[str, Any]:
        """Triton's JSON form of this config (proto field names, `TYPE_*` datatypes)."""
        doc: dict[str, Any] = {
            "name": self.name,
            "platform": self.platform,
            "backend": self.backend,
            "version_policy": {"specific": {"versions": [self.version]}},
            "max_batch_size": self.max_batch_size,
            "input": [_input_json(t) for t in self.inputs],
            "output": [_output_json(t) for t in self.outputs],
            "instance_group": [
                _group_json(self.name, i, g) for i, g in enumerate(self.instance_group)
            ],
            "parameters": {k: {"string_value": v} for k, v in self.parameters.items()},
        }
        if self.dynamic_batching is not None:
            doc["dynamic_batching"] = _batching_json(self.dynamic_batching)
        if self.warmup:
            doc["model_warmup"] = [_warmup_json(w) for w in self.warmup]
        if self.ensemble:
            doc["ensemble_scheduling"] = {"step": [_step_json(s) for s in self.ensemble]}
        return doc


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


def _input_json(t: Tensor) -> dict[str, Any]:
    return {
        "name": t.name,
        "data_type": config_type(t.datatype),
        "format": "FORMAT_NONE",
        "dims": list(t.dims),
        "optional": t.optional,
    }


def _output_json(t: Tensor) -> dict[str, Any]:
    return {"name": t.name, "data_type": config_type(t.datatype), "dims": list(t.dims)}


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
            if type(t.optional) is not bool:
                self.fail(f"{field_name} '{t.name}': optional must be true or false")
            if field_name == "outputs" and t.optional:
                self.fail(f"output '{t.name}': only inputs can be optional")

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
