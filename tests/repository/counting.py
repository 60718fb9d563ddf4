"""Counters that model files written by the race tests share with the test (imported by both)."""

from __future__ import annotations

import threading
import time
from collections import Counter

import numpy as np

from fnserve import InstanceContext, Tensor

X = Tensor("X", "FP32", [1])
Y = Tensor("Y", "FP32", [1])
BUILT: Counter[str] = Counter()
CLOSED: Counter[str] = Counter()
NO_HANG_S = 10.0  # a request still unanswered after this long counts as hung


class Counted:
    """A model whose instances count their builds and unloads, and can be held mid-batch."""

    built: Counter[str] = Counter()
    closed: Counter[str] = Counter()
    build_s = 0.0
    gate = threading.Event()

    def __init__(self, context: InstanceContext) -> None:
        time.sleep(self.build_s)
        self.key = context.model_name
        Counted.built[self.key] += 1

    def infer(self, X: np.ndarray) -> np.ndarray:
        Counted.gate.wait(NO_HANG_S)
        return X

    def close(self) -> None:
        Counted.closed[self.key] += 1


def reset() -> None:
    """Counts to zero, no build delay, the gate open."""
    BUILT.clear()
    CLOSED.clear()
    Counted.built.clear()
    Counted.closed.clear()
    Counted.build_s = 0.0
    Counted.gate.set()
