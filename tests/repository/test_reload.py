"""A repository `load` after an edit serves the edited code once it answers 200; a file that
no longer imports fails the load with the reason while the old code keeps serving."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

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
