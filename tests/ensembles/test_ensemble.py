"""Ensembles: steps run in their own models (batching across requests), as a DAG, and a failing
step fails only its request, naming the step."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from fnserve import DynamicBatching, Step, Tensor, ensemble, model
from fnserve.config.model_config import EnsembleStep, ModelConfig
from fnserve.errors import (
    InvalidInputError,
    ModelConfigError,
    ModelExecutionError,
    RepositoryError,
    UnavailableError,
)
from fnserve.repository.ensemble_check import check_steps
from fnserve.runtime import Runtime
from fnserve.types import InferInput, InferRequest, ModelState


def _f(name: str) -> Tensor:
    return Tensor(name, "FP32", [1])


@model(inputs=[_f("X")], outputs=[_f("A")], max_batch_size=64, dynamic_batching=DynamicBatching())
def double(X: np.ndarray) -> np.ndarray:
    return X * 2


ENCODER_BATCHES: list[int] = []


@model(inputs=[_f("A")], outputs=[_f("B")], max_batch_size=64, dynamic_batching=DynamicBatching())
async def plus_one(A: np.ndarray) -> np.ndarray:
    ENCODER_BATCHES.append(len(A))
    await asyncio.sleep(0.002)  # long enough for requests to pile up behind it
    return A + 1


@model(inputs=[_f("A")], outputs=[_f("C")], max_batch_size=64, dynamic_batching=DynamicBatching())
def square(A: np.ndarray) -> np.ndarray:
    result: np.ndarray = A * A
    return result


@model(
    inputs=[_f("B"), _f("C")],
    outputs=[_f("Y")],
    max_batch_size=64,
    dynamic_batching=DynamicBatching(),
)
def join(B: np.ndarray, C: np.ndarray) -> np.ndarray:
    result: np.ndarray = B + C
    return result


@model(inputs=[_f("B")], outputs=[_f("Y")], max_batch_size=64)
def picky(B: np.ndarray) -> np.ndarray:
    if (B > 100).any():
        raise ValueError("too large")
    return B


chain = ensemble("chain", steps=[double, plus_one, Step(picky)])
diamond = ensemble("diamond", steps=[double, plus_one, square, join])  # A feeds two branches


def _request(name: str, x: float) -> InferRequest:
    return InferRequest(name, (InferInput("X", "FP32", np.array([[x]], np.float32)),))


async def _runtime() -> Runtime:
    runtime = Runtime([double, plus_one, square, join, picky, chain, diamond])
    await runtime.start()
    return runtime


def test_the_mapping_is_made_from_the_names() -> None:
    config = diamond.config
    assert [t.name for t in config.inputs] == ["X"]
    assert [t.name for t in config.outputs] == ["Y"]
    assert config.max_batch_size == 64
    assert [s.model_name for s in config.ensemble] == ["double", "plus_one", "square", "join"]
    assert config.to_json()["ensemble_scheduling"]["step"][3]["input_map"] == {"B": "B", "C": "C"}


async def test_two_hundred_concurrent_requests_each_get_their_answer_and_steps_batch() -> None:
    runtime = await _runtime()
    ENCODER_BATCHES.clear()
    xs = [float(i) for i in range(200)]
    responses = await asyncio.gather(*(runtime.infer(_request("diamond", x)) for x in xs))
    for x, response in zip(xs, responses, strict=True):
        assert response.outputs[0].data[0, 0] == (2 * x + 1) + (2 * x) ** 2
    (encoder,) = runtime.statistics("plus_one")
    assert encoder.inference_count == 200
    assert encoder.execution_count < 200  # steps of different requests batched together
    assert max(ENCODER_BATCHES) > 1
    (whole,) = runtime.statistics("diamond")
    assert whole.success.count == 200
    await runtime.aclose()


async def test_a_failing_step_fails_only_its_request_and_names_the_step() -> None:
    runtime = await _runtime()
    good, bad = await asyncio.gather(
        runtime.infer(_request("chain", 1.0)),
        runtime.infer(_request("chain", 100.0)),
        return_exceptions=True,
    )
    assert not isinstance(good, BaseException)
    assert good.outputs[0].data[0, 0] == 3.0
    assert isinstance(bad, ModelExecutionError)
    assert "ensemble 'chain' step 2 ('picky') failed" in bad.message
    assert "too large" in bad.message
    await runtime.aclose()


async def test_requests_are_checked_with_or_without_parameters() -> None:
    """A request without parameters runs without a queue entry, one with them through the
    scheduler's entry: both check the inputs and outputs alike and give the same answer."""
    runtime = await _runtime()
    x = np.array([[1.0], [2.0]], np.float32)
    for parameters in ({}, {"note": "kept"}):
        request = InferRequest("chain", (InferInput("X", "FP32", x),), parameters=parameters)
        response = await runtime.infer(request)
        assert response.outputs[0].data.tolist() == [[3.0], [5.0]]
        wrong_type = request._replace(inputs=(InferInput("X", "INT32", x.astype(np.int32)),))
        with pytest.raises(InvalidInputError, match="expected datatype FP32, got 'INT32'"):
            await runtime.infer(wrong_type)
        with pytest.raises(InvalidInputError, match="unexpected inference output 'Q'"):
            await runtime.infer(request._replace(outputs=("Q",)))
    (whole,) = runtime.statistics("chain")
    assert (whole.success.count, whole.fail.count) == (2, 4)
    await runtime.aclose()


