"""Process instances in a real `fnserve serve`: same answers, crashes survived, no orphans."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.serverproc import HealthProbe, ServerProcess

pytestmark = pytest.mark.e2e
MODELS = Path(__file__).parent / "process_models.py"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with ServerProcess.start(MODELS, "--shutdown-timeout", "3") as proc:
        yield proc
        proc.stop()


def _infer(
    client: httpx.Client, model: str, inputs: list[dict[str, Any]], **params: Any
) -> httpx.Response:
    body: dict[str, Any] = {"inputs": inputs}
    if params:
        body["parameters"] = params
    return client.post(f"/v2/models/{model}/infer", json=body)


def _crashy(client: httpx.Client, mode: int) -> httpx.Response:
    inputs = [{"name": "MODE", "datatype": "INT32", "shape": [1], "data": [mode]}]
    return _infer(client, "crashy", inputs)


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # reaped, possibly while we read
        return True
    return stat.split(")")[1].split()[0] == "Z"


def _children(pid: int) -> list[int]:
    """Every process whose parent is `pid` (whichever of its threads started it)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _gone(pid)


REQUESTS: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = {
    "add_sub": (
        [
            {"name": "INPUT0", "datatype": "FP32", "shape": [2, 16], "data": list(range(32))},
            {"name": "INPUT1", "datatype": "FP32", "shape": [2, 16], "data": [0.5] * 32},
        ],
        {},
    ),
    "strings": (
        [{"name": "INPUT0", "datatype": "BYTES", "shape": [3], "data": ["ab", "", "xyz"]}],
        {},
    ),
    "mixed": (
        [
            {"name": "FLAGS", "datatype": "BOOL", "shape": [1, 2], "data": [True, False]},
            {"name": "HALF", "datatype": "FP16", "shape": [1, 2], "data": [1.5, -3]},
            {"name": "INT", "datatype": "INT8", "shape": [1, 2], "data": [5, -128]},
        ],
        {},
    ),
    "scaled": (
        [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [2]}],
        {"offset": 1},
    ),
    "async_double": ([{"name": "INPUT0", "datatype": "FP32", "shape": [2], "data": [1, 2]}], {}),
    "wrong": ([{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1]}], {}),
}


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_process_and_thread_instances_answer_the_same(server: ServerProcess, name: str) -> None:
    inputs, params = REQUESTS[name]
    with httpx.Client(base_url=server.http, timeout=30) as client:
        thread = _infer(client, f"{name}_t", inputs, **params)
        process = _infer(client, f"{name}_p", inputs, **params)
    assert process.status_code == thread.status_code
    if thread.status_code != 200:
        assert process.json()["error"] == thread.json()["error"].replace(f"{name}_t", f"{name}_p")
        return
    want, got = thread.json(), process.json()
    assert got["model_name"] == f"{name}_p"
    assert got["outputs"] == want["outputs"]


@pytest.mark.slow
def test_crashes_and_hangs_are_survived_while_another_model_serves(server: ServerProcess) -> None:
    failures: list[str] = []
    answered = 0
    stop = threading.Event()

    def other_model() -> None:  # the second model, driven throughout the crashes
        nonlocal answered
        inputs, _ = REQUESTS["add_sub"]
        with httpx.Client(base_url=server.http, timeout=30) as client:
            while not stop.is_set():
                response = _infer(client, "add_sub_p", inputs)
                if response.status_code != 200:
                    failures.append(response.text)
                answered += 1

    driver = threading.Thread(target=other_model, daemon=True)
    driver.start()
    try:
        with httpx.Client(base_url=server.http, timeout=30) as client:
            pid = _healthy_pid(client)
            for mode, status, reason in [
                (1, 500, "died from signal SIGSEGV"),
                (2, 500, "died from signal SIGABRT"),
                (3, 504, "did not finish within its execution timeout of 1 s"),
            ]:
                response = _crashy(client, mode)
                assert response.status_code == status, response.text
                assert reason in response.json()["error"]
                assert _wait_gone(pid, 5), f"worker {pid} still there after mode {mode}"
                new_pid = _healthy_pid(client)
                assert new_pid != pid
                pid = new_pid
    finally:
        stop.set()
        driver.join(30)
    assert failures == []
    assert answered > 10
    assert "model 'crashy' instance 0 is back in rotation" in server.output()


