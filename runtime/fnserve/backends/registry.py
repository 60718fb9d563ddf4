"""Which backend serves a model spec."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from fnserve.backends.base import BackendFactory, ModelFileSpec, ModelSpec
from fnserve.backends.python import PythonBackendFactory
from fnserve.backends.triton_python.backend import TritonPythonBackendFactory
from fnserve.errors import RepositoryError
from fnserve.model import ModelDefinition

# Backends of optional packages: backend -> (module, factory class, pip extra).
_OPTIONAL = {
    "onnxruntime": ("fnserve.backends.onnxruntime", "OnnxRuntimeBackendFactory", "onnx"),
    "pytorch": ("fnserve.backends.pytorch", "PyTorchBackendFactory", "torch"),
    "tensorrt": ("fnserve.backends.tensorrt", "TensorRTBackendFactory", "tensorrt"),
}


def factory_for(spec: ModelSpec) -> BackendFactory:
    """The backend factory for `spec`.

    Raises:
        RepositoryError: no backend serves this kind of spec, or its optional package is not
            installed (naming the model, the backend and what to install).
    """
    backend = spec.config.backend
    if isinstance(spec, ModelDefinition) and backend == "python":
        definition: ModelDefinition[Any, Any] = spec
        return PythonBackendFactory(definition)
    if isinstance(spec, ModelFileSpec) and backend in _OPTIONAL:
        return _optional_factory(spec)
    if isinstance(spec, ModelFileSpec) and backend == "python":
        return TritonPythonBackendFactory(spec)
    raise RepositoryError(
        f"model '{spec.config.name}' ({spec.location()}) asks for backend '{backend}', which "
        f"fnserve does not provide"
    )


def _optional_factory(spec: ModelFileSpec) -> BackendFactory:
    """Imported here: each of these backends needs optional, heavy packages that only its
    models pay for; without them the model fails to load naming what to install."""
    backend = spec.config.backend
    module, factory, extra = _OPTIONAL[backend]
    try:
        build: Callable[[ModelFileSpec], BackendFactory] = getattr(
            importlib.import_module(module), factory
        )
    except ImportError as exc:
        cause = exc.__cause__ or exc  # the package that is missing, not the re-raise's text
        raise RepositoryError(
            f"model '{spec.config.name}' ({spec.location()}) needs backend '{backend}', which "
            f"cannot be imported here ({cause}); pip install 'fnserve[{extra}]'"
        ) from exc
    return build(spec)
