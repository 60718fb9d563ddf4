"""Sentence embeddings (all-MiniLM-L6-v2) as three batching steps and their ensemble:

    minilm_tokenize  TEXT BYTES [1]            -> INPUT_IDS, ATTENTION_MASK INT64 [128]
    minilm_encoder   INPUT_IDS, ATTENTION_MASK -> HIDDEN FP32 [128, 384]   (ONNX Runtime)
    minilm_pool      HIDDEN, ATTENTION_MASK    -> EMBEDDING FP32 [384]     (mean, L2-normalised)
    minilm           TEXT -> EMBEDDING                                      (the ensemble)

The tokenizer pads every sentence to 128 tokens so requests always merge into batches. The
encoder's first load exports its ONNX file into examples/minilm/.cache/ (a few seconds, once;
`python -m examples.minilm.export` does it ahead). The code lives in examples/minilm/.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from fnserve import DynamicBatching, Tensor, ensemble, model

# fnserve imports this file by path: make `examples.minilm` importable from the repository.
_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.append(str(_ROOT))

from examples.minilm.processing import HIDDEN_SIZE, SEQ_LEN, mean_pool  # noqa: E402
from examples.minilm.steps import ENCODER_BATCHING, MiniLMEncoder, MiniLMTokenize  # noqa: E402

NO_WAIT = DynamicBatching()  # tokenize and pool: cheap, batch only what is already queued
# Tokenize and pool take 50-150 us for one sentence, less than handing the batch to their
# thread and back: such batches run on the event loop's thread (scheduling/inline.py). Larger
# batches (under load) take longer and go back to the threads by themselves.
INLINE = {"inline_max_us": "500"}
IDS_TENSOR = Tensor("INPUT_IDS", "INT64", [SEQ_LEN])
MASK_TENSOR = Tensor("ATTENTION_MASK", "INT64", [SEQ_LEN])
HIDDEN_TENSOR = Tensor("HIDDEN", "FP32", [SEQ_LEN, HIDDEN_SIZE])

# `model(...)` applied as a call: a class decorator does not change the static type.
minilm_tokenize = model(
    name="minilm_tokenize",
    max_batch_size=64,
    dynamic_batching=NO_WAIT,
    parameters=INLINE,
    inputs=[Tensor("TEXT", "BYTES", [1])],
    outputs=[IDS_TENSOR, MASK_TENSOR],
)(MiniLMTokenize)

minilm_encoder = model(
    name="minilm_encoder",
    max_batch_size=64,
    dynamic_batching=ENCODER_BATCHING,
    inputs=[IDS_TENSOR, MASK_TENSOR],
    outputs=[HIDDEN_TENSOR],
)(MiniLMEncoder)


@model(
    name="minilm_pool",
    max_batch_size=64,
    dynamic_batching=NO_WAIT,
    parameters=INLINE,
    inputs=[HIDDEN_TENSOR, MASK_TENSOR],
    outputs=[Tensor("EMBEDDING", "FP32", [HIDDEN_SIZE])],
)
def minilm_pool(HIDDEN: np.ndarray, ATTENTION_MASK: np.ndarray) -> np.ndarray:
    """Mean of the hidden states over the attended tokens, L2-normalised."""
    return mean_pool(HIDDEN, ATTENTION_MASK)


minilm = ensemble("minilm", steps=[minilm_tokenize, minilm_encoder, minilm_pool])
