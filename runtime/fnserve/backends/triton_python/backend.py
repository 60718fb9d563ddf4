"""Runs a Triton python_backend `model.py` (a `TritonPythonModel` class) in the server process.

The file is imported under a name unique to its path and content (`user_modules.import_file`),
with fnserve's `pb_utils` installed as `triton_python_backend_utils`; each instance builds its
own `TritonPythonModel` and calls `initialize(args)` with Triton's args dict.

Batches: as in Triton, `execute` gets the list of the batch's requests, each with its own
tensors, parameters, id and requested outputs, and returns one response per request in the same
order. A response carrying a `TritonError` fails its request alone, with the status of the
error's code (INVALID_ARG: 400 / INVALID_ARGUMENT, NOT_FOUND: 404, UNAVAILABLE: 503,
UNSUPPORTED: 501, others 500) and the model's message as it wrote it.

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
from types import ModuleType
from typing import Any

from fnserve.backends.base import Answer, ModelFileSpec, OneRequest
from fnserve.backends.triton_python import bls, pb_utils
from fnserve.backends.triton_python.usage import check_usage
from fnserve.errors import (
    FnserveError,
    InvalidInputError,
    ModelExecutionError,
    ModelNotFoundError,
    RepositoryError,
    UnavailableError,
    UnsupportedError,
)
from fnserve.model import InstanceContext
from fnserve.types import Array, ParamValue
from fnserve.user_modules import import_file

__all__ = [
    "MODEL_CLASS",
    "MODULE_ALIAS",
    "TritonPythonBackend",
    "TritonPythonBackendFactory",
    "import_model",
    "initialize_args",
]

MODULE_ALIAS = "triton_python_backend_utils"
MODEL_CLASS = "TritonPythonModel"
EXECUTION_ENV = "EXECUTION_ENV_PATH"  # Triton's conda-pack environment: not unpacked here
log = logging.getLogger(__name__)


def import_model(path: Path) -> ModuleType:
    """model.py, imported as Triton imports it: `triton_python_backend_utils` is fnserve's
    pb_utils, the file's folder is its package (`from .helpers import x`), and its version and
    model folders lead `sys.path` while it imports (`from helpers import x`). Modules found in
    those folders leave `sys.modules` afterwards, so two models may each have a `helpers.py`
    of their own (import them at the top of model.py, as the import happens then).

    Raises:
        ModelImportError: the file raised while importing.
    """
    sys.modules[MODULE_ALIAS] = pb_utils  # before the import: model.py imports it at the top
    folders = [path.parent, path.parent.parent]
    before = set(sys.modules)
    sys.path[:0] = [str(f) for f in folders]
    try:
        return import_file(path, package=True)
    finally:
        for folder in folders:
            sys.path.remove(str(folder))
        for name in set(sys.modules) - before:
            file = getattr(sys.modules[name], "__file__", None)
            top_level = "." not in name
            if top_level and file and any(Path(file).is_relative_to(f) for f in folders):
                del sys.modules[name]


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

    per_request = True  # `execute` gets the batch's requests, not one merged request

    def __init__(self, spec: ModelFileSpec, context: InstanceContext) -> None:
        self._name = spec.config.name
        self._outputs = [t.name for t in spec.config.outputs]
        self._where = f"model '{self._name}' ({spec.path})"
        try:
            check_usage(self._where, spec.path, spec.path.read_text(errors="replace"))
        except OSError as exc:
            raise RepositoryError(f"{self._where}: cannot read it: {exc}") from exc
        cls = getattr(import_model(spec.path), MODEL_CLASS, None)
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
    ) -> Mapping[str, Array]:
        """One request (the direct lane: the runner takes batches to `execute_each`); the
        runner wraps what the model raises."""
        (answer,) = self.execute_each([_one(inputs, parameters)])
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def aexecute(
        self, inputs: Mapping[str, Array], parameters: Sequence[Mapping[str, ParamValue]]
    ) -> Mapping[str, Array]:
        (answer,) = await self.aexecute_each([_one(inputs, parameters)])
        if isinstance(answer, Exception):
            raise answer
        return answer

    def execute_each(self, requests: Sequence[OneRequest]) -> list[Answer]:
        """Run the batch's requests; one answer per request."""
        responses = self._model.execute([self._request(r) for r in requests])
        return self._answers(responses, requests)

    async def aexecute_each(self, requests: Sequence[OneRequest]) -> list[Answer]:
        """For `async def execute` (Triton allows it): awaited on the server's event loop; the
        BLS calls it starts are cancelled with it."""
        with bls.async_execute_scope():
            responses = await self._model.execute([self._request(r) for r in requests])
        return self._answers(responses, requests)

    def unload(self) -> None:
        """Call `finalize()` once; its failure is logged: the instance goes regardless."""
        model, self._model = self._model, None
        finalize = getattr(model, "finalize", None)
        if callable(finalize):
            try:
                finalize()
            except Exception:
                log.exception("%s: finalize() raised", self._where)

    def _request(self, request: OneRequest) -> pb_utils.InferenceRequest:
        return pb_utils.InferenceRequest(
            model_name=self._name,
            requested_output_names=request.requested or self._outputs,
            inputs=[pb_utils.Tensor(name, array) for name, array in request.inputs.items()],
            request_id=request.request_id,
            parameters=dict(request.parameters),
        )

    def _answers(self, responses: Any, requests: Sequence[OneRequest]) -> list[Answer]:
        """Each response's tensors by name, or the error it carries for its client (passed on
        as the model wrote it, with the status of its code)."""
        if not isinstance(responses, list | tuple) or len(responses) != len(requests):
            raise ModelExecutionError(
                f"model '{self._name}': execute() must return a list of one "
                f"pb_utils.InferenceResponse per request (it got {len(requests)}), returned "
                f"{_describe(responses)}"
            )
        answers: list[Answer] = []
        for response in responses:
            if not isinstance(response, pb_utils.InferenceResponse):
                raise ModelExecutionError(
                    f"model '{self._name}': execute() returned {_describe(response)} in its "
                    f"list, not a pb_utils.InferenceResponse"
                )
            error = response.error()
            if error is None:
                answers.append({t.name(): t.as_numpy() for t in response.output_tensors()})
            elif isinstance(error, pb_utils.TritonError):
                answers.append(_ERRORS.get(error.code(), ModelExecutionError)(error.message()))
            else:
                answers.append(ModelExecutionError(str(error)))
        return answers


