"""An ensemble's load-time checks against its step models, as Triton's (`ensemble_utils.cc`,
`model_repository_manager.cc`): run once the steps are loaded, so that an ensemble that could
only fail its requests fails its load instead, naming the ensemble, the step and what is wrong.

Each step's model (the version it names, or the latest serving one) must be serving; a batching
ensemble's `max_batch_size` must not exceed a batching step's; every `input_map` key must be an
input of the step's model and every input it requires must be mapped; every `output_map` key
must be one of its outputs; and each ensemble tensor must have one datatype and one shape
wherever it is read or written (the ensemble's own inputs and outputs included). Shapes agree
where each dim is equal or -1, compared with or without the batch dimension (a tensor shared by
a batching and a non-batching model), as in Triton.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fnserve.config.model_config import EnsembleStep, ModelConfig, Tensor
from fnserve.errors import ModelNotFoundError, ModelNotReadyError, RepositoryError
from fnserve.repository.registry import ModelRegistry


@dataclass(frozen=True)
class _Typed:
    """What one reader or writer of an ensemble tensor makes of it."""

    datatype: str
    dims: tuple[int, ...]  # without the batch dimension
    full: tuple[int, ...]  # with it, for a batching model
    origin: str  # who says so, for messages

    @classmethod
    def of(cls, tensor: Tensor, batching: bool, origin: str) -> _Typed:
        dims = tuple(tensor.dims)
        return cls(tensor.datatype, dims, (-1, *dims) if batching else dims, origin)

    def agrees(self, other: _Typed) -> bool:
        return self.datatype == other.datatype and (
            _same_dims(self.dims, other.dims) or _same_dims(self.full, other.full)
        )

    def __str__(self) -> str:
        return f"{self.datatype} {list(self.full)} as {self.origin}"


def check_ensemble(config: ModelConfig, registry: ModelRegistry) -> None:
    """Check ensemble `config` against the step models serving in `registry`.

    Raises:
        RepositoryError: a step's model is not serving, or does not fit the step.
    """
    steps = [_step_config(config, index, step, registry)
             for index, step in enumerate(config.ensemble)]  # fmt: skip
    check_steps(config, steps)


def check_steps(config: ModelConfig, steps: Sequence[ModelConfig]) -> None:
    """Check ensemble `config` against `steps`, the configs of its steps' models in order.

    Raises:
        RepositoryError: the first mismatch, naming the ensemble, the step and what is wrong.
    """
    batching = config.max_batch_size > 0
    tensors: dict[str, _Typed] = {}
    for kind, declared in (("input", config.inputs), ("output", config.outputs)):
        for tensor in declared:
            tensors[tensor.name] = _Typed.of(tensor, batching, f"the ensemble's {kind}")
    for index, (step, model) in enumerate(zip(config.ensemble, steps, strict=True)):
        where = f"ensemble '{config.name}' step {index} ('{step.model_name}')"
        if 0 < model.max_batch_size < config.max_batch_size:
            raise RepositoryError(
                f"{where}: the ensemble allows max_batch_size {config.max_batch_size}, but "
                f"model '{model.name}' only {model.max_batch_size}"
            )
        _check_keys(where, model, "input", step.input_map, model.inputs)
        _check_keys(where, model, "output", step.output_map, model.outputs)
        unmapped = [t.name for t in model.inputs if not t.optional and t.name not in step.input_map]
        if unmapped:
            raise RepositoryError(
                f"{where}: input(s) {unmapped} of model '{model.name}' are mapped to no "
                f"ensemble tensor (input_map has no such key)"
            )
        for kind, mapping, declared in (
            ("input", step.input_map, model.inputs),
            ("output", step.output_map, model.outputs),
        ):
            by_name = {t.name: t for t in declared}
            for key, name in mapping.items():
                origin = f"{kind} '{key}' of model '{model.name}'"
                found = _Typed.of(by_name[key], model.max_batch_size > 0, origin)
                known = tensors.setdefault(name, found)
                if not known.agrees(found):
                    raise RepositoryError(
                        f"{where}: ensemble tensor '{name}' is {known} but {found}"
                    )


def _step_config(
    config: ModelConfig, index: int, step: EnsembleStep, registry: ModelRegistry
) -> ModelConfig:
    """The config of the model version step `index` runs (as served: completed), if serving."""
    where = f"ensemble '{config.name}' step {index} ('{step.model_name}')"
    if step.model_name == config.name:
        raise RepositoryError(f"{where}: an ensemble cannot run itself")
    version = str(step.model_version) if step.model_version > 0 else ""
    try:
        handle = registry.resolve(step.model_name, version, need_ready=True)
    except (ModelNotFoundError, ModelNotReadyError) as exc:
        wanted = f"model '{step.model_name}'" + (f" version {version}" if version else "")
        raise RepositoryError(f"{where}: {wanted} is not available: {exc.message}") from None
    return handle.config


def _check_keys(
    where: str,
    model: ModelConfig,
    kind: str,
    mapping: Mapping[str, str],
    declared: Sequence[Tensor],
) -> None:
    names = [t.name for t in declared]
    unknown = sorted(set(mapping) - set(names))
    if unknown:
        raise RepositoryError(
            f"{where}: {kind}_map key(s) {unknown} are not {kind}s of model '{model.name}' "
            f"(its {kind}s: {', '.join(names) or 'none'})"
        )


def _same_dims(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Triton's CompareDimsWithWildcard: the same rank, each dim equal or either -1."""
    return len(a) == len(b) and all(x == y or x == -1 or y == -1 for x, y in zip(a, b, strict=True))
