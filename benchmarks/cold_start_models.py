"""Two models that scale to zero after 0.5 s idle, for benchmarks/cold_start.py.

mlp_cold: the anchor MLP (weights built in __init__); minilm_encoder_cold: the MiniLM encoder's
ONNX Runtime session (from the export cache). Each warms up with one zero sample.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from anchor_models import MLP

from examples.minilm.processing import SEQ_LEN
from examples.minilm.steps import MiniLMEncoder
from fnserve import Tensor, Warmup, WarmupInput, model

IDLE_S = 0.5


class MLPModel:
    def __init__(self) -> None:
        self.mlp = MLP()

    def __call__(self, INPUT0: np.ndarray) -> np.ndarray:
        return self.mlp(INPUT0)


mlp_cold = model(
    name="mlp_cold",
    inputs=[Tensor("INPUT0", "FP32", [256])],
    outputs=[Tensor("OUTPUT0", "FP32", [10])],
    max_batch_size=8,
    idle_timeout_s=IDLE_S,
    warmup=[Warmup("zero", {"INPUT0": WarmupInput("FP32", [256], "zero")})],
)(MLPModel)

minilm_encoder_cold = model(
    name="minilm_encoder_cold",
    inputs=[Tensor("INPUT_IDS", "INT64", [SEQ_LEN]), Tensor("ATTENTION_MASK", "INT64", [SEQ_LEN])],
    outputs=[Tensor("HIDDEN", "FP32", [SEQ_LEN, 384])],
    max_batch_size=8,
    idle_timeout_s=IDLE_S,
    warmup=[
        Warmup(
            "zero",
            {
                "INPUT_IDS": WarmupInput("INT64", [SEQ_LEN], "zero"),
                "ATTENTION_MASK": WarmupInput("INT64", [SEQ_LEN], "zero"),
            },
        )
    ],  # fmt: skip
)(MiniLMEncoder)
