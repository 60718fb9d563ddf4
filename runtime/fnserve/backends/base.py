"""The backend seam: what the scheduler needs from anything that can run a model, and what the
repository needs to build one.

A *model spec* says what to serve (its `ModelConfig`, and where it was declared); the backend
factory chosen from it (`backends.registry.factory_for`) builds one `Backend` per instance.
Specs today are `@model` definitions; config.pbtxt + model file specs plug in the same way.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeVar

from fnserve.config.model_config import ModelConfig, Tensor
from fnserve.config.pbtxt import ExecutionAccelerators
from fnserve.errors import RepositoryError
from fnserve.model import InstanceContext
from fnserve.types import Array, ParamValue

Outputs = Mapping[str, Array]


class ModelSpec(Protocol):
    """What a model is: its configuration and where it came from."""

    @property
    def config(self) -> ModelConfig: ...

    def location(self) -> str:
        """Where it is declared ("FILE:LINE", a directory), for messages."""
        ...


@dataclass(frozen=True)
class ModelFileSpec:
    """A model served from a file of a Triton-layout repository (`<name>/<version>/model.onnx`).

    Args:
        config: its effective configuration (config.pbtxt, completed from the file).
        path: the model file.
        accelerators: config.pbtxt's `optimization.execution_accelerators` (onnxruntime only).
    """

    config: ModelConfig
    path: Path
    accelerators: ExecutionAccelerators = field(default_factory=ExecutionAccelerators)

    def location(self) -> str:
        return str(self.path)


class OneRequest(NamedTuple):
    """One request of a batch, as a backend that takes requests one by one sees it."""

    inputs: Mapping[str, Array]
    parameters: Mapping[str, ParamValue]
    requested: tuple[str, ...] | None  # the outputs the client asked for; None: all
    request_id: str


# What such a backend gives back for each request: its outputs, or the error that fails it
# alone (Triton's python backend answers each request with a response or an error).
Answer = Mapping[str, Array] | Exception


class Backend(Protocol):
    """One loaded model instance.

    `execute` runs a batch synchronously (called on the instance's own thread); async backends
    set `is_async` and implement `aexecute` instead. A backend whose models see each request of
    a batch separately (Triton's python backend) also sets `per_request = True` and implements
    `execute_each(requests) -> list[Answer]` (`aexecute_each` when async): the runner then
    hands it the requests unmerged and checks each answer on its own. `execute` still serves
    a single request without parameters (the direct lane).
    """

    is_async: bool

    def execute(
        self, inputs: Mapping[str, Array], parameters: Sequence[Mapping[str, ParamValue]]
    ) -> Any: ...

    async def aexecute(
        self, inputs: Mapping[str, Array], parameters: Sequence[Mapping[str, ParamValue]]
    ) -> Any: ...

    def unload(self) -> None: ...


class BackendFactory(Protocol):
    """Builds the backend of one instance of one model (blocking: may run user code)."""

    name: str  # the backend's name, as in config.pbtxt's `backend`
    process_isolation: bool  # whether its instances can run in a worker process

    @property
    def spec(self) -> ModelSpec:
        """The model it builds instances of."""
        ...

    def create(self, context: InstanceContext) -> Backend: ...


@dataclass(frozen=True)
class ModelSignature:
    """The tensors a model file declares, read from the file itself (to complete a config).

    Dims are the FULL shapes the file gives, -1 for any symbolic or unknown dimension; whether
    the first one is a batch dimension is the caller's decision (`batchable` helps).
    `max_batch_size` is the largest batch the file itself allows (a TensorRT plan's
    optimization profile, a torch.export program's bound), None where the file sets no limit.
    `guessed` says the dims are fnserve's guess, not the file's (TorchScript keeps no shapes):
    their variable first dims are then no evidence of a batch dimension.
    """

    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    max_batch_size: int | None = None
    guessed: bool = False

    def batchable(self) -> bool:
        """Triton's autocomplete rule: every tensor has rank >= 1 and a variable first dim."""
        if self.guessed:
            return False
        return all(len(t.dims) >= 1 and t.dims[0] == -1 for t in (*self.inputs, *self.outputs))


class _Named(Protocol):
    @property
    def name(self) -> str: ...


NamedT = TypeVar("NamedT", bound=_Named)


def pair_declared(
    where: str,
    config: ModelConfig,
    inputs: Sequence[NamedT],
    outputs: Sequence[NamedT],
    source: str,
) -> Iterator[tuple[str, Tensor, NamedT]]:
    """Each tensor the config declares ("input" or "output", the declaration, the model file's
    tensor of that name), for a backend to compare; once all are paired, every input the file
    (`source`: "model file", "engine") needs must be declared.

    Raises:
        RepositoryError: a declared tensor the file lacks, or a file input the config lacks.
    """
    for kind, declared, actual in (
        ("input", config.inputs, inputs),
        ("output", config.outputs, outputs),
    ):
        by_name = {t.name: t for t in actual}
        for tensor in declared:
            found = by_name.get(tensor.name)
            if found is None:
                raise RepositoryError(
                    f"{where}: the config declares {kind} '{tensor.name}', which the {source} "
                    f"does not have (it has {', '.join(by_name) or 'none'})"
                )
            yield kind, tensor, found
    missing = sorted({t.name for t in inputs} - {t.name for t in config.inputs})
    if missing:
        raise RepositoryError(
            f"{where}: the {source} needs input(s) {', '.join(missing)}, which the config does "
            f"not declare"
        )
