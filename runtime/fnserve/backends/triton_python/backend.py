"""Runs a Triton python_backend `model.py` (a `TritonPythonModel` class) in the server process.

The file is imported under a name unique to its path and content (`user_modules.import_file`),
with fnserve's `pb_utils` installed as `triton_python_backend_utils`; each instance builds its
own `TritonPythonModel` and calls `initialize(args)` with Triton's args dict.

Batches: fnserve's backend seam hands over one merged batch (inputs concatenated along the
batch dimension, one parameters mapping per original request), not the requests themselves.
So `execute` gets ONE `InferenceRequest` holding the whole batch, as Triton's dynamic batcher
does for a model that reads its inputs as batched tensors; a model that relies on seeing each
request separately (per-request ids or parameters) sees one request instead.

BLS: `execute` may call other models with `pb_utils.InferenceRequest(...).exec()` or, when it
is an `async def`, `await request.async_exec()` (`bls.py`); an async execute's calls are
cancelled with it.
"""

from __future__ import annotations

import inspect
import json
import logging
import sys
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fnserve.backends.base import ModelFileSpec
from fnserve.backends.triton_python import bls, pb_utils
from fnserve.errors import ModelExecutionError, RepositoryError
from fnserve.model import InstanceContext
from fnserve.types import Array, ParamValue
from fnserve.user_modules import import_file

__all__ = ["MODULE_ALIAS", "TritonPythonBackend", "TritonPythonBackendFactory", "initialize_args"]

MODULE_ALIAS = "triton_python_backend_utils"
MODEL_CLASS = "TritonPythonModel"
log = logging.getLogger(__name__)


def initialize_args(spec: ModelFileSpec, context: InstanceContext) -> dict[str, str]:
    """Triton's `initialize(args)`: every value a string, the config as JSON text.

    The instance name is `<model>_<instance index>` (fnserve numbers instances per model, not
    per instance group as Triton does).
    """
    config = spec.config
    _, _, index = context.device.partition(":")
    return {
        "model_config": json.dumps(config.to_json()),
        "model_instance_kind": "GPU" if context.kind == "KIND_GPU" else "CPU",
        "model_instance_name": f"{config.name}_{context.instance_index}",
        "model_instance_device_id": index if index.isdigit() else "0",
        "model_repository": str(spec.path.parent.parent),
        "model_version": str(config.version),
        "model_name": config.name,
    }


