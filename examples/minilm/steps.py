"""The MiniLM pipeline's step classes, undecorated: functions/embeddings.py serves them as
`@model`s and benchmarks/minilm_models.py fuses them into one."""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

import numpy as np

from examples.minilm.export import ensure_onnx
from examples.minilm.processing import load_tokenizer, tokenize
from fnserve import DynamicBatching

if TYPE_CHECKING:
    import onnxruntime as ort

# The encoder: worth waiting for, and fastest per row at 8 rows on one core (benchmarks/
# minilm.py, three runs on 2026-11-23: 36-38 rows/s at 8, 4-8 % fewer at 16, fewer still at
# 32 and 64), so 8 is its preferred size: under load the batcher takes 8 rather than the 16
# it would take when both are preferred (the largest preferred size it can form, Triton's rule).
ENCODER_BATCHING = DynamicBatching(preferred_batch_size=[8], max_queue_delay_microseconds=2000)


# Set by benchmarks/minilm.py: every MiniLMEncoder in the process then runs one session, so
# that the pipeline and the fused baseline it is compared with run the very same one (two
# sessions in one process can differ by 0.1 ms a call from where their weights landed alone).
SHARED_SESSION_ENV = "MINILM_SHARED_SESSION"


def new_session() -> ort.InferenceSession:
    """An ONNX Runtime session of the encoder on one thread (exported on first use)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(ensure_onnx()), options, providers=["CPUExecutionProvider"])


shared_session = functools.cache(new_session)


class MiniLMTokenize:
    """UTF-8 sentences TEXT [N, 1] to INPUT_IDS and ATTENTION_MASK [N, SEQ_LEN]."""

    def __init__(self) -> None:
        self.tokenizer = load_tokenizer()

    def __call__(self, TEXT: np.ndarray) -> dict[str, np.ndarray]:
        texts = [
            t.decode("utf-8", "replace") if isinstance(t, bytes) else str(t) for t in TEXT[:, 0]
        ]
        ids, mask = tokenize(texts, self.tokenizer)
        return {"INPUT_IDS": ids, "ATTENTION_MASK": mask}


class MiniLMEncoder:
    """The BERT encoder on ONNX Runtime, one thread; exported to the cache on first load."""

    def __init__(self) -> None:
        # Its own session unless a benchmark asks for one per process: an instance released
        # (scaled to zero, reloaded) must release its 90 MB of weights.
        shared = os.environ.get(SHARED_SESSION_ENV) == "1"
        self.session = shared_session() if shared else new_session()

    def __call__(self, INPUT_IDS: np.ndarray, ATTENTION_MASK: np.ndarray) -> np.ndarray:
        feeds = {
            "INPUT_IDS": INPUT_IDS.astype(np.int64, copy=False),
            "ATTENTION_MASK": ATTENTION_MASK.astype(np.int64, copy=False),
        }
        (hidden,) = self.session.run(["HIDDEN"], feeds)
        return np.asarray(hidden, dtype=np.float32)
