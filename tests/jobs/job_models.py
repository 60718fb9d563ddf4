"""Models the jobs end-to-end tests serve."""

from __future__ import annotations

import threading
import time
from collections import Counter

import numpy as np

from fnserve import DynamicBatching, Tensor, model

_attempts: Counter[float] = Counter()
_lock = threading.Lock()


@model(
    max_batch_size=8,
    dynamic_batching=DynamicBatching(max_queue_delay_microseconds=0),
    inputs=[Tensor("INPUT0", "FP32", [-1])],
    outputs=[Tensor("DOUBLE", "FP32", [-1]), Tensor("PLUS1", "FP32", [-1])],
)
def double(INPUT0: np.ndarray) -> dict[str, np.ndarray]:
    """Two outputs, so a request can ask for one as binary and one as JSON."""
    return {"DOUBLE": INPUT0 * 2, "PLUS1": INPUT0 + 1}


@model(inputs=[Tensor("TEXT", "BYTES", [-1])], outputs=[Tensor("TEXT_OUT", "BYTES", [-1])])
def echo_bytes(TEXT: np.ndarray) -> np.ndarray:
    """BYTES echo."""
    return TEXT


@model(inputs=[Tensor("COUNT", "INT32", [1])], outputs=[Tensor("ZEROS", "FP32", [-1])])
def big(COUNT: np.ndarray) -> np.ndarray:
    """COUNT float zeros: as large a result as asked for."""
    return np.zeros(int(COUNT[0]), dtype=np.float32)


@model(inputs=[Tensor("KEY", "FP32", [1])], outputs=[Tensor("KEY_OUT", "FP32", [1])])
def flaky(KEY: np.ndarray) -> np.ndarray:
    """Fails the first time it sees each KEY, then succeeds."""
    with _lock:
        _attempts[float(KEY[0])] += 1
        first = _attempts[float(KEY[0])] == 1
    if first:
        raise RuntimeError("flaky: first attempt fails")
    return KEY


@model(inputs=[Tensor("INPUT0", "FP32", [1])], outputs=[Tensor("OUTPUT0", "FP32", [1])])
def broken(INPUT0: np.ndarray) -> np.ndarray:
    """Always raises."""
    raise ValueError("broken model always raises")


@model(inputs=[Tensor("SECONDS", "FP32", [1])], outputs=[Tensor("SLEPT", "FP32", [1])])
def slow(SECONDS: np.ndarray) -> np.ndarray:
    """Blocks its only instance for SECONDS."""
    time.sleep(float(SECONDS[0]))
    return SECONDS


@model(
    max_batch_size=8,
    dynamic_batching=DynamicBatching(max_queue_delay_microseconds=20_000),
    inputs=[Tensor("X", "FP32", [1])],
    outputs=[Tensor("JOB_ROWS", "INT32", [1])],
)
def batch_probe(X: np.ndarray) -> np.ndarray:
    """Each row learns how many job rows (X >= 0; online requests send -1) its batch held."""
    time.sleep(0.01)
    job_rows = int((X >= 0).sum())
    return np.full((len(X), 1), job_rows, dtype=np.int32)
