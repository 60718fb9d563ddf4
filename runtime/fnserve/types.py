"""The vocabulary shared by frontends and core: requests, responses and the seams between layers.

Frontends decode their wire format into an `InferRequest` of numpy arrays and encode the
`InferResponse`; nothing below `runtime.py` knows about HTTP or gRPC.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol, TypeAlias

ParamValue: TypeAlias = bool | int | float | str
"""A request, tensor or response parameter value (the protocol allows bool, number, string)."""

Array: TypeAlias = Any
"""A numpy array (typed loosely: numpy's generics add noise and no safety here)."""


# Requests, responses and their tensors are NamedTuples: built for every request and ensemble
# step, and a tuple is cheaper to build than a frozen dataclass (which sets each field through
# a call).

NO_PARAMETERS: Mapping[str, ParamValue] = MappingProxyType({})
"""The parameters of a request or response that has none (shared, so it cannot change)."""

NO_CLASSIFICATION: Mapping[str, int] = MappingProxyType({})
"""The `classification` of a request that asks for no output as classes (shared)."""


class InferInput(NamedTuple):
    """One input tensor of a request, already decoded.

    Args:
        name: the input's name as declared by the model.
        datatype: protocol datatype name as sent by the client (`FP32`, `BYTES`, ...).
        data: numpy array of the full shape, batch dimension included when batching.
    """

    name: str
    datatype: str
    data: Array


class InferOutput(NamedTuple):
    """One output tensor of a response."""

    name: str
    datatype: str
    data: Array


class InferRequest(NamedTuple):
    """An inference request, independent of the protocol that carried it.

    Args:
        model_name: the model to run.
        inputs: decoded input tensors.
        model_version: a version number as a string, or "" for the latest ready version.
        id: optional request id, echoed in the response.
        outputs: names of the outputs wanted, or None for all of them.
        parameters: request parameters as sent (`priority`, `timeout`, custom keys); the core
            interprets the ones Triton defines and forwards the rest to the model.
        classification: Triton's classification extension: output name -> k (>= 1), for the
            outputs to answer as their top k classes per batch row (BYTES "value:index:label")
            instead of the tensor; each is also listed in `outputs`.
    """

    model_name: str
    inputs: tuple[InferInput, ...]
    model_version: str = ""
    id: str = ""
    outputs: tuple[str, ...] | None = None
    parameters: Mapping[str, ParamValue] = NO_PARAMETERS
    call_chain: tuple[str, ...] = ()  # models it is called from (in-process calls; not wire)
    classification: Mapping[str, int] = NO_CLASSIFICATION


class InferResponse(NamedTuple):
    """The result of one `InferRequest`: outputs in the order the request listed them."""

    model_name: str
    model_version: str
    outputs: tuple[InferOutput, ...]
    id: str = ""
    parameters: Mapping[str, ParamValue] = NO_PARAMETERS


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

    async def infer_outputs(
        self, request: InferRequest
    ) -> tuple[Mapping[str, Array], Mapping[str, str]]:
        """`infer` without the response objects (for ensemble steps): every output the model
        gave by name (the request's `outputs` do not narrow it) and their datatypes."""
        ...

    def call_now(
        self,
        model_name: str,
        model_version: str,
        inputs: Sequence[tuple[str, str, Array]],
        outputs: Sequence[str],
        call_chain: tuple[str, ...],
    ) -> tuple[Mapping[str, Array], Mapping[str, str]] | None:
        """`infer` for a model that can answer before this returns (idle, running inline): its
        outputs and their datatypes, with no request or response objects built; None when it
        cannot, and then nothing ran (`infer` then takes the request, and reports any error).
        `inputs` are (name, datatype, array); `outputs` the names wanted."""
        ...
