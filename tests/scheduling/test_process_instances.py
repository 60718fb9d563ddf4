"""ProcessInstance alone: answers like an in-thread instance, reports crashes, leaves nothing."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fnserve.backends.python import PythonBackend
from fnserve.errors import InstanceBrokenError, ModelExecutionError, RepositoryError
from fnserve.model import InstanceContext, ModelDefinition
from fnserve.scheduling.process import ProcessInstance
from fnserve.scheduling.request import PendingRequest
from fnserve.scheduling.runner import BatchRunner
from tests.scheduling import process_models as pm

ROOT = Path(__file__).parents[2]


def _context(definition: ModelDefinition[Any, Any], index: int = 0) -> InstanceContext:
    config = definition.config
    return InstanceContext(config.name, config.version, index, "KIND_CPU", "cpu", config.parameters)


def _batch(*inputs: dict[str, np.ndarray], **parameters: Any) -> list[PendingRequest]:
    loop = asyncio.get_running_loop()
    return [
        PendingRequest(
            inputs=dict(i),
            rows=next(iter(i.values())).shape[0],
            shape_key=(),
            future=loop.create_future(),
            parameters=dict(parameters),
        )
        for i in inputs
    ]


async def _start(definition: ModelDefinition[Any, Any]) -> ProcessInstance:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(
        None, ProcessInstance, definition, _context(definition), definition.config
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it is not running any more
    return "(Z)" not in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:4]


def _wait_gone(pid: int, timeout_s: float = 5) -> bool:
    """Whether `pid` left the process table (exited and reaped) within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not Path(f"/proc/{pid}").exists()


@pytest.fixture
def instances() -> Iterator[list[ProcessInstance]]:
    started: list[ProcessInstance] = []
    yield started
    for instance in started:
        instance.abandon()


RNG = np.random.default_rng(3)
CASES: dict[str, list[dict[str, np.ndarray]]] = {
    "add_sub": [
        {"INPUT0": RNG.random((2, 16), np.float32), "INPUT1": RNG.random((2, 16), np.float32)},
        {"INPUT0": RNG.random((1, 16), np.float32), "INPUT1": RNG.random((1, 16), np.float32)},
    ],
    "strings": [{"INPUT0": np.array([b"ab", b"", "c\u00e9".encode()], dtype=object)}],
    "mixed": [
        {
            "FLAGS": np.array([[True, False, True]]),
            "HALF": np.array([[1.5, -2, 0]], np.float16),
            "INT": np.array([[1, -2, 127]], np.int8),
        }
    ],
    "scaled": [
        {"INPUT0": np.array([[1.0]], np.float32)},
        {"INPUT0": np.array([[2.0]], np.float32)},
    ],
    "async_double": [{"INPUT0": np.arange(5, dtype=np.float32)}],
}


@pytest.mark.anyio
@pytest.mark.parametrize("name", sorted(CASES))
async def test_process_instance_answers_like_a_thread_instance(
    name: str, instances: list[ProcessInstance]
) -> None:
    thread_def: ModelDefinition[Any, Any] = getattr(pm, f"{name}_t")
    process_def: ModelDefinition[Any, Any] = getattr(pm, f"{name}_p")
    runner = BatchRunner(thread_def.config, PythonBackend(thread_def, _context(thread_def)))
    batch = _batch(*CASES[name], offset=1)
    expected, _ = await runner.arun(batch) if runner.is_async else runner.run(batch)
    instance = await _start(process_def)
    instances.append(instance)
    for _ in range(3):  # the buffers are reused from one batch to the next
        got, times = await instance.run(batch)
        assert len(got) == len(expected)
        for want, have in zip(expected, got, strict=True):
            assert isinstance(want, dict)
            assert want.keys() == have.keys()
            for key in want:
                assert have[key].dtype == want[key].dtype
                np.testing.assert_array_equal(have[key], want[key])
        assert times.infer_ns > 0


@pytest.mark.anyio
async def test_output_check_and_model_errors_match_thread_mode(
    instances: list[ProcessInstance],
) -> None:
    instance = await _start(pm.wrong_p)
    instances.append(instance)
    with pytest.raises(ModelExecutionError) as caught:
        await instance.run(_batch({"INPUT0": np.ones(2, np.float32)}))
    assert str(caught.value) == (
        "model 'wrong_p' output 'OUTPUT0': expected datatype FP32 (numpy float32), "
        "got numpy float64"
    )
    # the worker survives a model error
    with pytest.raises(ModelExecutionError):
        await instance.run(_batch({"INPUT0": np.ones(2, np.float32)}))


