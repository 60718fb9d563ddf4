"""Typed `**` keyword sets for `@model(...)` / `ModelConfig(...)` in the tests."""

from __future__ import annotations

from typing import TypedDict

from fnserve import DynamicBatching, Tensor


class TensorIO(TypedDict):
    """The two declarations every model needs: `@model(name=..., **IO)`."""

    inputs: list[Tensor]
    outputs: list[Tensor]


class Declaration(TensorIO, total=False):
    """`TensorIO` plus the optional settings the tests pass along with it."""

    max_batch_size: int
    dynamic_batching: DynamicBatching
    parameters: dict[str, str]
