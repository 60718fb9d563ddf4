"""The vocabulary shared by frontends and core: requests, responses and the seams between layers.

Frontends decode their wire format into an `InferRequest` of numpy arrays and encode the
`InferResponse`; nothing below `runtime.py` knows about HTTP or gRPC.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, TypeAlias

ParamValue: TypeAlias = bool | int | float | str
"""A request, tensor or response parameter value (the protocol allows bool, number, string)."""

Array: TypeAlias = Any
"""A numpy array (typed loosely: numpy's generics add noise and no safety here)."""


@dataclass(frozen=True, slots=True)
class InferInput:
    """One input tensor of a request, already decoded.

    Args:
        name: the input's name as declared by the model.
        datatype: protocol datatype name as sent by the client (`FP32`, `BYTES`, ...).
        data: numpy array of the full shape, batch dimension included when batching.
    """

    name: str
    datatype: str
    data: Array


@dataclass(frozen=True, slots=True)
class InferOutput:
    """One output tensor of a response."""

    name: str
    datatype: str
    data: Array


@dataclass(frozen=True, slots=True)
class InferRequest:
    """An inference request, independent of the protocol that carried it.

    Args:
        model_name: the model to run.
        inputs: decoded input tensors.
        model_version: a version number as a string, or "" for the latest ready version.
        id: optional request id, echoed in the response.
        outputs: names of the outputs wanted, or None for all of them.
        parameters: request parameters as sent (`priority`, `timeout`, custom keys); the core
            interprets the ones Triton defines and forwards the rest to the model.
    """

    model_name: str
    inputs: tuple[InferInput, ...]
    model_version: str = ""
    id: str = ""
    outputs: tuple[str, ...] | None = None
    parameters: Mapping[str, ParamValue] = field(default_factory=dict)
    call_chain: tuple[str, ...] = ()  # models it is called from (in-process calls; not wire)


@dataclass(frozen=True, slots=True)
class InferResponse:
    """The result of one `InferRequest`: outputs in the order the request listed them."""

    model_name: str
    model_version: str
    outputs: tuple[InferOutput, ...]
    id: str = ""
    parameters: Mapping[str, ParamValue] = field(default_factory=dict)


class ModelState(enum.Enum):
    """A model version's lifecycle state (DESIGN.md's, plus FAILED with its reason)."""

    UNLOADED = "UNLOADED"
    LOADING = "LOADING"
    WARMING = "WARMING"
    READY = "READY"
    IDLE = "IDLE"  # scaled to zero: no instances, and the next request cold-starts it
    DRAINING = "DRAINING"
    FAILED = "FAILED"


class IndexEntry(NamedTuple):
    """One row of the repository index: a model version, its state and why it is in it."""

    name: str
    version: str
    state: ModelState
    reason: str


class ServerMetadata(NamedTuple):
    """Who is serving: name, version and the protocol extensions it supports."""

    name: str
    version: str
    extensions: tuple[str, ...]


class TensorMetadata(NamedTuple):
    """One input or output of a model, with its full shape (batch dimension included)."""

    name: str
    datatype: str
    shape: tuple[int, ...]


class ModelMetadata(NamedTuple):
    """A model's metadata: the versions that serve and its tensors."""

    name: str
    versions: tuple[str, ...]
    platform: str
    inputs: tuple[TensorMetadata, ...]
    outputs: tuple[TensorMetadata, ...]


class ModelCaller(Protocol):
    """What ensembles and business-logic functions use to call other models (the Runtime)."""

    async def infer(self, request: InferRequest) -> InferResponse: ...
