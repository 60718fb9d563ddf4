"""Example models: the smallest useful shapes of `@model`.

Serve them with `fnserve serve functions/` and call them with any Triton client, e.g.
`curl -d '{"inputs":[{"name":"INPUT0","shape":[1,3],"datatype":"FP32","data":[1,2,3]}]}'
localhost:8000/v2/models/identity/infer`.
"""

from __future__ import annotations

import numpy as np

from fnserve import DynamicBatching, Tensor, model


@model(
    max_batch_size=64,
    dynamic_batching=DynamicBatching(max_queue_delay_microseconds=0),
    inputs=[Tensor("INPUT0", "FP32", [-1])],
    outputs=[Tensor("OUTPUT0", "FP32", [-1])],
)
def identity(INPUT0: np.ndarray) -> dict[str, np.ndarray]:
    """Returns its input: the model perf_analyzer users measure serving overhead with."""
    return {"OUTPUT0": INPUT0}


@model(
    max_batch_size=8,
    dynamic_batching=DynamicBatching(preferred_batch_size=[4, 8], max_queue_delay_microseconds=500),
    inputs=[Tensor("INPUT0", "INT32", [16]), Tensor("INPUT1", "INT32", [16])],
    outputs=[Tensor("OUTPUT0", "INT32", [16]), Tensor("OUTPUT1", "INT32", [16])],
)
def add_sub(INPUT0: np.ndarray, INPUT1: np.ndarray) -> dict[str, np.ndarray]:
    """Triton's `simple` example: element-wise sum and difference of two INT32 vectors."""
    return {"OUTPUT0": INPUT0 + INPUT1, "OUTPUT1": INPUT0 - INPUT1}
