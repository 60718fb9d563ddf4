"""24 models of 40 MiB each for benchmarks/density.py (more than its memory budget holds).

Each answers Y = X + 1 plus CALLS, the calls its instance has seen (its warmup sample is call
1), so the client can tell a request that cold-started the model (CALLS == 2).
"""

from __future__ import annotations

import numpy as np

from fnserve import Tensor, Warmup, WarmupInput, model

COUNT, MEGABYTES = 24, 40


class Resident:
    """A model holding MEGABYTES of weights (touched, so resident)."""

    def __init__(self) -> None:
        self.weights = np.ones(MEGABYTES * 2**20 // 8)
        self.calls = 0

    def __call__(self, X: np.ndarray) -> dict[str, np.ndarray]:
        self.calls += 1
        return {"Y": X + 1, "CALLS": np.full((X.shape[0], 1), self.calls, np.int64)}


for _index in range(COUNT):
    globals()[f"dense_{_index:02d}"] = model(
        name=f"dense_{_index:02d}",
        inputs=[Tensor("X", "FP32", [1])],
        outputs=[Tensor("Y", "FP32", [1]), Tensor("CALLS", "INT64", [1])],
        max_batch_size=8,
        warmup=[Warmup("zero", {"X": WarmupInput("FP32", [1], "zero")})],
    )(Resident)
