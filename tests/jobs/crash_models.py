"""The model the crash tests run: slow enough that a kill lands while jobs run."""

from __future__ import annotations

import time

import numpy as np

from fnserve import DynamicBatching, Tensor, model


@model(
    max_batch_size=8,
    dynamic_batching=DynamicBatching(max_queue_delay_microseconds=1000),
    inputs=[Tensor("X", "FP32", [1])],
    outputs=[Tensor("Y", "FP32", [1])],
)
def slow_double(X: np.ndarray) -> np.ndarray:
    """2 * X, after 40 ms a batch: 1,000 jobs take about 5 s on one server."""
    time.sleep(0.04)
    return X * 2
