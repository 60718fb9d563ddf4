"""The MiniLM example pipeline (examples/minilm/pipeline.py) plus its fused baseline: one
function doing tokenize -> encoder -> pool in a single call, same code and session settings."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from examples.minilm.bert import SEQ_LEN, mean_pool
from examples.minilm.pipeline import (
    BATCHING,
    HIDDEN_SIZE,
    MiniLMEncoder,
    MiniLMTokenize,
    minilm,
    minilm_encoder,
    minilm_pool,
    minilm_tokenize,
)
from fnserve import Tensor, model

__all__ = ["minilm", "minilm_encoder", "minilm_fused", "minilm_pool", "minilm_tokenize"]


class MiniLMFused:
    """Tokenize, encode and pool in one call."""

    def __init__(self) -> None:
        self.tokenize = MiniLMTokenize()
        self.encode = MiniLMEncoder()

    def __call__(self, TEXT: np.ndarray) -> np.ndarray:
        tokens = self.tokenize(TEXT)
        hidden = self.encode(tokens["INPUT_IDS"], tokens["ATTENTION_MASK"])
        return mean_pool(hidden, tokens["ATTENTION_MASK"])


minilm_fused = model(
    name="minilm_fused",
    max_batch_size=64,
    dynamic_batching=BATCHING,
    inputs=[Tensor("TEXT", "BYTES", [1])],
    outputs=[Tensor("EMBEDDING", "FP32", [HIDDEN_SIZE])],
)(MiniLMFused)
assert SEQ_LEN == 128