def test_a_tensor_nothing_provides_is_refused() -> None:
    with pytest.raises(ModelConfigError, match=r"output\(s\) \['Z'\] are produced by no step"):
        ensemble("broken", steps=[double], outputs=["Z"])
    unbatched = model(inputs=[_f("A")], outputs=[_f("Q")])(lambda A: A)
    with pytest.raises(ModelConfigError, match="all batch or all not batch"):
        ensemble("mixed", steps=[double, unbatched])


def test_a_step_renaming_a_tensor_its_model_lacks_is_refused() -> None:
    with pytest.raises(ModelConfigError, match=r"Step\(double, inputs=...\) renames \['Q'\]"):
        ensemble("typo", steps=[Step(double, inputs={"Q": "X"})])
    with pytest.raises(ModelConfigError, match=r"renames \['Q'\], which are not outputs"):
        ensemble("typo", steps=[Step(double, outputs={"Q": "Z"})])


def _ensemble_config(steps: list[EnsembleStep], max_batch_size: int = 8) -> ModelConfig:
    return ModelConfig("e", [Tensor("IN", "FP32", [4])], [Tensor("OUT", "FP32", [4])],
                       max_batch_size=max_batch_size, ensemble=steps)  # fmt: skip


def _step_model(
    max_batch_size: int, dims: list[int], optional: bool = False, out: list[int] | None = None
) -> ModelConfig:
    inputs = [Tensor("X", "FP32", dims), Tensor("EXTRA", "FP32", dims, optional)]
    outputs = [Tensor("Y", "FP32", dims if out is None else out)]
    return ModelConfig("s", inputs, outputs, max_batch_size=max_batch_size)


def test_check_steps_takes_shapes_with_or_without_the_batch_dimension() -> None:
    """As Triton: a batching ensemble may run a non-batching step whose dims are the full
    shape ([-1, 4] for [4]); an optional input may stay unmapped."""
    step = EnsembleStep("s", {"X": "IN"}, {"Y": "OUT"})
    check_steps(_ensemble_config([step]), [_step_model(0, [-1, 4], optional=True)])
    check_steps(_ensemble_config([step]), [_step_model(8, [-1], optional=True)])  # -1: any
    with pytest.raises(
        RepositoryError,
        match=r"input\(s\) \['EXTRA'\] of model 's' are "
        "mapped to no ensemble tensor",
    ):
        check_steps(_ensemble_config([step]), [_step_model(8, [4])])
    with pytest.raises(
        RepositoryError,
        match=r"ensemble tensor 'OUT' is FP32 \[-1, 4\] as the "
        r"ensemble's output but FP32 \[-1, 3\] as output 'Y' of model 's'",
    ):
        check_steps(_ensemble_config([step]), [_step_model(8, [4], True, out=[3])])


async def test_an_ensemble_of_a_model_not_served_fails_until_it_is() -> None:
    """In-process too: the check runs at each load, once the steps are loaded."""
    lonely = ensemble("lonely", steps=[double])
    runtime = Runtime([lonely])
    await runtime.start()
    (row,) = runtime.repository_index()
    assert row.state is ModelState.FAILED
    assert row.reason == (
        "ensemble 'lonely' step 0 ('double'): model 'double' version 1 is not available: "
        "unknown model 'double'"
    )
    runtime.add(double)
    await runtime.load_model("lonely")  # loads its step first, then checks
    assert [r.state for r in runtime.repository_index()] == [ModelState.READY] * 2
    await runtime.aclose()


@model(inputs=[_f("X")], outputs=[_f("A")], max_batch_size=64)
def stuck(X: np.ndarray) -> np.ndarray:
    time.sleep(1.0)
    return X


slow_chain = ensemble("slow_chain", steps=[stuck])


async def test_an_unload_past_its_deadline_fails_running_requests_cleanly() -> None:
    """Ensemble requests run in their callers' tasks; failed by an unload's deadline, the
    caller gets the error (503), not a cancellation of its own task."""
    runtime = Runtime([stuck, slow_chain])
    await runtime.start()
    request = asyncio.ensure_future(runtime.infer(_request("slow_chain", 1.0)))
    await asyncio.sleep(0.2)  # the step is running
    await runtime.aclose(drain_timeout_s=0.1)
    with pytest.raises(UnavailableError):
        await request
    assert not request.cancelled()
