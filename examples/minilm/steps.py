"""The MiniLM pipeline's step classes, undecorated: functions/embeddings.py serves them as
`@model`s and benchmarks/minilm_models.py fuses them into one."""

from __future__ import annotations

import numpy as np

from examples.minilm.export import ensure_onnx
from examples.minilm.processing import load_tokenizer, tokenize
from fnserve import DynamicBatching

# The encoder: worth waiting for, and fastest per row at 8-16 rows on one core (measured by
# benchmarks/minilm.py), so those are its preferred sizes.
ENCODER_BATCHING = DynamicBatching(preferred_batch_size=[8, 16], max_queue_delay_microseconds=2000)


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
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(
            str(ensure_onnx()), options, providers=["CPUExecutionProvider"]
        )

    def __call__(self, INPUT_IDS: np.ndarray, ATTENTION_MASK: np.ndarray) -> np.ndarray:
        feeds = {
            "INPUT_IDS": INPUT_IDS.astype(np.int64, copy=False),
            "ATTENTION_MASK": ATTENTION_MASK.astype(np.int64, copy=False),
        }
        (hidden,) = self.session.run(["HIDDEN"], feeds)
        return np.asarray(hidden, dtype=np.float32)
