"""Triton model repositories whose python-backend models call other models (BLS).

`classification_repository` is the acceptance pipeline: `preprocess` -> `classifier` ->
`postprocess`, served three ways (a `platform: "ensemble"` config, a sync BLS model using
`exec()`, an async one using `async_exec()` with two calls at once) plus `bls_loop`, a model that
calls itself. `reference` is the pipeline's maths in plain numpy.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from string import Template

import numpy as np

MEAN = [1.0, 2.0, 3.0, 4.0]
SCALE = [2.0, 2.0, 4.0, 4.0]
WEIGHTS = [[0.5, -1.0, 0.25], [1.5, 0.5, -0.5], [-1.0, 2.0, 0.75], [0.25, -0.5, 1.0]]
BIAS = [0.1, -0.2, 0.05]

# Elementwise float32 maths only (no matmul, no reductions over a batch): a row's result does
# not depend on which rows it was batched with, so every path must agree to the last bit.
MATHS = """
import numpy as np

MEAN = np.array($MEAN, np.float32)
SCALE = np.array($SCALE, np.float32)
WEIGHTS = np.array($WEIGHTS, np.float32)
BIAS = np.array($BIAS, np.float32)


def normalise(raw):
    return (raw - MEAN) / SCALE


def logits_of(features):
    logits = np.broadcast_to(BIAS, (len(features), 3)).copy()
    for i in range(4):
        logits += features[:, i : i + 1] * WEIGHTS[i]
    return logits


def label_and_probability(logits):
    e = np.exp(logits - np.maximum(np.maximum(logits[:, 0:1], logits[:, 1:2]), logits[:, 2:3]))
    probabilities = e / (e[:, 0:1] + e[:, 1:2] + e[:, 2:3])
    label = probabilities.argmax(axis=1).reshape(-1, 1).astype(np.int64)
    return label, np.take_along_axis(probabilities, label, axis=1)
"""

PREPROCESS = """
import triton_python_backend_utils as pb_utils
$MATHS

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            raw = pb_utils.get_input_tensor_by_name(request, "RAW").as_numpy()
            features = pb_utils.Tensor("FEATURES", normalise(raw))
            responses.append(pb_utils.InferenceResponse(output_tensors=[features]))
        return responses
"""

CLASSIFIER = """
import triton_python_backend_utils as pb_utils
$MATHS

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            features = pb_utils.get_input_tensor_by_name(request, "FEATURES").as_numpy()
            bad = ~np.isfinite(features).all(axis=1)
            if bad.any():
                row = int(bad.argmax())
                raise ValueError(f"FEATURES must be finite, row {row} is {features[row]}")
            logits = pb_utils.Tensor("LOGITS", logits_of(features))
            responses.append(pb_utils.InferenceResponse(output_tensors=[logits]))
        return responses
"""

POSTPROCESS = """
import triton_python_backend_utils as pb_utils
$MATHS

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            logits = pb_utils.get_input_tensor_by_name(request, "LOGITS").as_numpy()
            label, probability = label_and_probability(logits)
            outputs = [pb_utils.Tensor("LABEL", label), pb_utils.Tensor("PROB", probability)]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
"""

# The pipeline as business logic, the way Triton's BLS example writes it: exec() each step,
# check has_error(), read the outputs by name. A failed step becomes the client's error.
BLS_SYNC = """
import triton_python_backend_utils as pb_utils


class StepFailed(Exception):
    pass


class TritonPythonModel:
    def step(self, model, inputs, outputs):
        request = pb_utils.InferenceRequest(
            model_name=model, requested_output_names=outputs, inputs=inputs
        )
        response = request.exec()
        if response.has_error():
            raise StepFailed(f"step '{model}' failed: {response.error().message()}")
        return [pb_utils.get_output_tensor_by_name(response, name) for name in outputs]

    def execute(self, requests):
        responses = []
        for request in requests:
            raw = pb_utils.get_input_tensor_by_name(request, "RAW")
            try:
                (features,) = self.step("preprocess", [raw], ["FEATURES"])
                (logits,) = self.step("classifier", [features], ["LOGITS"])
                outputs = self.step("postprocess", [logits], ["LABEL", "PROB"])
            except StepFailed as exc:
                error = pb_utils.TritonError(str(exc))
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
                continue
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
"""

# The same with async_exec(): a batch of two or more rows is split in two halves that go
# through the pipeline at once (asyncio.gather); a failed step raises, as Triton's docs do.
BLS_ASYNC = """
import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def step(self, model, arrays, outputs):
        inputs = [pb_utils.Tensor(name, array) for name, array in arrays.items()]
        request = pb_utils.InferenceRequest(
            model_name=model, requested_output_names=outputs, inputs=inputs
        )
        response = await request.async_exec()
        if response.has_error():
            raise pb_utils.TritonModelException(
                f"step '{model}' failed: {response.error().message()}"
            )
        return [pb_utils.get_output_tensor_by_name(response, n).as_numpy() for n in outputs]

    async def pipeline(self, raw):
        (features,) = await self.step("preprocess", {"RAW": raw}, ["FEATURES"])
        (logits,) = await self.step("classifier", {"FEATURES": features}, ["LOGITS"])
        return await self.step("postprocess", {"LOGITS": logits}, ["LABEL", "PROB"])

    async def execute(self, requests):
        responses = []
        for request in requests:
            raw = pb_utils.get_input_tensor_by_name(request, "RAW").as_numpy()
            halves = [part for part in np.array_split(raw, 2) if len(part)]
            results = await asyncio.gather(*(self.pipeline(part) for part in halves))
            label = np.concatenate([r[0] for r in results])
            probability = np.concatenate([r[1] for r in results])
            outputs = [pb_utils.Tensor("LABEL", label), pb_utils.Tensor("PROB", probability)]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
