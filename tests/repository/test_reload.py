"""A repository `load` after an edit serves the edited code once it answers 200, without
failing a request; a file that no longer imports fails the load with the reason while the old
code keeps serving."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from fnserve.user_modules import import_file
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.e2e

SOURCE = """
import numpy as np
from fnserve import Tensor, model
OFFSET = {n}

@model(inputs=[Tensor("X", "FP32", [1])], outputs=[Tensor("Y", "FP32", [1])])
def plus(X: np.ndarray) -> np.ndarray:
    return X + OFFSET
"""
BODY = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [1.0]}]}


def _infer(server: ServerProcess, name: str = "plus") -> httpx.Response:
    return httpx.post(f"{server.http}/v2/models/{name}/infer", json=BODY)


def _load(server: ServerProcess, name: str = "plus") -> httpx.Response:
    return httpx.post(f"{server.http}/v2/repository/models/{name}/load", timeout=30)


def test_load_serves_the_edited_code(tmp_path: Path) -> None:
    file = tmp_path / "plus.py"
    file.write_text(SOURCE.format(n=1))
    with ServerProcess.start(tmp_path) as server:
        assert _infer(server).json()["outputs"][0]["data"] == [2.0]
        file.write_text(SOURCE.format(n=10))
        assert _load(server).status_code == 200
        assert _infer(server).json()["outputs"][0]["data"] == [11.0]  # never stale after 200
        assert _load(server).status_code == 200  # unchanged: nothing to reload
        assert _infer(server).json()["outputs"][0]["data"] == [11.0]

        file.write_text(SOURCE.format(n="undefined_name"))
        failed = _load(server)
        assert failed.status_code >= 400
        assert f"importing '{file}' failed at line 4: NameError" in failed.json()["error"]
        # The old code keeps serving; the index shows the reason of the failed import.
        assert _infer(server).json()["outputs"][0]["data"] == [11.0]
        assert server.stop() == 0


def test_load_imports_a_file_that_failed_at_start(tmp_path: Path) -> None:
    file = tmp_path / "plus.py"
    file.write_text(SOURCE.format(n="undefined_name"))
    (tmp_path / "other.py").write_text(SOURCE.replace("def plus", "def other").format(n=0))
    with ServerProcess.start(tmp_path) as server:
        assert _infer(server).status_code == 404
        file.write_text(SOURCE.format(n=5))
        assert _load(server).status_code == 200
        assert _infer(server).json()["outputs"][0]["data"] == [6.0]
        index = {
            e["name"]: e["state"] for e in httpx.post(f"{server.http}/v2/repository/index").json()
        }
        assert index == {"plus": "READY", "other": "READY"}
        assert server.stop() == 0


def test_reload_under_traffic_fails_no_request(tmp_path: Path) -> None:
    """Clients keep calling over HTTP and gRPC (tritonclient) while the code changes."""
    file = tmp_path / "plus.py"
    file.write_text(SOURCE.format(n=1))
    with ServerProcess.start(tmp_path) as server:
        stop = threading.Event()
        seen: list[float] = []
        failures: list[str] = []

        def http_client() -> None:
            client = httpclient.InferenceServerClient(server.http.removeprefix("http://"))
            while not stop.is_set():
                x = httpclient.InferInput("X", [1], "FP32")
                x.set_data_from_numpy(np.ones(1, np.float32))
                try:
                    seen.append(float(client.infer("plus", [x]).as_numpy("Y")[0]))
                except Exception as exc:
                    failures.append(repr(exc))

        def grpc_client() -> None:
            client = grpcclient.InferenceServerClient(server.grpc)
            while not stop.is_set():
                x = grpcclient.InferInput("X", [1], "FP32")
                x.set_data_from_numpy(np.ones(1, np.float32))
                try:
                    seen.append(float(client.infer("plus", [x]).as_numpy("Y")[0]))
                except Exception as exc:
                    failures.append(repr(exc))

        threads = [threading.Thread(target=f) for f in (http_client, http_client, grpc_client)]
        for thread in threads:
            thread.start()
        try:
            for n in (10, 100, 1000):
                time.sleep(0.3)
                file.write_text(SOURCE.format(n=n))
                assert _load(server).status_code == 200
            time.sleep(0.3)
        finally:
            stop.set()
            for thread in threads:
                thread.join(10)
        assert failures == []
        assert set(seen) == {2.0, 11.0, 101.0, 1001.0}
        assert seen[-1] == 1001.0
        assert server.stop() == 0


def test_an_edited_file_imports_under_a_new_module_name(tmp_path: Path) -> None:
    file = tmp_path / "plus.py"
    file.write_text(SOURCE.format(n=1))
    first = import_file(file)
    assert import_file(file) is first  # same content: the same module
    file.write_text(SOURCE.format(n=2))
    second = import_file(file)
    assert second.__name__ != first.__name__
    assert second.OFFSET == 2
    assert first.__name__ not in sys.modules  # no stale entry left behind
    assert sys.modules[second.__name__] is second
    file.write_text(SOURCE.format(n=1))  # back to the first content: imported afresh
    third = import_file(file)
    assert third.__name__ == first.__name__
    assert third is not first
    assert third.OFFSET == 1