class TritonPythonBackendFactory:
    """Builds `TritonPythonBackend`s for a model.py file."""

    name = "python"
    process_isolation = False  # worker processes import @model files, not TritonPythonModels

    def __init__(self, spec: ModelFileSpec) -> None:
        self.spec = spec
        if EXECUTION_ENV in spec.config.parameters:
            log.warning(
                "model '%s': parameter %s is ignored: fnserve runs python-backend models in "
                "the server's own environment (install what the model needs there)",
                spec.config.name,
                EXECUTION_ENV,
            )

    def create(self, context: InstanceContext) -> TritonPythonBackend:
        return TritonPythonBackend(self.spec, context)


def _one(inputs: Mapping[str, Array], parameters: Sequence[Mapping[str, ParamValue]]) -> OneRequest:
    return OneRequest(inputs, parameters[0] if len(parameters) == 1 else {}, None, "")


# The error a client gets for a TritonError code in a response (others: 500 / INTERNAL).
_ERRORS: dict[int, type[FnserveError]] = {
    pb_utils.TritonError.INVALID_ARG: InvalidInputError,
    pb_utils.TritonError.NOT_FOUND: ModelNotFoundError,
    pb_utils.TritonError.UNAVAILABLE: UnavailableError,
    pb_utils.TritonError.UNSUPPORTED: UnsupportedError,
}


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