"""

# A model whose business logic calls itself: the call must fail at once, not wait for itself.
BLS_LOOP = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            again = pb_utils.InferenceRequest(
                model_name="bls_loop",
                requested_output_names=["LABEL", "PROB"],
                inputs=request.inputs(),
            )
            response = again.exec()
            responses.append(
                pb_utils.InferenceResponse(response.output_tensors(), error=response.error())
            )
        return responses
"""

RAW = 'input [ { name: "RAW" data_type: TYPE_FP32 dims: [ 4 ] } ]'
LABEL_PROB = """output [
  { name: "LABEL" data_type: TYPE_INT64 dims: [ 1 ] },
  { name: "PROB" data_type: TYPE_FP32 dims: [ 1 ] }
]"""
STEP_BATCHING = "dynamic_batching { max_queue_delay_microseconds: 20000 }"


def _config(name: str, body: str) -> str:
    return f'name: "{name}"\nbackend: "python"\nmax_batch_size: 64\n{body}\n'


CONFIGS = {
    "preprocess": _config(
        "preprocess",
        f"""{RAW}
output [ {{ name: "FEATURES" data_type: TYPE_FP32 dims: [ 4 ] }} ]
{STEP_BATCHING}""",
    ),
    "classifier": _config(
        "classifier",
        f"""input [ {{ name: "FEATURES" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "LOGITS" data_type: TYPE_FP32 dims: [ 3 ] }} ]
{STEP_BATCHING}""",
    ),
    "postprocess": _config(
        "postprocess",
        f"""input [ {{ name: "LOGITS" data_type: TYPE_FP32 dims: [ 3 ] }} ]
{LABEL_PROB}
{STEP_BATCHING}""",
    ),
    # Batches its own requests: one BLS call carries the merged batch.
    "bls_sync": _config(
        "bls_sync",
        f"{RAW}\n{LABEL_PROB}\ndynamic_batching {{ }}\ninstance_group [ {{ count: 2 }} ]",
    ),
    # One request per execution, eight at once: whatever batching the steps show is theirs.
    "bls_async": _config("bls_async", f"{RAW}\n{LABEL_PROB}\ninstance_group [ {{ count: 8 }} ]"),
    "bls_loop": _config("bls_loop", f"{RAW}\n{LABEL_PROB}"),
}

ENSEMBLE = f"""name: "pipeline"
platform: "ensemble"
max_batch_size: 64
{RAW}
{LABEL_PROB}
ensemble_scheduling {{
  step [
    {{ model_name: "preprocess" model_version: -1
      input_map {{ key: "RAW" value: "RAW" }} output_map {{ key: "FEATURES" value: "features" }} }},
    {{ model_name: "classifier" model_version: -1
      input_map {{ key: "FEATURES" value: "features" }}
      output_map {{ key: "LOGITS" value: "logits" }} }},
    {{ model_name: "postprocess" model_version: -1
      input_map {{ key: "LOGITS" value: "logits" }}
      output_map [ {{ key: "LABEL" value: "LABEL" }}, {{ key: "PROB" value: "PROB" }} ] }}
  ]
}}
"""

SOURCES = {
    "preprocess": PREPROCESS,
    "classifier": CLASSIFIER,
    "postprocess": POSTPROCESS,
    "bls_sync": BLS_SYNC,
    "bls_async": BLS_ASYNC,
    "bls_loop": BLS_LOOP,
}


def _maths() -> str:
    return Template(MATHS).substitute(MEAN=MEAN, SCALE=SCALE, WEIGHTS=WEIGHTS, BIAS=BIAS)


def write_model(root: Path, name: str, config: str, source: str | None = None) -> None:
    """`root/name/config.pbtxt`, and `root/name/1/model.py` (or an empty version folder)."""
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(config)
    if source is not None:
        (root / name / "1" / "model.py").write_text(textwrap.dedent(source))


def classification_repository(root: Path) -> Path:
    """Write the acceptance pipeline's repository into `root`; returns `root`."""
    maths = _maths()
    for name, source in SOURCES.items():
        write_model(root, name, CONFIGS[name], Template(source).safe_substitute(MATHS=maths))
    write_model(root, "pipeline", ENSEMBLE)
    return root


def reference(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LABEL and PROB of the pipeline by plain numpy (matmul and softmax, in float64)."""
    features = (raw.astype(np.float64) - MEAN) / SCALE
    logits = features @ np.array(WEIGHTS) + BIAS
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities = e / e.sum(axis=1, keepdims=True)
    label = probabilities.argmax(axis=1).reshape(-1, 1)
    return label, np.take_along_axis(probabilities, label, axis=1)
