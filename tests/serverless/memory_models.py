"""Models for the scale-to-zero and memory-budget tests (served by a real `fnserve serve`).

Each `ballast_*` instance holds BALLAST_MB of touched memory, so its footprint is measurable
from outside (the server's RSS). Every answer says how often this process built an instance
(BUILT) and how many calls this instance saw (CALLS, warmup included), so a test can tell a
cold start (a new instance) and whether warmup ran before its answer.
"""

from __future__ import annotations

import itertools
import os
import time

import numpy as np

from fnserve import Tensor, Warmup, WarmupInput, model

BALLAST_MB = int(os.environ.get("FNSERVE_TEST_BALLAST_MB", "120"))
BUILD_DELAY_S = float(os.environ.get("FNSERVE_TEST_BUILD_DELAY_S", "0"))
_BUILT = itertools.count(1)
_INPUTS = [Tensor("X", "FP32", [1]), Tensor("SLEEP_S", "FP32", [1], optional=True)]
_OUTPUTS = [
    Tensor("Y", "FP32", [1]),
    Tensor("BUILT", "INT64", [1]),
    Tensor("CALLS", "INT64", [1]),
]
_WARMUP = [Warmup("one", batch_size=1, inputs={"X": WarmupInput("FP32", [1], "zero")})]


class Ballast:
    """Holds `megabytes` of memory; answers Y = X + 1 after an optional sleep."""

    megabytes = BALLAST_MB

    def __init__(self) -> None:
        time.sleep(BUILD_DELAY_S)
        self.ballast = np.ones(self.megabytes * 2**20 // 8)  # touched: resident
        self.built = next(_BUILT)
        self.calls = 0

    def __call__(self, X: np.ndarray, SLEEP_S: np.ndarray | None = None) -> dict[str, np.ndarray]:
        self.calls += 1
        if SLEEP_S is not None:
            time.sleep(float(SLEEP_S.max()))
        rows = X.shape[0]
        return {
            "Y": (X + 1).astype(np.float32),
            "BUILT": np.full((rows, 1), self.built, np.int64),
            "CALLS": np.full((rows, 1), self.calls, np.int64),
        }


class BigBallast(Ballast):
    megabytes = 4 * BALLAST_MB


def _ballast(
    name: str,
    cls: type[Ballast] = Ballast,
    idle_timeout_s: float | None = None,
    min_instances: int | None = None,
) -> object:
    return model(name=name, inputs=_INPUTS, outputs=_OUTPUTS, max_batch_size=64, warmup=_WARMUP,
                 idle_timeout_s=idle_timeout_s, min_instances=min_instances)(cls)  # fmt: skip


sleepy = _ballast("sleepy", idle_timeout_s=float(os.environ.get("FNSERVE_TEST_IDLE_S", "1")))
ballast_a = _ballast("ballast_a")
ballast_b = _ballast("ballast_b")
ballast_c = _ballast("ballast_c")
ballast_pinned = _ballast("ballast_pinned", min_instances=1)
ballast_big = _ballast("ballast_big", BigBallast)


@model(
    inputs=[Tensor("X", "FP32", [1])],
    outputs=[Tensor("Y", "FP32", [1])],
    max_instances=3,
    parameters={"scale_up_queue_ms": "5", "scale_down_idle_s": "1"},
)
def elastic(X: np.ndarray) -> np.ndarray:
    """40 ms per request (sleeping, so instances overlap): one instance serves 25 req/s."""
    time.sleep(0.04)
    return (X + 1).astype(np.float32)
