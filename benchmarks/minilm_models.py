"""The MiniLM example's fused baseline: one function doing tokenize -> encoder -> pool in a
single call, with the same step classes and session settings as functions/embeddings.py (served
beside it: `fnserve serve functions/embeddings.py benchmarks/minilm_models.py`)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from examples.minilm.processing import HIDDEN_SIZE, mean_pool
from examples.minilm.steps import ENCODER_BATCHING, MiniLMEncoder, MiniLMTokenize
from fnserve import Tensor, model

__all__ = ["minilm_fused"]


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
    dynamic_batching=ENCODER_BATCHING,
    inputs=[Tensor("TEXT", "BYTES", [1])],
    outputs=[Tensor("EMBEDDING", "FP32", [HIDDEN_SIZE])],
)(MiniLMFused)
