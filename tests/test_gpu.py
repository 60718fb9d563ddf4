"""GPU placement: runs only where a CUDA device exists (none on CI); the CPU-side refusal of
KIND_GPU is covered by tests/repository/test_lifecycle.py."""

from __future__ import annotations

import numpy as np
import pytest

from fnserve import InstanceContext, InstanceGroup, Tensor, model
from fnserve.backends.devices import cuda_device_count
from fnserve.runtime import Runtime
from fnserve.types import InferInput, InferRequest

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(cuda_device_count() == 0, reason="no CUDA device present"),
]


async def test_kind_gpu_instances_are_told_their_device() -> None:
    class WhereAmI:
        def __init__(self, context: InstanceContext) -> None:
            self.device = context.device

        def __call__(self, X: np.ndarray) -> np.ndarray:
            return np.array([self.device.encode()], dtype=object)

    # @model applied by hand: mypy ignores what a class decorator returns
    where_am_i = model(
        instance_group=[InstanceGroup(count=2, kind="KIND_GPU", gpus=[0])],
        inputs=[Tensor("X", "INT32", [1])],
        outputs=[Tensor("DEVICE", "BYTES", [1])],
    )(WhereAmI)
    runtime = Runtime([where_am_i])
    await runtime.start()
    try:
        x = np.zeros(1, np.int32)
        response = await runtime.infer(InferRequest("WhereAmI", (InferInput("X", "INT32", x),)))
    finally:
        await runtime.aclose()
    assert response.outputs[0].data[0] == b"cuda:0"
