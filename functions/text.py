"""Example: BYTES tensors (strings) in and out, and an async model."""

from __future__ import annotations

import numpy as np

from fnserve import DynamicBatching, Tensor, model


@model(
    max_batch_size=32,
    dynamic_batching=DynamicBatching(),
    inputs=[Tensor("TEXT", "BYTES", [1])],
    outputs=[Tensor("UPPER", "BYTES", [1]), Tensor("LENGTH", "INT64", [1])],
)
async def shout(TEXT: np.ndarray) -> dict[str, np.ndarray]:
    """Upper-cases UTF-8 text and counts its bytes; async models run on the event loop."""
    upper = np.array([[t.upper()] for t in TEXT[:, 0]], dtype=object)
    lengths = np.array([[len(t)] for t in TEXT[:, 0]], dtype=np.int64)
    return {"UPPER": upper, "LENGTH": lengths}
