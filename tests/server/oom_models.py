"""Models that run out of memory above LIMIT_ROWS rows, with the exceptions real libraries raise.

Each waits for a full batch (8 rows: the queue delay is long), so a test that sends 8 rows at
once knows the batch they form. Process-isolated models are imported again by their worker,
so they live here, at module level.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fnserve import DynamicBatching, InstanceGroup, Tensor, model

if TYPE_CHECKING:
    from fnserve.backends.base import ModelSpec
    from tests.tensor_io import Declaration

LIMIT_ROWS = 4
MAX_ROWS = 8
BATCHED: Declaration = {
    "inputs": [Tensor("X", "FP32", [1])],
    "outputs": [Tensor("Y", "FP32", [1])],
    "max_batch_size": MAX_ROWS,
    # Waits for a full batch: only a test that sends fewer than 8 rows would wait this long.
    "dynamic_batching": DynamicBatching(max_queue_delay_microseconds=10_000_000),
}


def _host(X: np.ndarray) -> np.ndarray:
    if X.shape[0] > LIMIT_ROWS:  # numpy's own MemoryError ("Unable to allocate 6.00 PiB ...")
        np.empty((X.shape[0], 1 << 50), np.uint8)
    return X * 2


def _cuda(X: np.ndarray) -> np.ndarray:
    if X.shape[0] > LIMIT_ROWS:
        import torch  # CPU torch builds construct it too

        raise torch.cuda.OutOfMemoryError(
            f"CUDA out of memory. Tried to allocate {X.shape[0]}.00 GiB. GPU 0 has a total "
            "capacity of 15.70 GiB of which 1.06 GiB is free."
        )
    return X * 2


@model(name="oom_host", **BATCHED)
def oom_host(X: np.ndarray) -> np.ndarray:
    """Raises numpy's MemoryError above LIMIT_ROWS rows."""
    return _host(X)


@model(name="oom_cuda", **BATCHED)
def oom_cuda(X: np.ndarray) -> np.ndarray:
    """Raises torch.cuda.OutOfMemoryError above LIMIT_ROWS rows."""
    return _cuda(X)


@model(name="oom_alone_http", **BATCHED)
def oom_alone_http(X: np.ndarray) -> np.ndarray:
    """`oom_host` again: each test that lowers a model's batch cap gets its own model."""
    return _host(X)


@model(name="oom_alone_grpc", **BATCHED)
def oom_alone_grpc(X: np.ndarray) -> np.ndarray:
    """`oom_cuda` again, for the gRPC test."""
    return _cuda(X)


@model(name="oom_process", instance_group=[InstanceGroup(isolation="process")], **BATCHED)
def oom_process(X: np.ndarray) -> np.ndarray:
    """`oom_host` in a worker process."""
    return _host(X)


@model(name="bystander", inputs=[Tensor("X", "FP32", [1])], outputs=[Tensor("Y", "FP32", [1])])
def bystander(X: np.ndarray) -> np.ndarray:
    """Another model on the same server: it never runs out of memory."""
    return X + 1


MODELS: list[ModelSpec] = [
    oom_host,
    oom_cuda,
    oom_alone_http,
    oom_alone_grpc,
    oom_process,
    bystander,
]
