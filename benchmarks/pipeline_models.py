"""The anchor MLP two ways: three steps composed by an ensemble, and one fused function.

mlp3 = ensemble(mlp_layer1 -> mlp_layer2 -> mlp_layer3); mlp_fused does the same three layers
in one call. Same weights as the anchors' MLP (seed 0); every model max_batch_size 64 with
dynamic batching, so the comparison isolates what composing steps costs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from anchor_models import MLP

from fnserve import DynamicBatching, Tensor, ensemble, model

_BATCHING = DynamicBatching(max_queue_delay_microseconds=0)
_W = MLP()
(_W1, _B1), (_W2, _B2), (_W3, _B3) = _W.layers


@model(inputs=[Tensor("INPUT0", "FP32", [256])], outputs=[Tensor("H1", "FP32", [1024])],
       max_batch_size=64, dynamic_batching=_BATCHING)  # fmt: skip
def mlp_layer1(INPUT0: np.ndarray) -> np.ndarray:
    h: np.ndarray = np.maximum(INPUT0 @ _W1 + _B1, 0.0)
    return h


@model(inputs=[Tensor("H1", "FP32", [1024])], outputs=[Tensor("H2", "FP32", [1024])],
       max_batch_size=64, dynamic_batching=_BATCHING)  # fmt: skip
def mlp_layer2(H1: np.ndarray) -> np.ndarray:
    h: np.ndarray = np.maximum(H1 @ _W2 + _B2, 0.0)
    return h


@model(inputs=[Tensor("H2", "FP32", [1024])], outputs=[Tensor("OUTPUT0", "FP32", [10])],
       max_batch_size=64, dynamic_batching=_BATCHING)  # fmt: skip
def mlp_layer3(H2: np.ndarray) -> np.ndarray:
    y: np.ndarray = (H2 @ _W3 + _B3).astype(np.float32, copy=False)
    return y


@model(inputs=[Tensor("INPUT0", "FP32", [256])], outputs=[Tensor("OUTPUT0", "FP32", [10])],
       max_batch_size=64, dynamic_batching=_BATCHING)  # fmt: skip
def mlp_fused(INPUT0: np.ndarray) -> np.ndarray:
    return _W(INPUT0)


mlp3 = ensemble("mlp3", steps=[mlp_layer1, mlp_layer2, mlp_layer3])
