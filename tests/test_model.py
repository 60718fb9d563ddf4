"""The @model decorator: declarations are validated at import time; functions stay callable."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fnserve import DynamicBatching, InstanceContext, InstanceGroup, QueuePolicy, Tensor, model
from fnserve.errors import ModelConfigError

IN = [Tensor("X", "FP32", [-1])]
OUT = [Tensor("Y", "FP32", [-1])]


def test_decorated_function_stays_callable() -> None:
    @model(inputs=IN, outputs=OUT, max_batch_size=4, dynamic_batching=DynamicBatching())
    def double(X: np.ndarray) -> np.ndarray:
        return X * 2

    np.testing.assert_array_equal(double(np.ones(3, np.float32)), np.full(3, 2, np.float32))
    assert double.config.name == "double"
    assert double.config.full_shape(double.config.inputs[0]) == [-1, -1]


def test_class_is_built_with_its_context() -> None:
    class Holder:
        def __init__(self, context: InstanceContext) -> None:
            self.context = context

        def __call__(self, X: np.ndarray) -> np.ndarray:
            return X

    # @model applied by hand: mypy keeps a decorated class's own type (it ignores what a class
    # decorator returns), so the ModelDefinition is only visible to it this way
    holder = model(inputs=IN, outputs=OUT, parameters={"k": "v"})(Holder)
    context = InstanceContext("Holder", 1, 0, "KIND_CPU", "cpu", {"k": "v"})
    fn = holder.infer_callable(context)
    np.testing.assert_array_equal(fn(X=np.ones(2, np.float32)), np.ones(2, np.float32))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"inputs": [Tensor("X", "FLOAT", [1])]},
            "model 'f': inputs 'X': datatype 'FLOAT' is not one of",
        ),
        ({"inputs": [Tensor("X", "FP32", [])]}, "dims must be a non-empty list"),
        (
            {"inputs": [Tensor("X", "FP32", [-2])]},
            "dims must be a non-empty list of integers >= -1, got [-2]",
        ),
        ({"outputs": []}, "outputs must declare at least one tensor"),
        ({"max_batch_size": -1}, "max_batch_size must be an integer >= 0, got -1"),
        ({"dynamic_batching": DynamicBatching()}, "dynamic_batching needs max_batch_size >= 1"),
        (
            {"max_batch_size": 4, "dynamic_batching": DynamicBatching(preferred_batch_size=[8])},
            "preferred_batch_size 8 must be between 1 and max_batch_size 4",
        ),
        (
            {"max_batch_size": 4, "dynamic_batching": DynamicBatching(priority_levels=2)},
            "default_priority_level 0 must be between 1 and priority_levels 2",
        ),
        (
            {
                "max_batch_size": 4,
                "dynamic_batching": DynamicBatching(
                    default_queue_policy=QueuePolicy(timeout_action="DROP")  # type: ignore[arg-type]
                ),
            },
            "timeout_action must be REJECT or DELAY, got 'DROP'",
        ),
        (
            {"instance_group": [InstanceGroup(count=0)]},
            "instance_group count must be an integer >= 1, got 0",
        ),
        ({"instance_group": [InstanceGroup(kind="KIND_TPU")]}, "kind must be one of"),  # type: ignore[arg-type]
        ({"version": 0}, "version must be an integer >= 1, got 0"),
    ],
)
def test_bad_declaration_raises_at_import_time(kwargs: dict[str, Any], message: str) -> None:
    declaration: dict[str, Any] = {"inputs": IN, "outputs": OUT, **kwargs}  # deliberately bad
    with pytest.raises(ModelConfigError) as info:

        @model(**declaration)
        def f(X: np.ndarray) -> np.ndarray:
            return X

    assert message in str(info.value)


def test_function_must_accept_declared_inputs() -> None:
    with pytest.raises(ModelConfigError, match="does not accept input.s. X as keyword arguments"):

        @model(inputs=IN, outputs=OUT)
        def f(x: np.ndarray) -> np.ndarray:
            return x


def test_class_without_call_is_refused() -> None:
    with pytest.raises(ModelConfigError, match="needs an `infer` or `__call__` method"):

        @model(inputs=IN, outputs=OUT)
        class Nothing:
            pass