@pytest.mark.anyio
async def test_large_tensors_grow_the_shared_buffers(instances: list[ProcessInstance]) -> None:
    instance = await _start(pm.async_double_p)
    instances.append(instance)
    big = np.arange(3_000_000, dtype=np.float32)  # 12 MB, past the initial 1 MiB buffers
    (result,), _ = await instance.run(_batch({"INPUT0": big}))
    np.testing.assert_array_equal(result["OUTPUT0"], big * 2)
    (small,), _ = await instance.run(_batch({"INPUT0": np.ones(3, np.float32)}))
    np.testing.assert_array_equal(small["OUTPUT0"], [2, 2, 2])


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("mode", "reason"),
    [(1, "died from signal SIGSEGV"), (2, "died from signal SIGABRT"), (4, "exited with code 7")],
)
async def test_a_dying_worker_raises_instance_broken(
    mode: int, reason: str, instances: list[ProcessInstance]
) -> None:
    instance = await _start(pm.crashy)
    instances.append(instance)
    (ok,), _ = await instance.run(_batch({"MODE": np.array([0], np.int32)}))
    assert int(ok["OUTPUT0"][0]) == instance.pid
    with pytest.raises(InstanceBrokenError) as caught:
        await instance.run(_batch({"MODE": np.array([mode], np.int32)}))
    assert str(caught.value) == f"model 'crashy' instance 0: worker process {reason}"
    assert not _alive(instance.pid)
    with pytest.raises(InstanceBrokenError):
        await instance.run(_batch({"MODE": np.array([0], np.int32)}))


@pytest.mark.anyio
async def test_abandon_kills_a_hung_worker_and_reaps_it(instances: list[ProcessInstance]) -> None:
    instance = await _start(pm.crashy)
    instances.append(instance)
    task = asyncio.ensure_future(instance.run(_batch({"MODE": np.array([3], np.int32)})))
    await asyncio.sleep(0.3)
    assert not task.done()
    start = time.perf_counter()
    instance.abandon()
    assert time.perf_counter() - start < 0.05  # abandon never waits
    with pytest.raises(InstanceBrokenError):
        await asyncio.wait_for(task, 5)
    assert await asyncio.to_thread(_wait_gone, instance.pid)  # killed and reaped: no zombie


@pytest.mark.anyio
async def test_close_stops_the_worker_gracefully(instances: list[ProcessInstance]) -> None:
    instance = await _start(pm.add_sub_p)
    await instance.run(_batch(*CASES["add_sub"]))
    start = time.perf_counter()
    await asyncio.get_running_loop().run_in_executor(None, instance.close)
    assert time.perf_counter() - start < 3
    assert instance._proc.returncode == 0  # it exited by itself, not killed


def test_a_failing_constructor_fails_the_load_with_its_message() -> None:
    definition = pm.scaled_p
    bad = InstanceContext("scaled_p", 1, 0, "KIND_CPU", "cpu", {})  # no "scale" parameter
    with pytest.raises(RepositoryError) as caught:
        ProcessInstance(definition, bad, definition.config)
    assert str(caught.value) == "'scale'"  # what the thread path reports: str(KeyError)


def test_workers_exit_when_the_server_process_is_killed(tmp_path: Path) -> None:
    script = tmp_path / "owner.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys, time
            from fnserve.model import InstanceContext
            from fnserve.scheduling.process import ProcessInstance
            from tests.scheduling import process_models as pm
            ctx = InstanceContext("add_sub_p", 1, 0, "KIND_CPU", "cpu", {})
            instance = ProcessInstance(pm.add_sub_p, ctx, pm.add_sub_p.config)
            print(instance.pid, flush=True)
            time.sleep(60)
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "runtime"), str(ROOT)])}
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, env=env)
    try:
        assert owner.stdout is not None
        worker = int(owner.stdout.readline())
        assert _alive(worker)
        owner.send_signal(signal.SIGKILL)  # no atexit, no unload: only the worker's watchdog
        owner.wait(10)
        deadline = time.monotonic() + 5
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(worker)
    finally:
        owner.kill()
        owner.wait(10)
