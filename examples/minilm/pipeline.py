"""all-MiniLM-L6-v2 sentence embeddings served as three batching steps and their ensemble.

    minilm_tokenize  TEXT BYTES [1]        -> INPUT_IDS, ATTENTION_MASK INT64 [128]
    minilm_encoder   INPUT_IDS, ATTENTION_MASK -> HIDDEN FP32 [128, 384]   (ONNX Runtime)
    minilm_pool      HIDDEN, ATTENTION_MASK -> EMBEDDING FP32 [384]        (mean, L2-normalised)
    minilm           TEXT -> EMBEDDING                                      (the ensemble)

The tokenizer pads every sentence to 128 tokens so requests always merge into batches. Serve
it with `fnserve serve examples/minilm/pipeline.py`; the encoder exports its ONNX file on first
load into examples/minilm/.cache/.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from fnserve import DynamicBatching, Tensor, ensemble, model

# fnserve imports this file by path: make `examples.minilm` importable from the repository.
_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.append(str(_ROOT))

from examples.minilm.bert import SEQ_LEN, load_tokenizer, mean_pool  # noqa: E402

HIDDEN_SIZE = 384
CACHE = Path(__file__).resolve().parent / ".cache" / "minilm_encoder.onnx"
# The encoder: worth waiting for, and fastest per row at 8-16 rows on one core (measured by
# benchmarks/minilm.py), so those are its preferred sizes.
BATCHING = DynamicBatching(preferred_batch_size=[8, 16], max_queue_delay_microseconds=2000)
NO_WAIT = DynamicBatching()  # tokenize and pool: cheap, batch only what is already queued


class MiniLMTokenize:
    """UTF-8 sentences to token ids, truncated and padded to SEQ_LEN."""

    def __init__(self) -> None:
        self.tokenizer = load_tokenizer(SEQ_LEN)

    def __call__(self, TEXT: np.ndarray) -> dict[str, np.ndarray]:
        texts = [
            t.decode("utf-8", "replace") if isinstance(t, bytes) else str(t) for t in TEXT[:, 0]
        ]
        encodings = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64).reshape(-1, SEQ_LEN)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        return {"INPUT_IDS": ids, "ATTENTION_MASK": mask.reshape(-1, SEQ_LEN)}


# `model(...)` applied as a call: a class decorator does not change the static type.
minilm_tokenize = model(
    name="minilm_tokenize",
    max_batch_size=64,
    dynamic_batching=NO_WAIT,
    inputs=[Tensor("TEXT", "BYTES", [1])],
    outputs=[
        Tensor("INPUT_IDS", "INT64", [SEQ_LEN]),
        Tensor("ATTENTION_MASK", "INT64", [SEQ_LEN]),
    ],
)(MiniLMTokenize)


class MiniLMEncoder:
    """The BERT encoder on ONNX Runtime (exported from the torch module on first load)."""

    def __init__(self) -> None:
        import onnxruntime as ort

        from examples.minilm.export import ensure_onnx

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(
            str(ensure_onnx(CACHE)), options, providers=["CPUExecutionProvider"]
        )

    def __call__(self, INPUT_IDS: np.ndarray, ATTENTION_MASK: np.ndarray) -> np.ndarray:
        feeds = {
            "INPUT_IDS": INPUT_IDS.astype(np.int64, copy=False),
            "ATTENTION_MASK": ATTENTION_MASK.astype(np.int64, copy=False),
        }
        (hidden,) = self.session.run(["HIDDEN"], feeds)
        return np.asarray(hidden, dtype=np.float32)


minilm_encoder = model(
    name="minilm_encoder",
    max_batch_size=64,
    dynamic_batching=BATCHING,
    inputs=[
        Tensor("INPUT_IDS", "INT64", [SEQ_LEN]),
        Tensor("ATTENTION_MASK", "INT64", [SEQ_LEN]),
    ],
    outputs=[Tensor("HIDDEN", "FP32", [SEQ_LEN, HIDDEN_SIZE])],
)(MiniLMEncoder)


@model(
    name="minilm_pool",
    max_batch_size=64,
    dynamic_batching=NO_WAIT,
    inputs=[
        Tensor("HIDDEN", "FP32", [SEQ_LEN, HIDDEN_SIZE]),
        Tensor("ATTENTION_MASK", "INT64", [SEQ_LEN]),
    ],
    outputs=[Tensor("EMBEDDING", "FP32", [HIDDEN_SIZE])],
)
def minilm_pool(HIDDEN: np.ndarray, ATTENTION_MASK: np.ndarray) -> np.ndarray:
    """Mean of the hidden states over the attended tokens, L2-normalised."""
    return mean_pool(HIDDEN, ATTENTION_MASK)


minilm = ensemble("minilm", steps=[minilm_tokenize, minilm_encoder, minilm_pool])
