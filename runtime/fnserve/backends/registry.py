"""Which backend serves a model spec."""

from __future__ import annotations

from typing import Any

from fnserve.backends.base import BackendFactory, ModelFileSpec, ModelSpec
from fnserve.backends.python import PythonBackendFactory
from fnserve.backends.triton_python.backend import TritonPythonBackendFactory
from fnserve.errors import RepositoryError
from fnserve.model import ModelDefinition


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
    if isinstance(spec, ModelFileSpec) and backend == "onnxruntime":
        return _onnxruntime_factory(spec)
    if isinstance(spec, ModelFileSpec) and backend == "pytorch":
        return _pytorch_factory(spec)
    if isinstance(spec, ModelFileSpec) and backend == "python":
        return TritonPythonBackendFactory(spec)
    raise RepositoryError(
        f"model '{spec.config.name}' ({spec.location()}) asks for backend '{backend}', which "
        f"fnserve does not provide"
    )


def _onnxruntime_factory(spec: ModelFileSpec) -> BackendFactory:
    """Imported here: onnxruntime is an optional, heavy dependency only its models pay for."""
    try:
        from fnserve.backends.onnxruntime import OnnxRuntimeBackendFactory
    except ImportError as exc:
        raise RepositoryError(
            f"model '{spec.config.name}' ({spec.location()}) needs the onnxruntime backend, "
            f"which is not installed: pip install 'fnserve[onnx]'"
        ) from exc
    return OnnxRuntimeBackendFactory(spec)


def _pytorch_factory(spec: ModelFileSpec) -> BackendFactory:
    """Imported here: torch is an optional, heavy dependency only its models pay for."""
    try:
        from fnserve.backends.pytorch import PyTorchBackendFactory
    except ImportError as exc:
        raise RepositoryError(
            f"model '{spec.config.name}' ({spec.location()}) needs the pytorch backend, "
            f"which is not installed: pip install 'fnserve[torch]'"
        ) from exc
    return PyTorchBackendFactory(spec)
