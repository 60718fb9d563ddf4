"""A TensorRT engine's inputs and outputs as plain records, and what is checked against them:
the config against the engine (at load, as Triton's TensorRT backend does) and a request's
shapes against the engine's optimization profile (before each run).

Pure: the tensorrt backend reads an engine into an `EngineIO`; nothing here imports tensorrt, so
these rules are checked on any machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fnserve.backends.base import ModelSignature, pair_declared
from fnserve.config.model_config import ModelConfig, Tensor
from fnserve.errors import InvalidInputError, RepositoryError

PROFILE = 0  # the optimization profile every instance uses (Triton's default)

# tensorrt.DataType names -> protocol datatypes; the others (FP8, INT4, FP4, ...) have no
# protocol datatype, so an engine with such an input or output is refused at load.
_DATATYPES = {
    "FLOAT": "FP32",
    "HALF": "FP16",
    "BF16": "BF16",
    "INT8": "INT8",
    "INT32": "INT32",
    "INT64": "INT64",
    "BOOL": "BOOL",
    "UINT8": "UINT8",
}


def protocol_datatype(trt_name: str) -> str | None:
    """The protocol datatype of a `tensorrt.DataType` name ("FLOAT" -> "FP32"), or None."""
    return _DATATYPES.get(trt_name)


@dataclass(frozen=True)
class EngineTensor:
    """One input or output of an engine.

    Args:
        name: its name.
        is_input: input or output.
        datatype: its protocol datatype.
        dims: its FULL shape in the engine, -1 for a dynamic dimension.
        min_shape, max_shape: (inputs) the smallest and largest shape the optimization
            profile accepts; equal to `dims` where the engine fixes them.
    """

    name: str
    is_input: bool
    datatype: str
    dims: tuple[int, ...]
    min_shape: tuple[int, ...] = ()
    max_shape: tuple[int, ...] = ()

    def declaration(self) -> Tensor:
        return Tensor(self.name, self.datatype, list(self.dims))


@dataclass(frozen=True)
class EngineIO:
    """Every input and output of an engine, in the engine's order."""

    tensors: tuple[EngineTensor, ...]

    @property
    def inputs(self) -> tuple[EngineTensor, ...]:
        return tuple(t for t in self.tensors if t.is_input)

    @property
    def outputs(self) -> tuple[EngineTensor, ...]:
        return tuple(t for t in self.tensors if not t.is_input)

    def max_batch_size(self) -> int:
        """The largest batch the profile allows: the smallest maximum of an input's first
        dimension (Triton's rule); 0 when some input has no dynamic first dimension."""
        if not all(t.dims and t.dims[0] == -1 and t.max_shape for t in self.inputs):
            return 0
        return min((t.max_shape[0] for t in self.inputs), default=0)

    def signature(self) -> ModelSignature:
        """The engine's tensors with full dims, and its batch limit, to complete a config."""
        return ModelSignature(
            inputs=tuple(t.declaration() for t in self.inputs),
            outputs=tuple(t.declaration() for t in self.outputs),
            max_batch_size=self.max_batch_size(),
        )


def check_config(where: str, config: ModelConfig, io: EngineIO) -> None:
    """The config's tensors exist in the engine with its datatypes and compatible shapes,
    every engine input is declared and required, and `max_batch_size` fits the profile.

    Raises:
        RepositoryError: naming the tensor (or batch size) and both sides.
    """
    for kind, tensor, found in pair_declared(where, config, io.inputs, io.outputs, "engine"):
        _check_tensor(where, kind, config, tensor, found)
    _check_batch(where, config.max_batch_size, io.max_batch_size())


def _check_tensor(
    where: str, kind: str, config: ModelConfig, tensor: Tensor, found: EngineTensor
) -> None:
    if found.datatype != tensor.datatype:
        raise RepositoryError(
            f"{where}: {kind} '{tensor.name}' is {tensor.datatype} in the config but "
            f"{found.datatype} in the engine"
        )
    if tensor.optional:
        raise RepositoryError(
            f"{where}: input '{tensor.name}' is optional in the config, but a TensorRT engine "
            f"needs every input"
        )
    dims = tensor.model_dims  # a reshape is what the engine itself sees
    shape = [-1, *dims] if config.batching else list(dims)
    fits = len(shape) == len(found.dims) and all(
        e == -1 or c == e for c, e in zip(shape, found.dims, strict=True)
    )
    if not fits:
        batch = " (with the batch dimension)" if config.batching else ""
        raise RepositoryError(
            f"{where}: {kind} '{tensor.name}' has shape {shape} in the config{batch} but "
            f"{list(found.dims)} in the engine"
        )


def _check_batch(where: str, wanted: int, allowed: int) -> None:
    """A batch dimension itself is checked with the shapes (the config's leading -1)."""
    if wanted > allowed:
        raise RepositoryError(
            f"{where}: max_batch_size is {wanted}, but the engine's optimization profile "
            f"{PROFILE} allows batches of at most {allowed}"
        )


def check_shape(model: str, tensor: EngineTensor, shape: Sequence[int]) -> None:
    """A request's input shape lies within the optimization profile.

    Raises:
        InvalidInputError: naming the input, its shape and the profile's bounds.
    """
    low, high = tensor.min_shape, tensor.max_shape
    if len(shape) == len(low) and all(
        a <= d <= b for d, a, b in zip(shape, low, high, strict=True)
    ):
        return
    raise InvalidInputError(
        f"model '{model}' input '{tensor.name}': shape {list(shape)} is outside the TensorRT "
        f"engine's optimization profile {PROFILE} (min {list(low)}, max {list(high)})"
    )