class TritonPythonBackend:
    """One `TritonPythonModel` instance.

    Args:
        spec: the model.py file and its configuration.
        context: which instance this is.

    Raises:
        RepositoryError: the file fails to import, has no `TritonPythonModel` class, or its
            constructor or `initialize` raises (naming the file, the line and the reason).
    """

    def __init__(self, spec: ModelFileSpec, context: InstanceContext) -> None:
        self._name = spec.config.name
        self._outputs = [t.name for t in spec.config.outputs]
        self._where = f"model '{self._name}' ({spec.path})"
        sys.modules[MODULE_ALIAS] = pb_utils  # before the import: model.py imports it at the top
        module = import_file(spec.path)
        cls = getattr(module, MODEL_CLASS, None)
        if not inspect.isclass(cls):
            raise RepositoryError(f"{self._where}: the file defines no class {MODEL_CLASS}")
        self._model: Any = self._load(spec.path, cls, initialize_args(spec, context))
        self.is_async = inspect.iscoroutinefunction(getattr(self._model, "execute", None))
        if not callable(getattr(self._model, "execute", None)):
            raise RepositoryError(f"{self._where}: {MODEL_CLASS} has no execute(requests) method")

    def _load(self, path: Path, cls: Any, args: dict[str, str]) -> Any:
        step = f"{MODEL_CLASS}()"
        try:
            model = cls()
            initialize = getattr(model, "initialize", None)
            if callable(initialize):
                step = "initialize(args)"
                initialize(args)
        except Exception as exc:  # the user's code: any failure fails the load, with reason
            raise RepositoryError(
                f"{self._where}: {step} failed{_line(path, exc)}: {type(exc).__name__}: {exc}"
            ) from exc
        return model

    @property
    def model(self) -> Any:
        """The `TritonPythonModel` instance (None once unloaded), for tests."""
        return self._model

    def execute(
        self, inputs: Mapping[str, Array], parameters: Sequence[Mapping[str, ParamValue]]
    ) -> dict[str, Array]:
        """Run the batch as one request; the runner wraps what the model raises."""
        return self._outputs_of(self._model.execute([self._request(inputs, parameters)]))

    async def aexecute(
        self, inputs: Mapping[str, Array], parameters: Sequence[Mapping[str, ParamValue]]
    ) -> dict[str, Array]:
        """For `async def execute` (Triton allows it): awaited on the server's event loop; the
        BLS calls it starts are cancelled with it."""
        with bls.async_execute_scope():
            responses = await self._model.execute([self._request(inputs, parameters)])
        return self._outputs_of(responses)

    def unload(self) -> None:
        """Call `finalize()` once; its failure is logged: the instance goes regardless."""
        model, self._model = self._model, None
        finalize = getattr(model, "finalize", None)
        if callable(finalize):
            try:
                finalize()
            except Exception:
                log.exception("%s: finalize() raised", self._where)

    def _request(
        self, inputs: Mapping[str, Array], parameters: Sequence[Mapping[str, ParamValue]]
    ) -> pb_utils.InferenceRequest:
        return pb_utils.InferenceRequest(
            model_name=self._name,
            requested_output_names=self._outputs,
            inputs=[pb_utils.Tensor(name, array) for name, array in inputs.items()],
            parameters=_shared(parameters),
        )

    def _outputs_of(self, responses: Any) -> dict[str, Array]:
        """The one response's tensors, by name; an error response fails the batch with its
        message (the model wrote it for the client, so it is passed on as it is)."""
        if not isinstance(responses, list | tuple) or len(responses) != 1:
            raise ModelExecutionError(
                f"model '{self._name}': execute() must return a list of one "
                f"pb_utils.InferenceResponse per request (it got 1 request), returned "
                f"{_describe(responses)}"
            )
        (response,) = responses
        if not isinstance(response, pb_utils.InferenceResponse):
            raise ModelExecutionError(
                f"model '{self._name}': execute() returned {_describe(response)} in its list, "
                f"not a pb_utils.InferenceResponse"
            )
        error = response.error()
        if error is not None:
            message = error.message() if isinstance(error, pb_utils.TritonError) else str(error)
            raise ModelExecutionError(f"model '{self._name}' returned an error: {message}")
        return {tensor.name(): tensor.as_numpy() for tensor in response.output_tensors()}


class TritonPythonBackendFactory:
    """Builds `TritonPythonBackend`s for a model.py file."""

    name = "python"
    process_isolation = False  # worker processes import @model files, not TritonPythonModels

    def __init__(self, spec: ModelFileSpec) -> None:
        self.spec = spec

    def create(self, context: InstanceContext) -> TritonPythonBackend:
        return TritonPythonBackend(self.spec, context)


def _shared(parameters: Sequence[Mapping[str, ParamValue]]) -> dict[str, ParamValue]:
    """The parameters every request of the batch agrees on: with one request, its own; never
    one request's value shown as another's."""
    if not parameters:
        return {}
    first, *rest = parameters
    return {k: v for k, v in first.items() if all(k in p and p[k] == v for p in rest)}


def _line(path: Path, exc: BaseException) -> str:
    """ " at line N": the last line of model.py the error went through."""
    target = path.resolve()
    lines = [
        frame.lineno
        for frame in traceback.extract_tb(exc.__traceback__)
        if frame.filename and Path(frame.filename).resolve() == target
    ]
    return f" at {path.name} line {lines[-1]}" if lines else ""


def _describe(value: Any) -> str:
    if isinstance(value, list | tuple):
        return f"a {type(value).__name__} of {len(value)}"
    return "None" if value is None else f"a {type(value).__name__}"
