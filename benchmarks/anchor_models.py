"""The anchor kit's two models for in-process measurement (same weights as ../shared/anchors).

identity: INPUT0 FP32 [-1] -> OUTPUT0; mlp: INPUT0 FP32 [256] -> OUTPUT0 FP32 [10]
(256 -> 1024 -> 1024 -> 10, ReLU, seed 0). Both max_batch_size 64, dynamic batching, delay 0.
"""

from __future__ import annotations

import numpy as np

from fnserve import DynamicBatching, Tensor, model

_BATCHING = DynamicBatching(max_queue_delay_microseconds=0)


class MLP:
    """The anchors' numpy MLP (mlp_model.py), rebuilt from the same seed."""

    def __init__(self, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.layers = [
            self._layer(rng, 256, 1024),
            self._layer(rng, 1024, 1024),
            self._layer(rng, 1024, 10),
        ]

    @staticmethod
    def _layer(rng: np.random.Generator, n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
        w = (rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32)
        b = (rng.standard_normal(n_out) * 0.01).astype(np.float32)
        return w, b

    def __call__(self, x: np.ndarray) -> np.ndarray:
        (w1, b1), (w2, b2), (w3, b3) = self.layers
        h = np.maximum(x @ w1 + b1, 0.0)
        h = np.maximum(h @ w2 + b2, 0.0)
        y: np.ndarray = (h @ w3 + b3).astype(np.float32, copy=False)
        return y


_mlp = MLP()


@model(
    name="identity",
    max_batch_size=64,
    dynamic_batching=_BATCHING,
    inputs=[Tensor("INPUT0", "FP32", [-1])],
    outputs=[Tensor("OUTPUT0", "FP32", [-1])],
)
def identity(INPUT0: np.ndarray) -> dict[str, np.ndarray]:
    return {"OUTPUT0": INPUT0}


@model(
    name="mlp",
    max_batch_size=64,
    dynamic_batching=_BATCHING,
    inputs=[Tensor("INPUT0", "FP32", [256])],
    outputs=[Tensor("OUTPUT0", "FP32", [10])],
)
def mlp(INPUT0: np.ndarray) -> dict[str, np.ndarray]:
    return {"OUTPUT0": _mlp(INPUT0)}
