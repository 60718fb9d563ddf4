"""The `@model` decorator: declare a Python function or class as a servable model.

```python
@model(inputs=[Tensor("INPUT0", "FP32", [-1])], outputs=[Tensor("OUTPUT0", "FP32", [-1])],
       max_batch_size=64, dynamic_batching=DynamicBatching())
def identity(INPUT0: np.ndarray) -> dict[str, np.ndarray]:
    return {"OUTPUT0": INPUT0}
```
The decorated object stays callable exactly as before (so it can be unit-tested in-process) and
carries its validated `ModelConfig` in `.config`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NoReturn, ParamSpec, TypeVar, overload

from fnserve.config.model_config import (
    DynamicBatching,
    InstanceGroup,
    ModelConfig,
    Tensor,
    Warmup,
)
from fnserve.errors import ModelConfigError

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class InstanceContext:
    """What a model instance is told when it is built (passed to a class's `__init__`).

    Args:
        model_name, model_version: the model this instance serves.
        instance_index: 0-based index among the model's instances.
        kind: KIND_CPU or KIND_GPU.
        device: "cpu" or "cuda:<index>".
        parameters: the model's free-form `parameters`.
    """

    model_name: str
    model_version: int
    instance_index: int
    kind: str
    device: str
    parameters: Mapping[str, str]


class ModelDefinition(Generic[P, R]):
    """A function or class declared with `@model`; calling it calls the original."""

    def __init__(self, target: Callable[P, R], config: ModelConfig) -> None:
        self.target = target
        self.config = config
        self.is_class = inspect.isclass(target)
        self.__wrapped__ = target
        self.__doc__ = target.__doc__
        self.__name__ = getattr(target, "__name__", config.name)
        self.__module__ = getattr(target, "__module__", __name__)
        _check_signature(self)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.target(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<model {self.config.name!r} v{self.config.version} -> {self.target!r}>"

    def location(self) -> str:
        """Where it is declared: "FILE:LINE" (the module's name when the source is unknown)."""
        try:
            file = inspect.getsourcefile(self.target)
            _, line = inspect.getsourcelines(self.target)
        except (OSError, TypeError):
            return self.__module__
        return f"{file}:{line}" if file else self.__module__

    def infer_callable(self, context: InstanceContext) -> Callable[..., Any]:
        """The callable one instance runs: the function itself, or a new object's `__call__`."""
        if not self.is_class:
            return self.target
        init_params = inspect.signature(self.target).parameters
        target: Any = self.target
        instance = target(context) if init_params else target()
        return _instance_method(instance)

    def accepts_parameters(self) -> bool:
        """Whether the callable takes a `parameters` keyword (one dict per request)."""
        fn = _class_entry_point(self.target) if self.is_class else self.target
        try:
            return "parameters" in inspect.signature(fn).parameters
        except (TypeError, ValueError):
            return False


def _instance_method(instance: Any) -> Callable[..., Any]:
    method = getattr(instance, "infer", None)
    return method if callable(method) else instance  # type: ignore[no-any-return]


def _class_entry_point(cls: Any) -> Any:
    """The class's `infer` or `__call__` (its own MRO: getattr finds `type.__call__`)."""
    return next(
        (vars(c)[m] for m in ("infer", "__call__") for c in cls.__mro__[:-1] if m in vars(c)),
        None,
    )


def _check_signature(definition: ModelDefinition[Any, Any]) -> None:
    """Fail at import time when the callable cannot take the declared inputs as keywords."""
    config = definition.config
    fn: Any = definition.target
    if definition.is_class:
        fn = _class_entry_point(fn)
        if fn is None:
            raise ModelConfigError(
                f"model '{config.name}': the class needs an `infer` or `__call__` method"
            )
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins and C callables: nothing to check
    params = signature.parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    names = [t.name for t in config.inputs]
    unknown = [n for n in names if n not in params]
    if unknown:
        raise ModelConfigError(
            f"model '{config.name}': the function does not accept input(s) {', '.join(unknown)} "
            f"as keyword arguments; name its parameters after the inputs or add **inputs"
        )


@overload
def model(target: Callable[..., Any], /) -> NoReturn: ...


@overload
def model(
    *,
    inputs: Sequence[Tensor],
    outputs: Sequence[Tensor],
    name: str | None = None,
    version: int = 1,
    max_batch_size: int = 0,
    dynamic_batching: DynamicBatching | None = None,
    instance_group: Sequence[InstanceGroup] | None = None,
    parameters: Mapping[str, str] | None = None,
    execution_timeout_s: float | None = None,
    warmup: Sequence[Warmup] = (),
    idle_timeout_s: float | None = None,
    min_instances: int | None = None,
    max_instances: int | None = None,
) -> Callable[[Callable[P, R]], ModelDefinition[P, R]]: ...


def model(
    target: Callable[..., Any] | None = None,
    /,
    *,
    inputs: Sequence[Tensor] | None = None,
    outputs: Sequence[Tensor] | None = None,
    name: str | None = None,
    version: int = 1,
    max_batch_size: int = 0,
    dynamic_batching: DynamicBatching | None = None,
    instance_group: Sequence[InstanceGroup] | None = None,
    parameters: Mapping[str, str] | None = None,
    execution_timeout_s: float | None = None,
    warmup: Sequence[Warmup] = (),
    idle_timeout_s: float | None = None,
    min_instances: int | None = None,
    max_instances: int | None = None,
) -> Callable[[Callable[P, R]], ModelDefinition[P, R]]:
    """Declare a servable model.

    The callable receives each input as a keyword argument named after it (numpy arrays, batch
    dimension first when `max_batch_size > 0`; BYTES as object arrays of bytes) and returns a
    dict of outputs, or a single array when there is one output. It may be `async`. A class is
    built once per instance (its `__init__` may take an `InstanceContext`) and called through
    its `infer` method or `__call__`.

    Args:
        inputs, outputs: tensor declarations.
        name: model name on the wire; defaults to the function's or class's name.
        version: version number (>= 1).
        max_batch_size: 0 disables batching; otherwise the largest batch the model accepts.
        dynamic_batching: merge concurrent requests into batches (needs max_batch_size >= 1).
        instance_group: how many instances run, and where; default one, CPU or GPU.
        parameters: free-form string settings, visible in the config and `InstanceContext`.
        execution_timeout_s: longest one execution may run; past it the requests of that
            execution fail with 504 / DEADLINE_EXCEEDED and the instance is replaced. None
            takes the server's `--execution-timeout`; 0 means no limit. Also settable as the
            parameter `execution_timeout_s`.
        warmup: requests run on every load before the model is READY (Triton's
            `model_warmup`), so no client pays for first-call costs.
        idle_timeout_s: scale to zero after this long without a request: the instances are
            released, the model stays listed and ready, and the next request cold-starts it
            (load + warmup). None takes the server's `--idle-timeout`; 0: never. Also the
            parameter `idle_timeout_s`.
        min_instances: more than 0 keeps the model loaded: never scaled to zero, never evicted
            to make room under `--memory-budget`. Also the parameter `min_instances`.
        max_instances: instances follow the load: one more (on the instance group's devices)
            while requests wait in the queue longer than the parameter `scale_up_queue_ms`
            (default 5), one fewer after `scale_down_idle_s` (default 30) in which fewer were
            busy, between max(min_instances, 1) and this. Also the parameter `max_instances`.

    Raises:
        ModelConfigError: when the declaration is invalid (at import time), also for a bare
            `@model` (without the parentheses and the declaration).
    """
    if target is not None:
        raise ModelConfigError(
            f"@model needs its declaration in parentheses above "
            f"'{getattr(target, '__name__', target)}': write @model(inputs=[Tensor(...)], "
            f"outputs=[Tensor(...)])"
        )
    if inputs is None or outputs is None:
        missing = " and ".join(
            n for n, v in (("inputs", inputs), ("outputs", outputs)) if v is None
        )
        raise ModelConfigError(f"@model(...) needs {missing}=[Tensor(NAME, DATATYPE, DIMS), ...]")
    declared_inputs, declared_outputs = inputs, outputs

    def decorate(target: Callable[P, R]) -> ModelDefinition[P, R]:
        config = ModelConfig(
            name=name or str(getattr(target, "__name__", "")),
            inputs=declared_inputs,
            outputs=declared_outputs,
            version=version,
            max_batch_size=max_batch_size,
            dynamic_batching=dynamic_batching,
            instance_group=tuple(instance_group) if instance_group else (InstanceGroup(),),
            parameters=parameters or {},
            execution_timeout_s=execution_timeout_s,
            warmup=warmup,
            idle_timeout_s=idle_timeout_s,
            min_instances=min_instances,
            max_instances=max_instances,
        )
        return ModelDefinition(target, config)

    return decorate
