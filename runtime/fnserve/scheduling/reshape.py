"""Triton's `reshape`: a tensor whose shape on the wire (`dims`) differs from the shape the model
takes or gives (`reshape`), with the same elements.

Requests are checked against `dims` and the model gets its inputs as `reshape` says; the model's
outputs are checked against `reshape` and go back to the client as `dims` says. The batch
dimension, when the model batches, stays in front on both sides; the n-th variable (-1) dim of
one side takes its size from the n-th variable dim of the other. Numpy reshapes a C-contiguous
array without copying.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fnserve.config.model_config import ModelConfig, Tensor
from fnserve.types import Array


class Reshapes:
    """The reshapes of one model's tensors (empty when it declares none: then nothing runs)."""

    def __init__(self, config: ModelConfig) -> None:
        self.batching = config.batching
        self.inputs = {t.name: t for t in config.inputs if t.reshape is not None}
        self.outputs = {t.name: t for t in config.outputs if t.reshape is not None}

    def model_inputs(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        """The inputs as the model takes them (`inputs` as the requests gave them)."""
        shaped = dict(inputs)
        for name, tensor in self.inputs.items():
            array = shaped.get(name)
            if array is not None:
                assert tensor.reshape is not None
                shaped[name] = _move(array, tensor.dims, tensor.reshape, self.batching)
        return shaped

    def wire_output(self, tensor: Tensor, array: Array) -> Array:
        """A checked output (shaped as `tensor.reshape`) as the client gets it (as `dims`)."""
        assert tensor.reshape is not None
        return _move(array, tensor.reshape, tensor.dims, self.batching)


def _move(array: Array, source: Sequence[int], target: Sequence[int], batching: bool) -> Array:
    """`array`, whose shape fits `source`, reshaped to `target`."""
    lead = array.shape[:1] if batching else ()
    body = array.shape[1:] if batching else array.shape
    variable = iter([size for size, dim in zip(body, source, strict=True) if dim == -1])
    shape = [next(variable) if dim == -1 else dim for dim in target]
    return array.reshape(*lead, *shape)
