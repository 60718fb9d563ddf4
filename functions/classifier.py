"""Example: a class model holding loaded state, with two instances and dynamic batching."""

from __future__ import annotations

import numpy as np

from fnserve import DynamicBatching, InstanceContext, InstanceGroup, Tensor, model


@model(
    name="classifier",
    max_batch_size=64,
    dynamic_batching=DynamicBatching(
        preferred_batch_size=[32, 64], max_queue_delay_microseconds=1000
    ),
    instance_group=[InstanceGroup(count=2, kind="KIND_CPU")],
    inputs=[Tensor("FEATURES", "FP32", [32])],
    outputs=[Tensor("PROBABILITIES", "FP32", [4]), Tensor("LABEL", "INT64", [1])],
    parameters={"seed": "7"},
)
class Classifier:
    """A linear softmax classifier; each instance builds its weights once, at load time."""

    def __init__(self, context: InstanceContext) -> None:
        rng = np.random.default_rng(int(context.parameters["seed"]))
        self.weights = rng.standard_normal((32, 4)).astype(np.float32)

    def __call__(self, FEATURES: np.ndarray) -> dict[str, np.ndarray]:
        logits = FEATURES @ self.weights
        exp = np.exp(logits - logits.max(axis=1, keepdims=True))
        probabilities = (exp / exp.sum(axis=1, keepdims=True)).astype(np.float32)
        return {"PROBABILITIES": probabilities, "LABEL": probabilities.argmax(axis=1)[:, None]}
