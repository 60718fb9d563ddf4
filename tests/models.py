"""Models the end-to-end tests serve (one module-scoped server runs all of them)."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from fnserve import DynamicBatching, InstanceContext, InstanceGroup, Tensor, model

BATCHING = DynamicBatching(max_queue_delay_microseconds=0)


@model(
    max_batch_size=64,
    dynamic_batching=BATCHING,
    inputs=[Tensor("INPUT0", "FP32", [-1])],
    outputs=[Tensor("OUTPUT0", "FP32", [-1])],
)
def identity(INPUT0: np.ndarray) -> dict[str, np.ndarray]:
    """FP32 rows in, the same rows out."""
    return {"OUTPUT0": INPUT0}


@model(
    max_batch_size=8,
    dynamic_batching=BATCHING,
    inputs=[Tensor("INPUT0", "FP32", [16]), Tensor("INPUT1", "FP32", [16])],
    outputs=[Tensor("OUTPUT0", "FP32", [16]), Tensor("OUTPUT1", "FP32", [16])],
)
def add_sub(INPUT0: np.ndarray, INPUT1: np.ndarray) -> dict[str, np.ndarray]:
    """Triton's classic example: sum and difference."""
    return {"OUTPUT0": INPUT0 + INPUT1, "OUTPUT1": INPUT0 - INPUT1}


@model(inputs=[Tensor("INPUT0", "BYTES", [-1])], outputs=[Tensor("OUTPUT0", "BYTES", [-1])])
def strings(INPUT0: np.ndarray) -> np.ndarray:
    """BYTES echo without batching (shape is exactly dims)."""
    return INPUT0


@model(
    max_batch_size=16,
    inputs=[
        Tensor("FLAGS", "BOOL", [-1]),
        Tensor("HALF", "FP16", [-1]),
        Tensor("INT", "INT8", [-1]),
    ],
    outputs=[
        Tensor("NOT_FLAGS", "BOOL", [-1]),
        Tensor("HALF_X2", "FP16", [-1]),
        Tensor("INT_NEG", "INT8", [-1]),
    ],
)
def mixed(FLAGS: np.ndarray, HALF: np.ndarray, INT: np.ndarray) -> dict[str, np.ndarray]:
    """BOOL, FP16 and INT8 in one model."""
    return {"NOT_FLAGS": ~FLAGS, "HALF_X2": HALF * np.float16(2), "INT_NEG": -INT}


@model(inputs=[Tensor("INPUT0", "FP32", [-1])], outputs=[Tensor("OUTPUT0", "FP32", [-1])])
def fails(INPUT0: np.ndarray) -> np.ndarray:
    """Raises for negative inputs, otherwise returns them."""
    if (INPUT0 < 0).any():
        raise ValueError("negative input")
    return INPUT0


@model(inputs=[Tensor("SECONDS", "FP32", [1])], outputs=[Tensor("OUTPUT0", "FP32", [1])])
def sleeper(SECONDS: np.ndarray) -> np.ndarray:
    """Blocks its instance thread for SECONDS (the event loop must stay responsive)."""
    time.sleep(float(SECONDS[0]))
    return SECONDS


@model(
    max_batch_size=8,
    inputs=[Tensor("INPUT0", "INT32", [1])],
    outputs=[Tensor("OUTPUT0", "INT32", [1])],
)
async def async_double(INPUT0: np.ndarray) -> np.ndarray:
    """An async model: awaits, then doubles."""
    await asyncio.sleep(0)
    return INPUT0 * 2


@model(
    max_batch_size=4,
    instance_group=[InstanceGroup(count=2, kind="KIND_CPU")],
    inputs=[Tensor("INPUT0", "FP64", [2])],
    outputs=[Tensor("OUTPUT0", "FP64", [2]), Tensor("INSTANCE", "INT32", [1])],
    parameters={"factor": "3"},
)
class Scaler:
    """A class model: built once per instance, told its context."""

    def __init__(self, context: InstanceContext) -> None:
        self.factor = float(context.parameters["factor"])
        self.index = context.instance_index

    def __call__(self, INPUT0: np.ndarray) -> dict[str, np.ndarray]:
        instance = np.full((len(INPUT0), 1), self.index, dtype=np.int32)
        return {"OUTPUT0": INPUT0 * self.factor, "INSTANCE": instance}


@model(
    instance_group=[InstanceGroup(kind="KIND_GPU", gpus=[0])],
    inputs=[Tensor("INPUT0", "FP32", [1])],
    outputs=[Tensor("OUTPUT0", "FP32", [1])],
)
def gpu_only(INPUT0: np.ndarray) -> np.ndarray:
    """Needs a CUDA device: on a CPU machine it fails to load and the others still serve."""
    return INPUT0
