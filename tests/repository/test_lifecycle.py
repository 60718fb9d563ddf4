"""Load, unload and reload through the Runtime; KIND_GPU without CUDA fails only that model."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from fnserve import InstanceGroup, Tensor, model
from fnserve.backends.devices import cuda_device_count
from fnserve.errors import ModelNotFoundError, ModelNotReadyError, RepositoryError, UnavailableError
from fnserve.runtime import Runtime
from fnserve.types import InferInput, InferRequest, ModelState
from tests.tensor_io import TensorIO

IO: TensorIO = {"inputs": [Tensor("X", "FP32", [1])], "outputs": [Tensor("Y", "FP32", [1])]}


def _request(name: str, value: float = 1.0) -> InferRequest:
    return InferRequest(name, (InferInput("X", "FP32", np.array([value], np.float32)),))


@model(name="cpu_model", **IO)
def cpu_model(X: np.ndarray) -> np.ndarray:
    return X


@model(name="gpu_model", instance_group=[InstanceGroup(kind="KIND_GPU")], **IO)
def gpu_model(X: np.ndarray) -> np.ndarray:
    return X


@pytest.mark.skipif(cuda_device_count() > 0, reason="a CUDA device is present")
async def test_kind_gpu_without_cuda_fails_only_that_model() -> None:
    runtime = Runtime([cpu_model, gpu_model])
    await runtime.start()
    try:
        index = {e.name: e for e in runtime.repository_index()}
        assert index["gpu_model"].state is ModelState.FAILED
        assert "no CUDA device is available" in index["gpu_model"].reason
        assert index["cpu_model"].state is ModelState.READY
        with pytest.raises(ModelNotFoundError, match="no available versions.*no CUDA device"):
            await runtime.infer(_request("gpu_model"))
        assert (await runtime.infer(_request("cpu_model"))).outputs[0].data[0] == 1.0
    finally:
        await runtime.aclose()


async def test_unload_finishes_running_requests_then_refuses() -> None:
    gate = threading.Event()

    @model(name="slow", **IO)
    def slow(X: np.ndarray) -> np.ndarray:
        gate.wait(10)
        return X

    runtime = Runtime([slow])
    await runtime.start()
    running = asyncio.create_task(runtime.infer(_request("slow", 7.0)))
    await asyncio.sleep(0.01)
    unloading = asyncio.create_task(runtime.unload_model("slow"))
    await asyncio.sleep(0.01)
    assert not runtime.model_ready("slow")
    assert runtime.repository_index()[0].state is ModelState.DRAINING
    with pytest.raises(ModelNotFoundError, match="has no available versions"):
        await runtime.infer(_request("slow"))
    with pytest.raises(ModelNotReadyError, match="version 1 is not ready"):
        await runtime.infer(InferRequest("slow", _request("slow").inputs, model_version="1"))
    gate.set()
    assert (await running).outputs[0].data[0] == 7.0
    await unloading
    assert runtime.repository_index()[0].state is ModelState.UNLOADED
    await runtime.load_model("slow")
    assert (await runtime.infer(_request("slow", 2.0))).outputs[0].data[0] == 2.0
    (stats,) = runtime.statistics("slow")
    assert stats.inference_count == 1  # counters restart after a reload
    await runtime.aclose()


async def test_load_unknown_model_is_an_error_and_unload_unknown_is_not() -> None:
    runtime = Runtime([cpu_model])
    await runtime.start()
    with pytest.raises(RepositoryError, match="failed to load 'nope'"):
        await runtime.load_model("nope")
    await runtime.unload_model("nope")
    await runtime.aclose()


async def test_shutting_down_refuses_new_requests() -> None:
    runtime = Runtime([cpu_model])
    await runtime.start()
    runtime.stop_accepting()
    assert not runtime.is_ready()
    with pytest.raises(UnavailableError, match="shutting down"):
        await runtime.infer(_request("cpu_model"))
    await runtime.aclose()


def test_duplicate_version_is_refused() -> None:
    with pytest.raises(RepositoryError, match="defined twice"):
        Runtime([cpu_model, cpu_model])


async def test_versions_are_served_side_by_side() -> None:
    @model(name="v", version=1, **IO)
    def v1(X: np.ndarray) -> np.ndarray:
        return X + 1

    @model(name="v", version=2, **IO)
    def v2(X: np.ndarray) -> np.ndarray:
        return X + 2

    runtime = Runtime([v1, v2])
    await runtime.start()
    try:
        latest = await runtime.infer(_request("v", 0.0))
        assert (latest.model_version, latest.outputs[0].data[0]) == ("2", 2.0)
        pinned = await runtime.infer(
            InferRequest("v", _request("v", 0.0).inputs, model_version="1")
        )
        assert (pinned.model_version, pinned.outputs[0].data[0]) == ("1", 1.0)
        assert runtime.model_metadata("v").versions == ("1", "2")
        assert runtime.model_metadata("v", "1").versions == ("1",)
    finally:
        await runtime.aclose()
