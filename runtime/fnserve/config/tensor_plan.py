"""A model's tensor declarations compiled for the checks every request and batch goes through.

Serving a small step costs more in cache misses than in computing: right after a large model
(an encoder reading 90 MB of weights) every line of Python the next step touches comes from
main memory, and the detailed checks (a call per tensor, per dimension, per property) were
most of what a pipeline step added to its model's own time. A `TensorPlan` decides the common
case, a request that gives each input once with exactly its declared datatype and a fitting
shape, or a model that returns exactly its declared outputs, in one pass of plain comparisons.

It only ever accepts: whatever it does not accept goes to the detailed checks
(`scheduling/request.py`, `scheduling/runner.py`), which accept it after all or raise with
their messages. So the two can never disagree on what is valid, only on how fast.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fnserve.tensors import numpy_dtype

if TYPE_CHECKING:
    from fnserve.config.model_config import ModelConfig
    from fnserve.types import Array

InputsAccepted = tuple[dict[str, "Array"], int, tuple[tuple[str, tuple[int, ...]], ...]]


def _fixed(dims: Sequence[int]) -> tuple[int, ...] | None:
    """The dims as a tuple to compare shapes with, or None when one is variable (-1)."""
    return None if -1 in dims else tuple(dims)


class TensorPlan:
    """The fast checks of one model config (built once, by `ModelConfig.plan`)."""

    def __init__(self, config: ModelConfig) -> None:
        self._config = config
        self.batching = config.max_batch_size > 0
        self._max_rows = config.max_batch_size
        self._inputs = {t.name: (t.datatype, _fixed(t.dims), t) for t in config.inputs}
        self._outputs = tuple(
            (t.name, numpy_dtype(t.datatype), _fixed(t.dims))
            for t in config.outputs
            if t.datatype != "BYTES"  # any string-like dtype goes: left to the detailed check
        )
        # (a reshaped output is checked against its reshape, in detail)
        self._all_outputs = len(self._outputs) == len(config.outputs) and all(
            t.reshape is None for t in config.outputs
        )
        self._single_output = config.outputs[0].name if len(config.outputs) == 1 else None
        self._output_names = frozenset(t.name for t in config.outputs)

    def knows_outputs(self, names: Iterable[str]) -> bool:
        """Whether every output in `names` (those a request asks for) is declared."""
        return self._output_names.issuperset(names)

    def accept_inputs(self, tensors: Iterable[tuple[str, str, Array]]) -> InputsAccepted | None:
        """(inputs by name, batch rows, the key that says which requests may merge) when every
        declared input is given once and fits; None: let the detailed checks decide."""
        inputs: dict[str, Array] = {}
        batching, rows, key = self.batching, 1, []
        for name, datatype, data in tensors:
            declared = self._inputs.get(name)
            if declared is None or declared[0] != datatype or name in inputs:
                return None
            shape = data.shape
            if batching:
                if not shape or shape[0] > self._max_rows or inputs and shape[0] != rows:
                    return None
                rows = shape[0]
                key.append((name, shape[1:]))
                if declared[1] is not None and shape[1:] != declared[1]:
                    return None
            elif declared[1] is not None and shape != declared[1]:
                return None
            if declared[1] is None and not self._config.matches_dims(declared[2], shape):
                return None
            inputs[name] = data
        if len(inputs) != len(self._inputs):  # some left out (optional, or missing: say so)
            return None
        return inputs, rows, tuple(key)

    def accept_outputs(self, result: Any, rows: int) -> dict[str, Array] | None:
        """The outputs by name when `result` (what the model returned for `rows` rows) is one
        numpy array per declared output of its exact dtype and shape; None: check in detail."""
        if not self._all_outputs:
            return None
        if type(result) is np.ndarray:
            if self._single_output is None:
                return None
            result = {self._single_output: result}
        elif type(result) is not dict:
            return None
        outputs: dict[str, Array] = {}
        batching = self.batching
        for name, dtype, dims in self._outputs:
            array = result.get(name)
            if type(array) is not np.ndarray or array.dtype != dtype or dims is None:
                return None
            shape = array.shape
            if batching:
                if not shape or shape[0] != rows or shape[1:] != dims:
                    return None
            elif shape != dims:
                return None
            outputs[name] = array
        return outputs
