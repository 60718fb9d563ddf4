"""Models for the shutdown tests that run a real `fnserve serve` process."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from fnserve import Tensor, model


@model(inputs=[Tensor("X", "FP32", [1])], outputs=[Tensor("Y", "FP32", [1])])
def hang(X: np.ndarray) -> np.ndarray:
    """Sleeps X seconds (3600 stands for a model that hangs)."""
    time.sleep(float(X[0]))
    return X


@model(inputs=[Tensor("X", "FP32", [1])], outputs=[Tensor("Y", "FP32", [1])])
def boom(X: np.ndarray) -> np.ndarray:
    """Fails with a message that names a host path (as real exceptions often do)."""
    raise FileNotFoundError(
        f"[Errno 2] No such file or directory: '/srv/secret/weights-{X[0]:g}.bin'"
    )


_POOL = ThreadPoolExecutor(1, thread_name_prefix="user-pool")


@model(inputs=[Tensor("X", "FP32", [1])], outputs=[Tensor("Y", "FP32", [1])])
def spawn(X: np.ndarray) -> np.ndarray:
    """Leaves work of its own sleeping X seconds behind (Python joins it at exit)."""
    _POOL.submit(time.sleep, float(X[0]))
    return X
