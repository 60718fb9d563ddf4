"""The fast checks (config/tensor_plan.py) only ever accept what the detailed checks accept, and
give the same inputs, rows and merge key: thousands of generated requests and model results,
right and wrong, against both."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from fnserve.config.model_config import ModelConfig, Tensor
from fnserve.errors import FnserveError
from fnserve.scheduling.request import check_inputs, prepare
from fnserve.scheduling.runner import BatchRunner
from fnserve.types import InferInput, InferRequest

CONFIGS = [
    ModelConfig("fixed", [Tensor("A", "FP32", [3]), Tensor("B", "INT64", [2, 2])],
                [Tensor("Y", "FP32", [3])], max_batch_size=8),
    ModelConfig("variable", [Tensor("A", "FP32", [-1]), Tensor("B", "INT64", [2, -1])],
                [Tensor("Y", "FP32", [-1]), Tensor("Z", "INT32", [1])], max_batch_size=4),
    ModelConfig("unbatched", [Tensor("A", "FP32", [2, 3])], [Tensor("Y", "FP64", [2])]),
    ModelConfig("optional", [Tensor("A", "FP32", [1]), Tensor("B", "FP32", [1], optional=True)],
                [Tensor("Y", "FP32", [1])], max_batch_size=2),
    ModelConfig("strings", [Tensor("S", "BYTES", [1])], [Tensor("T", "BYTES", [1])],
                max_batch_size=4),
]  # fmt: skip
DTYPES = {"FP32": np.float32, "INT64": np.int64, "FP64": np.float64, "INT32": np.int32,
          "BYTES": np.object_}  # fmt: skip


def _shape(rng: random.Random, tensor: Tensor, batching: bool, rows: int) -> tuple[int, ...]:
    dims = [d if d != -1 else rng.randint(0, 3) for d in tensor.dims]
    if rng.random() < 0.15:  # a wrong shape now and then
        dims = dims[:-1] if dims and rng.random() < 0.5 else [*dims, 1]
    elif rng.random() < 0.1 and dims:
        dims[rng.randrange(len(dims))] += 1
    return tuple([rows, *dims] if batching else dims)


def _request(rng: random.Random, config: ModelConfig) -> InferRequest:
    batching = config.max_batch_size > 0
    rows = rng.choice([0, 1, 2, config.max_batch_size, config.max_batch_size + 1])
    tensors = []
    for tensor in config.inputs:
        if tensor.optional and rng.random() < 0.5 or rng.random() < 0.05:
            continue  # left out
        name = tensor.name if rng.random() > 0.05 else "UNKNOWN"
        datatype = tensor.datatype if rng.random() > 0.1 else rng.choice(list(DTYPES))
        row_count = rows if rng.random() > 0.1 else rows + 1
        data: np.ndarray = np.zeros(_shape(rng, tensor, batching, row_count), DTYPES[datatype])
        tensors.append(InferInput(name, datatype, data))
        if rng.random() < 0.03:
            tensors.append(InferInput(name, datatype, data))  # given twice
    rng.shuffle(tensors)
    return InferRequest(config.name, tuple(tensors))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
async def test_accepted_inputs_are_what_the_detailed_checks_give(config: ModelConfig) -> None:
    rng = random.Random(config.name)
    accepted_count = 0
    for _ in range(3000):
        request = _request(rng, config)
        fast = config.plan.accept_inputs(request.inputs)
        try:
            inputs, rows, key = check_inputs(config, request)
        except FnserveError:
            assert fast is None, f"fast checks accepted what the detailed ones refuse: {request}"
            continue
        if fast is not None:
            accepted_count += 1
            assert fast[0].keys() == inputs.keys()
            assert all(fast[0][n] is inputs[n] for n in inputs)
            assert fast[1:] == (rows, key)
        else:  # the only valid requests it leaves to the detailed checks
            assert len(inputs) < len(config.inputs), "an optional input left out"
        entry = prepare(config, request)  # and prepare, whichever decided, agrees
        entry.future.cancel()
        assert (entry.inputs.keys(), entry.rows, entry.shape_key) == (inputs.keys(), rows, key)
    assert accepted_count > 100  # the common case really is the fast one


def _result(rng: random.Random, config: ModelConfig, rows: int) -> Any:
    outputs: dict[str, Any] = {}
    for tensor in config.outputs:
        dtype = DTYPES[tensor.datatype] if rng.random() > 0.1 else np.float16
        shape = _shape(rng, tensor, config.max_batch_size > 0, rows if rng.random() > 0.1 else 2)
        outputs[tensor.name] = np.zeros(shape, dtype)
        if rng.random() < 0.05:
            outputs[tensor.name] = outputs[tensor.name].tolist()  # not an array
    if rng.random() < 0.05:
        outputs.popitem()
    if len(outputs) == 1 and rng.random() < 0.5:
        return next(iter(outputs.values()))  # a single output returned bare
    return outputs


class _NoBackend:
    is_async = False


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
def test_accepted_outputs_are_what_the_detailed_checks_give(config: ModelConfig) -> None:
    runner = BatchRunner(config, _NoBackend())  # type: ignore[arg-type]
    rng = random.Random(config.name)
    for _ in range(2000):
        rows = rng.choice([1, 2, 3])
        result = _result(rng, config, rows)
        fast = config.plan.accept_outputs(result, rows)
        try:
            detailed = runner.check_outputs(result, rows)
        except FnserveError:
            assert fast is None, f"fast checks accepted what the detailed ones refuse: {result}"
            continue
        if fast is not None:
            assert fast.keys() == detailed.keys()
            assert all(fast[n] is detailed[n] for n in fast)


def test_knows_outputs() -> None:
    plan = CONFIGS[1].plan
    assert plan.knows_outputs(("Y",))
    assert plan.knows_outputs(("Z", "Y"))
    assert not plan.knows_outputs(("Y", "W"))