def _healthy_pid(client: httpx.Client, timeout_s: float = 15) -> int:
    """Wait for crashy's (rebuilt) instance to answer; its answer is the worker's pid."""
    deadline = time.monotonic() + timeout_s
    while True:
        response = _crashy(client, 0)
        if response.status_code == 200:
            return int(response.json()["outputs"][0]["data"][0])
        assert time.monotonic() < deadline, response.text
        time.sleep(0.05)


def _spin_rate(server: ServerProcess, model: str, seconds: float) -> float:
    inputs = [{"name": "N", "datatype": "INT32", "shape": [1], "data": [200_000]}]
    done = [0]
    end = time.monotonic() + seconds

    def user() -> None:
        with httpx.Client(base_url=server.http, timeout=30) as client:
            while time.monotonic() < end:
                assert _infer(client, model, inputs).status_code == 200
                done[0] += 1

    users = [threading.Thread(target=user) for _ in range(4)]
    start = time.monotonic()
    for user_thread in users:
        user_thread.start()
    for user_thread in users:
        user_thread.join(60)
    return done[0] / (time.monotonic() - start)


def _machine_speedup() -> float:
    """How much faster two CPU-bound processes finish than one doing the same work, here, now."""
    code = "t = 0\nfor i in range(2_000_000): t = (t + i * i) % 1_000_003"

    def elapsed(copies: int) -> float:
        start = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(copies)]
        for proc in procs:
            proc.wait(60)
        return time.perf_counter() - start

    return 2 * elapsed(1) / elapsed(2)


@pytest.mark.slow
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores")
def test_two_process_instances_use_two_cores(server: ServerProcess) -> None:
    """Lenient (the machine may be shared): benchmarks/instances.py measures it properly."""
    speedup = _machine_speedup()
    if speedup < 1.6:
        pytest.skip(f"no spare core on this machine now (2 processes: {speedup:.2f}x of 1)")
    with HealthProbe(server) as probe:
        one = _spin_rate(server, "spin_p1", 3)
        two = _spin_rate(server, "spin_p2", 3)
    assert two >= 1.3 * one, f"1 instance {one:.1f}/s, 2 instances {two:.1f}/s"
    assert probe.p50_ms < 10, probe.summary()  # a busy Python model no longer holds the GIL


TWO_WORKERS = """
import os
import numpy as np
from fnserve import InstanceGroup, Tensor, model

@model(
    inputs=[Tensor("MODE", "INT32", [1])],
    outputs=[Tensor("OUTPUT0", "INT32", [1])],
    instance_group=[InstanceGroup(count=2, kind="KIND_CPU", isolation="process")],
)
def crashy(MODE: np.ndarray) -> np.ndarray:
    return np.array([os.getpid()], np.int32)
"""


@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=lambda s: s.name
)
def test_no_worker_outlives_the_server(sig: signal.Signals, tmp_path: Path) -> None:
    models = tmp_path / "two_workers.py"
    models.write_text(TWO_WORKERS)
    with ServerProcess.start(models, "--shutdown-timeout", "2") as proc:
        with httpx.Client(base_url=proc.http, timeout=30) as client:
            pid = _healthy_pid(client)
        children = _children(proc.proc.pid)
        assert pid in children
        assert len(children) == 2
        proc.stop(sig, timeout_s=20)
        # SIGKILL leaves no chance to clean up: the worker's parent watchdog ends it.
        assert _wait_gone(pid, 5)
        for child in children:
            assert _wait_gone(child, 5), f"worker {child} outlived the server"
