"""Model configuration: `ModelConfig`, named after Triton's `model_config.proto`.

Its parts are the frozen records of records.py (re-exported here). Validation (validation.py)
runs when a `ModelConfig` is built and raises `ModelConfigError` naming the model, the field,
the value and what is allowed. `ModelConfig.to_json()` gives the JSON form Triton serves at
`/v2/models/{m}/config` (config_json.py).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fnserve.config.config_json import config_json
from fnserve.config.records import (
    EXECUTION_TIMEOUT_KEY,
    IDLE_TIMEOUT_KEY,
    MAX_INSTANCES_KEY,
    MIN_INSTANCES_KEY,
    DynamicBatching,
    EnsembleStep,
    InstanceGroup,
    InstanceKind,
    Isolation,
    QueuePolicy,
    Tensor,
    TimeoutAction,
    VersionPolicy,
    Warmup,
    WarmupInput,
    freeze_field,
)
from fnserve.config.tensor_plan import TensorPlan
from fnserve.config.validation import validate

__all__ = [
    "EXECUTION_TIMEOUT_KEY",
    "IDLE_TIMEOUT_KEY",
    "MAX_INSTANCES_KEY",
    "MIN_INSTANCES_KEY",
    "DynamicBatching",
    "EnsembleStep",
    "InstanceGroup",
    "InstanceKind",
    "Isolation",
    "ModelConfig",
    "QueuePolicy",
    "Tensor",
    "TimeoutAction",
    "VersionPolicy",
    "Warmup",
    "WarmupInput",
]


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
    # A config.pbtxt's (Triton's default when it gives none); None for an @model, whose code
    # says which versions exist (the config API reports what it serves).
    version_policy: VersionPolicy | None = None

    def __post_init__(self) -> None:
        for name in ("inputs", "outputs", "instance_group", "warmup", "ensemble"):
            freeze_field(self, name, tuple)
        freeze_field(self, "parameters", dict)
        validate(self)

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
        return config_json(self)
