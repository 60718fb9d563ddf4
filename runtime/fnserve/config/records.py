"""The parts of a model configuration: frozen records named after Triton's `model_config.proto`
(tensors, batching, instance groups, warmup, ensemble steps). `ModelConfig` (model_config.py)
holds them and checks them together (validation.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from fnserve.errors import ModelConfigError
from fnserve.limits import quote

InstanceKind = Literal["KIND_AUTO", "KIND_CPU", "KIND_GPU"]
TimeoutAction = Literal["REJECT", "DELAY"]
Isolation = Literal["thread", "process"]
# The `parameters` keys of the settings a `@model` also takes as fields (what a config.pbtxt
# would set).
EXECUTION_TIMEOUT_KEY = "execution_timeout_s"
IDLE_TIMEOUT_KEY = "idle_timeout_s"
MIN_INSTANCES_KEY = "min_instances"
MAX_INSTANCES_KEY = "max_instances"


def freeze_field(
    record: object, name: str, kind: type[tuple[Any, ...]] | type[dict[Any, Any]]
) -> None:
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


@dataclass(frozen=True)
class Tensor:
    """An input or output declaration.

    Args:
        name: tensor name on the wire.
        datatype: protocol name: BOOL, UINT8..UINT64, INT8..INT64, FP16, FP32, FP64, BYTES, BF16.
        dims: shape without the batch dimension when max_batch_size > 0; -1 means any size.
        optional: (inputs only) the request may leave it out.
        reshape: (Triton's `reshape`) the shape the model itself takes or gives, when it
            differs from `dims`, the shape on the wire (batch dimension apart, as dims): the
            same elements, each variable dim matching the variable dim of `dims` in the same
            order. `[]` for a model that takes one value per batch row.
        format: (inputs, Triton's `format`) the image layout clients should send:
            FORMAT_NONE, FORMAT_NCHW or FORMAT_NHWC; a hint for clients, shown by the config
            API.
        labels: (outputs) the class names, the i-th naming class i, for clients that ask
            for the output as classes (Triton's classification extension): each class
            comes back as "value:index:label" ("value:index" past the end of the list or
            for an empty label).
        label_filename: (outputs, Triton's `label_filename`) the file in the model
            directory the `labels` were read from, one per line; shown by the config API.

    Example:
        `Tensor("INPUT0", "FP32", [-1])`, `Tensor("PROBS", "FP32", [3], labels=["cat",
        "dog", "bird"])`
    """

    name: str
    datatype: str
    dims: Sequence[int]
    optional: bool = False
    reshape: Sequence[int] | None = None
    format: str = "FORMAT_NONE"
    labels: Sequence[str] | None = None
    label_filename: str = ""

    def __post_init__(self) -> None:
        if self.labels is not None:
            if isinstance(self.labels, str | bytes):
                raise ModelConfigError(
                    f"tensor '{self.name}': labels must be a list of strings, got {self.labels!r}"
                )
            freeze_field(self, "labels", tuple)
        for field_name, dims in (("dims", self.dims), ("reshape", self.reshape)):
            if dims is None and field_name == "reshape":
                continue
            # Checked here because tuple(4) would say "'int' object is not iterable"; the
            # values are checked with the rest of the model's declaration.
            if isinstance(dims, str | bytes) or not isinstance(dims, Sequence):
                raise ModelConfigError(
                    f"tensor '{self.name}': {field_name} must be a list of ints such as [4] or "
                    f"[-1], got {dims!r}"
                )
            freeze_field(self, field_name, tuple)

    @property
    def model_dims(self) -> Sequence[int]:
        """The dims the model itself takes or gives: `reshape` when set, else `dims`."""
        return self.dims if self.reshape is None else self.reshape


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
        freeze_field(self, "preferred_batch_size", tuple)
        freeze_field(self, "priority_queue_policy", dict)

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
        freeze_field(self, "gpus", tuple)


@dataclass(frozen=True)
class VersionPolicy:
    """Triton's ModelVersionPolicy: which versions of a model directory are served.

    Args:
        choice: "latest" (the `num_versions` highest), "all", or "specific" (`versions`).
        num_versions: how many of the latest versions, for "latest".
        versions: the versions served, for "specific".

    Example:
        `VersionPolicy("specific", versions=[1, 3])`
    """

    choice: Literal["latest", "all", "specific"] = "latest"
    num_versions: int = 1
    versions: Sequence[int] = ()

    def __post_init__(self) -> None:
        freeze_field(self, "versions", tuple)


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
        freeze_field(self, "dims", tuple)


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
        freeze_field(self, "inputs", dict)


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
        freeze_field(self, "input_map", dict)
        freeze_field(self, "output_map", dict)
