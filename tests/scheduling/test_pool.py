"""The instance pool's safety: broken instances are replaced with backoff, requests wait."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from fnserve import InstanceContext, InstanceGroup, Tensor, model
from fnserve.config.model_config import ModelConfig
from fnserve.errors import InstanceBrokenError, ModelConfigError, RepositoryError, UnavailableError
from fnserve.runtime import Runtime
from fnserve.types import InferInput, InferRequest, ModelState
from tests.tensor_io import TensorIO

IO: TensorIO = {"inputs": [Tensor("X", "FP32", [1])], "outputs": [Tensor("Y", "FP32", [1])]}


def _request(name: str, value: float = 1.0) -> InferRequest:
    return InferRequest(name, (InferInput("X", "FP32", np.array([value], np.float32)),))


async def test_a_broken_instance_is_rebuilt_and_serves_again() -> None:
    builds: list[int] = []

    class Fragile:
        def __init__(self, context: InstanceContext) -> None:
            builds.append(context.instance_index)

        def infer(self, X: np.ndarray) -> np.ndarray:
            if X[0] < 0:  # what a worker process's crash looks like to the pool
                raise InstanceBrokenError("model 'fragile' worker process died (signal 11)")
            return X

    # Applied by hand: type checkers ignore what a class decorator returns.
    runtime = Runtime([model(name="fragile", **IO)(Fragile)])
    await runtime.start()
    try:
        with pytest.raises(InstanceBrokenError, match="signal 11"):
            await runtime.infer(_request("fragile", -1.0))
        # The next request waits in the queue for the replacement; it does not fail.
        response = await asyncio.wait_for(runtime.infer(_request("fragile", 5.0)), 5)
        assert response.outputs[0].data[0] == 5.0
        assert builds == [0, 0]
    finally:
        await runtime.aclose()


async def test_rebuilds_back_off_and_requests_wait_meanwhile() -> None:
    builds: list[float] = []

    class Crashy:
        def __init__(self) -> None:
            builds.append(time.monotonic())
            if len(builds) > 1:
                raise RuntimeError("cannot start again")

        def infer(self, X: np.ndarray) -> np.ndarray:
            raise InstanceBrokenError("model 'crashy' worker process died")

    # Applied by hand: type checkers ignore what a class decorator returns.
    runtime = Runtime([model(name="crashy", **IO)(Crashy)])
    await runtime.start()
    try:
        with pytest.raises(InstanceBrokenError):
            await runtime.infer(_request("crashy"))
        waiting = asyncio.ensure_future(runtime.infer(_request("crashy")))
        await asyncio.sleep(1.6)  # backoff 0.1 + 0.2 + 0.4 + 0.8: four tries at most
        assert not waiting.done()  # no instance: it waits in the queue, it does not fail
        assert 3 <= len(builds) - 1 <= 5, builds
        gaps = np.diff(builds[1:])
        assert all(later > earlier for earlier, later in zip(gaps, gaps[1:], strict=False))
    finally:
        await runtime.aclose(drain_timeout_s=0.2)
    with pytest.raises(UnavailableError, match="was unloaded before the request finished"):
        await waiting


async def test_unload_of_a_stuck_model_ends_within_its_drain_deadline() -> None:
    release = threading.Event()

    @model(name="stuck", **IO)
    def stuck(X: np.ndarray) -> np.ndarray:
        release.wait(60)
        return X

    runtime = Runtime([stuck])
    await runtime.start()
    running = asyncio.ensure_future(runtime.infer(_request("stuck")))
    queued = asyncio.ensure_future(runtime.infer(_request("stuck")))
    await asyncio.sleep(0.05)
    start = time.monotonic()
    await runtime.unload_model("stuck", drain_timeout_s=0.5)
    assert time.monotonic() - start < 2.0
    assert runtime.repository_index()[0].state is ModelState.UNLOADED
    for request in (running, queued):
        with pytest.raises(UnavailableError, match="unloaded before the request finished"):
            await request
    release.set()
    await runtime.load_model("stuck")  # loads again with a fresh instance
    assert (await runtime.infer(_request("stuck", 2.0))).outputs[0].data[0] == 2.0
    await runtime.aclose()


async def test_process_isolation_of_a_model_no_worker_can_import_fails_that_load_clearly() -> None:
    @model(name="isolated", instance_group=[InstanceGroup(isolation="process")], **IO)
    def isolated(X: np.ndarray) -> np.ndarray:  # local: a fresh process cannot import it
        return X

    runtime = Runtime([isolated])
    with pytest.raises(RepositoryError, match="is not a module-level name of '.*test_pool.py'"):
        await runtime.load_model("isolated")
    await runtime.aclose()


def test_isolation_is_validated_and_stays_out_of_tritons_json() -> None:
    with pytest.raises(ModelConfigError, match="isolation must be 'thread' or 'process'"):
        ModelConfig("m", **IO, instance_group=[InstanceGroup(isolation="fork")])  # type: ignore[arg-type]
    config = ModelConfig("m", **IO, instance_group=[InstanceGroup(isolation="process")])
    assert "isolation" not in config.to_json()["instance_group"][0]


def test_execution_timeout_lives_in_the_field_and_the_parameters() -> None:
    from_field = ModelConfig("m", **IO, execution_timeout_s=2.5)
    assert from_field.to_json()["parameters"]["execution_timeout_s"] == {"string_value": "2.5"}
    from_parameter = ModelConfig("m", **IO, parameters={"execution_timeout_s": "3"})
    assert from_parameter.execution_timeout_s == 3.0
    assert ModelConfig("m", **IO).execution_timeout_s is None
    with pytest.raises(ModelConfigError, match="execution_timeout_s must be a number"):
        ModelConfig("m", **IO, parameters={"execution_timeout_s": "soon"})
    with pytest.raises(ModelConfigError, match="disagrees with parameter"):
        ModelConfig("m", **IO, execution_timeout_s=1, parameters={"execution_timeout_s": "2"})
