"""Models served in worker processes (`isolation="process"`) by the process-instance tests.

Each `*_p` model has an in-thread twin `*_t` with the same code, so the tests can compare the
two modes answer for answer. `crashy` segfaults, aborts or hangs on request; `spin` burns CPU
in pure Python (it holds the GIL the whole time).
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from fnserve import DynamicBatching, InstanceContext, InstanceGroup, Tensor, model

if TYPE_CHECKING:  # annotations only: the server loads this file by path, workers re-import it
    from fnserve.model import ModelDefinition
    from tests.tensor_io import Declaration, TensorIO

BATCHING = DynamicBatching(max_queue_delay_microseconds=0)
PROCESS = [InstanceGroup(count=1, kind="KIND_CPU", isolation="process")]
THREAD = [InstanceGroup(count=1, kind="KIND_CPU")]


def _add_sub(INPUT0: np.ndarray, INPUT1: np.ndarray) -> dict[str, np.ndarray]:
    return {"OUTPUT0": INPUT0 + INPUT1, "OUTPUT1": INPUT0 - INPUT1}


def _strings(INPUT0: np.ndarray) -> np.ndarray:
    return np.array([s.upper() + b"!" for s in INPUT0.ravel()], dtype=object).reshape(INPUT0.shape)


def _mixed(FLAGS: np.ndarray, HALF: np.ndarray, INT: np.ndarray) -> dict[str, np.ndarray]:
    return {"NOT_FLAGS": ~FLAGS, "HALF_X2": HALF * np.float16(2), "INT_NEG": -INT}


def _wrong(INPUT0: np.ndarray) -> Any:
    return {"OUTPUT0": INPUT0.astype(np.float64)}  # declared FP32: the output check refuses it


class _Scaled:
    """A class model: built with its InstanceContext, reads `parameters` per request."""

    def __init__(self, ctx: InstanceContext) -> None:
        self.scale = float(ctx.parameters["scale"])
        self.index = ctx.instance_index

    def __call__(
        self, INPUT0: np.ndarray, parameters: list[dict[str, Any]]
    ) -> dict[str, np.ndarray]:
        offsets = np.array([[float(p.get("offset", 0))] for p in parameters], np.float32)
        return {"OUTPUT0": (INPUT0 * self.scale + offsets).astype(np.float32)}


async def _async_double(INPUT0: np.ndarray) -> np.ndarray:
    await asyncio.sleep(0)
    return INPUT0 * 2


_IO: dict[str, tuple[Callable[..., Any], Declaration]] = {
    "add_sub": (
        _add_sub,
        {
            "max_batch_size": 8,
            "dynamic_batching": BATCHING,
            "inputs": [Tensor("INPUT0", "FP32", [16]), Tensor("INPUT1", "FP32", [16])],
            "outputs": [Tensor("OUTPUT0", "FP32", [16]), Tensor("OUTPUT1", "FP32", [16])],
        },
    ),
    "strings": (
        _strings,
        {
            "inputs": [Tensor("INPUT0", "BYTES", [-1])],
            "outputs": [Tensor("OUTPUT0", "BYTES", [-1])],
        },
    ),
    "mixed": (
        _mixed,
        {
            "max_batch_size": 16,
            "inputs": [
                Tensor("FLAGS", "BOOL", [-1]),
                Tensor("HALF", "FP16", [-1]),
                Tensor("INT", "INT8", [-1]),
            ],
            "outputs": [
                Tensor("NOT_FLAGS", "BOOL", [-1]),
                Tensor("HALF_X2", "FP16", [-1]),
                Tensor("INT_NEG", "INT8", [-1]),
            ],
        },
    ),
    "wrong": (
        _wrong,
        {"inputs": [Tensor("INPUT0", "FP32", [-1])], "outputs": [Tensor("OUTPUT0", "FP32", [-1])]},
    ),
    "scaled": (
        _Scaled,
        {
            "max_batch_size": 8,
            "dynamic_batching": DynamicBatching(max_queue_delay_microseconds=20_000),
            "inputs": [Tensor("INPUT0", "FP32", [1])],
            "outputs": [Tensor("OUTPUT0", "FP32", [1])],
            "parameters": {"scale": "3"},
        },
    ),
    "async_double": (
        _async_double,
        {"inputs": [Tensor("INPUT0", "FP32", [-1])], "outputs": [Tensor("OUTPUT0", "FP32", [-1])]},
    ),
}
TWINS = sorted(_IO)

# Bound by the loop below (mypy cannot see names made through globals()).
add_sub_t: ModelDefinition[..., Any]
add_sub_p: ModelDefinition[..., Any]
strings_t: ModelDefinition[..., Any]
strings_p: ModelDefinition[..., Any]
mixed_t: ModelDefinition[..., Any]
mixed_p: ModelDefinition[..., Any]
wrong_t: ModelDefinition[..., Any]
wrong_p: ModelDefinition[..., Any]
scaled_t: ModelDefinition[..., Any]
scaled_p: ModelDefinition[..., Any]
async_double_t: ModelDefinition[..., Any]
async_double_p: ModelDefinition[..., Any]

for _name, (_target, _kwargs) in _IO.items():
    for _suffix, _group in (("t", THREAD), ("p", PROCESS)):
        globals()[f"{_name}_{_suffix}"] = model(
            name=f"{_name}_{_suffix}", instance_group=_group, **_kwargs
        )(_target)


@model(
    inputs=[Tensor("MODE", "INT32", [1])],
    outputs=[Tensor("OUTPUT0", "INT32", [1])],
    instance_group=PROCESS,
    execution_timeout_s=1.0,
)
def crashy(MODE: np.ndarray) -> np.ndarray:
    """0: answer with the worker's pid; 1: segfault; 2: abort; 3: hang; 4: exit."""
    mode = int(MODE[0])
    if mode == 1:
        ctypes.string_at(0)
    elif mode == 2:
        os.abort()
    elif mode == 3:
        time.sleep(3600)
    elif mode == 4:
        os._exit(7)
    return np.array([os.getpid()], np.int32)


def spin_work(n: int) -> int:
    """Pure-Python CPU work that never releases the GIL."""
    total = 0
    for i in range(n):
        total = (total + i * i) % 1_000_003
    return total


def _spin(N: np.ndarray) -> np.ndarray:
    return np.array([spin_work(int(N[0]))], np.int64)


_SPIN: TensorIO = {
    "inputs": [Tensor("N", "INT32", [1])],
    "outputs": [Tensor("OUTPUT0", "INT64", [1])],
}
spin_p1 = model(name="spin_p1", instance_group=PROCESS, **_SPIN)(_spin)
spin_p2 = model(
    name="spin_p2",
    instance_group=[InstanceGroup(count=2, kind="KIND_CPU", isolation="process")],
    **_SPIN,
)(_spin)
