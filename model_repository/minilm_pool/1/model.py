"""Triton Python backend: mean of HIDDEN over ATTENTION_MASK, L2-normalised -> EMBEDDING."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            hidden = pb_utils.get_input_tensor_by_name(request, "HIDDEN").as_numpy()
            mask = pb_utils.get_input_tensor_by_name(request, "ATTENTION_MASK").as_numpy()
            weights = mask.astype(np.float32)[:, :, None]
            summed = (hidden.astype(np.float32) * weights).sum(axis=1)
            pooled = summed / np.maximum(weights.sum(axis=1), 1e-9)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            embedding = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("EMBEDDING", embedding)])
            )
        return responses
