"""`ensemble(...)`: compose served models into one, in Python.

```python
embed = ensemble("embed", steps=[tokenize, encoder, pool])
```
Tensors connect by name: each step reads the tensors named like its inputs (the ensemble's
own inputs, or what earlier steps wrote) and writes its outputs under their names; a `Step`
renames them where names differ (`Step(encoder, inputs={"IDS": "tokens"})` feeds the
ensemble tensor `tokens` into the encoder's input `IDS`). The ensemble's inputs are the tensors
no step writes; its outputs are the last step's outputs unless `outputs=` names them. Every
step stays a model of its own, with its own batcher and instances (served too, under its own
name), so steps of different requests batch together. The result is the same kind of config as
Triton's `platform: "ensemble"` with `ensemble_scheduling`.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fnserve.config.model_config import EnsembleStep, ModelConfig, Tensor
from fnserve.errors import ModelConfigError
from fnserve.model import ModelDefinition


@dataclass(frozen=True)
class Step:
    """One step, with its tensors renamed: `inputs` maps the model's input names to ensemble
    tensor names, `outputs` its output names to ensemble tensor names (unnamed: the same)."""

    model: ModelDefinition[Any, Any]
    inputs: Mapping[str, str] = field(default_factory=dict)
    outputs: Mapping[str, str] = field(default_factory=dict)


class EnsembleDefinition:
    """A served ensemble: its config (with the steps) and where it was declared."""

    def __init__(self, config: ModelConfig, steps: Sequence[ModelDefinition[Any, Any]], where: str):
        self.config = config
        self.steps = tuple(steps)
        self._where = where

    def location(self) -> str:
        return self._where

    def __repr__(self) -> str:
        return f"<ensemble {self.config.name!r} of {[s.config.name for s in self.steps]}>"


def ensemble(
    name: str,
    steps: Sequence[ModelDefinition[Any, Any] | Step],
    *,
    outputs: Sequence[str] | None = None,
    version: int = 1,
) -> EnsembleDefinition:
    """Declare an ensemble of `@model` steps (see the module docstring for the mapping).

    Raises:
        ModelConfigError: a step reads a tensor nothing provides, a tensor is written twice,
            the steps disagree on batching, a `Step` renames a tensor its model does not
            have, or an output is produced by no step. (Datatypes and shapes are checked
            when the ensemble loads, against its steps' served configs.)
    """
    frame = inspect.stack()[1]
    where = f"{frame.filename}:{frame.lineno}"
    resolved = [s if isinstance(s, Step) else Step(s) for s in steps]
    if not resolved:
        raise ModelConfigError(f"ensemble '{name}' needs at least one step")
    batch_sizes = {s.model.config.max_batch_size for s in resolved}
    if len({size > 0 for size in batch_sizes}) > 1:
        raise ModelConfigError(
            f"ensemble '{name}': its steps must all batch or all not batch (max_batch_size "
            f"{sorted(batch_sizes)})"
        )
    written: dict[str, Tensor] = {}
    inputs: dict[str, Tensor] = {}
    plan = []
    for step in resolved:
        config = step.model.config
        _check_renames(name, step)
        input_map = {t.name: step.inputs.get(t.name, t.name) for t in config.inputs}
        for tensor in config.inputs:
            source = input_map[tensor.name]
            if source not in written and source not in inputs:
                inputs[source] = Tensor(source, tensor.datatype, tensor.dims, tensor.optional)
        output_map = {t.name: step.outputs.get(t.name, t.name) for t in config.outputs}
        for tensor in config.outputs:
            target = output_map[tensor.name]
            written[target] = Tensor(target, tensor.datatype, tensor.dims)
        plan.append(EnsembleStep(config.name, input_map, output_map, config.version))
    last = resolved[-1].model.config
    names = (
        list(outputs)
        if outputs is not None
        else [resolved[-1].outputs.get(t.name, t.name) for t in last.outputs]
    )
    unknown = [n for n in names if n not in written]
    if unknown:
        raise ModelConfigError(f"ensemble '{name}': output(s) {unknown} are produced by no step")
    config = ModelConfig(
        name=name,
        inputs=list(inputs.values()),
        outputs=[written[n] for n in names],
        version=version,
        max_batch_size=min(batch_sizes),
        backend="ensemble",
        platform="ensemble",
        ensemble=plan,
    )
    return EnsembleDefinition(config, [s.model for s in resolved], where)


def _check_renames(name: str, step: Step) -> None:
    """A `Step` renames only tensors its model has (Triton refuses an unknown map key)."""
    config = step.model.config
    for kind, renames, declared in (
        ("inputs", step.inputs, config.inputs),
        ("outputs", step.outputs, config.outputs),
    ):
        names = [t.name for t in declared]
        unknown = sorted(set(renames) - set(names))
        if unknown:
            raise ModelConfigError(
                f"ensemble '{name}': Step({config.name}, {kind}=...) renames {unknown}, which "
                f"are not {kind} of model '{config.name}' (its {kind}: {', '.join(names)})"
            )
