"""Triton python-backend `identity`: returns INPUT0. A first element of -2 raises (the whole
execution fails: counted as a BACKEND failure); any other negative one fails only its response
(Triton counts that request as a success)."""

from typing import Any

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """One response per request; a per-request error exercises Triton's error path."""

    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if x.size and x.ravel()[0] == -2:
                raise ValueError("minus two")
            if x.size and x.ravel()[0] < 0:
                error = pb_utils.TritonError("negative input")
                responses.append(pb_utils.InferenceResponse(error=error))
            else:
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return responses
