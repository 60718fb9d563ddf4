"""The Python backend: runs an `@model` function, or one instance of an `@model` class."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from fnserve.model import InstanceContext, ModelDefinition
from fnserve.types import Array, ParamValue


class PythonBackend:
    """Calls the user's code with inputs as keyword arguments.

    Args:
        definition: the decorated function or class.
        context: which instance this is (a class is built here, once).
    """

    def __init__(self, definition: ModelDefinition[Any, Any], context: InstanceContext) -> None:
        self._fn = definition.infer_callable(context)
        # An instance is async when its class defines `async def __call__`.
        call = self._fn if inspect.isroutine(self._fn) else type(self._fn).__call__
        self.is_async = inspect.iscoroutinefunction(call)
        self._pass_parameters = definition.accepts_parameters()

    def _kwargs(
        self, inputs: Mapping[str, Array], parameters: Sequence[Mapping[str, ParamValue]]
    ) -> dict[str, Any]:
        if self._pass_parameters:
            return {**inputs, "parameters": list(parameters)}
        return dict(inputs)

    def execute(
        self, inputs: Mapping[str, Array], parameters: Sequence[Mapping[str, ParamValue]]
    ) -> Any:
        if self._pass_parameters:
            return self._fn(**self._kwargs(inputs, parameters))
        return self._fn(**inputs)  # every batch: one call less

    async def aexecute(
        self, inputs: Mapping[str, Array], parameters: Sequence[Mapping[str, ParamValue]]
    ) -> Any:
        return await self._fn(**self._kwargs(inputs, parameters))

    def unload(self) -> None:
        owner = getattr(self._fn, "__self__", self._fn)  # the class instance, if any
        close = None if inspect.isfunction(owner) else getattr(owner, "close", None)
        if callable(close):
            close()


class PythonBackendFactory:
    """Builds `PythonBackend`s for an `@model` definition."""

    name = "python"
    process_isolation = True  # a worker process can import the definition's file

    def __init__(self, spec: ModelDefinition[Any, Any]) -> None:
        self.spec = spec

    def create(self, context: InstanceContext) -> PythonBackend:
        return PythonBackend(self.spec, context)
