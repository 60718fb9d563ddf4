"""Which backend serves a model spec."""

from __future__ import annotations

from typing import Any

from fnserve.backends.base import BackendFactory, ModelSpec
from fnserve.backends.python import PythonBackendFactory
from fnserve.errors import RepositoryError
from fnserve.model import ModelDefinition


def factory_for(spec: ModelSpec) -> BackendFactory:
    """The backend factory for `spec`.

    Raises:
        RepositoryError: no backend serves this kind of spec (naming the model and backend).
    """
    backend = spec.config.backend
    if isinstance(spec, ModelDefinition) and backend == "python":
        definition: ModelDefinition[Any, Any] = spec
        return PythonBackendFactory(definition)
    raise RepositoryError(
        f"model '{spec.config.name}' ({spec.location()}) asks for backend '{backend}', which "
        f"fnserve does not provide"
    )
