"""What a newcomer hits starting `fnserve serve`: one clear line (no traceback) for each
start-up mistake, and a bad file that fails only its own models unless --strict."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.serverproc import ServerProcess

pytestmark = pytest.mark.e2e

GOOD = """
import numpy as np
from fnserve import Tensor, model

@model(inputs=[Tensor("X", "FP32", [1])], outputs=[Tensor("Y", "FP32", [1])])
def good(X: np.ndarray) -> np.ndarray:
    return X + 1
"""
BAD_DIMS = """
import numpy as np
from fnserve import Tensor, model

@model(name="bad_dims", inputs=[Tensor("X", "FP32", 4)], outputs=[Tensor("Y", "FP32", [4])])
def f(X: np.ndarray) -> np.ndarray:
    return X
"""


def _serve(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """`fnserve serve ARGS` that is expected to refuse to start."""
    command = [sys.executable, "-m", "fnserve", "serve", *map(str, args)]
    command += ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"][
        : 0 if "--http-port" in args else None
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def _one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def test_port_in_use_names_the_port_and_the_flag(tmp_path: Path) -> None:
    (tmp_path / "good.py").write_text(GOOD)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _serve(tmp_path, "--http-port", str(port), "--grpc-port", "0",
                        "--metrics-port", "0")  # fmt: skip
    line = _one_line_error(result)
    assert f"127.0.0.1:{port}" in line
    assert "already in use" in line
    assert "--http-port" in line


@pytest.mark.parametrize("content", [{}, {"model.onnx": b"\x08\x01"}])
def test_a_folder_without_models_is_an_error_naming_it(
    tmp_path: Path, content: dict[str, bytes]
) -> None:
    for name, data in content.items():
        (tmp_path / name).write_bytes(data)
    line = _one_line_error(_serve(tmp_path))
    assert f"no model found in '{tmp_path}'" in line
    assert "--allow-empty" in line
    for name in content:
        assert name in line


def test_allow_empty_serves_with_a_loud_warning(tmp_path: Path) -> None:
    with ServerProcess.start(tmp_path, "--allow-empty") as server:
        assert "WARNING: no model found" in server.output()
        assert httpx.get(f"{server.http}/v2/health/live").status_code == 200
        assert server.stop() == 0


def test_a_bad_file_fails_only_its_models_and_the_index_says_why(tmp_path: Path) -> None:
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "bad.py").write_text(BAD_DIMS)
    with ServerProcess.start(tmp_path) as server:
        body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
        answer = httpx.post(f"{server.http}/v2/models/good/infer", json=body)
        assert answer.json()["outputs"][0]["data"] == [2.0]
        index = {e["name"]: e for e in httpx.post(f"{server.http}/v2/repository/index").json()}
        assert index["good"]["state"] == "READY"
        bad = index["bad_dims"]
        assert bad["state"] == "UNAVAILABLE"
        where = f"importing '{tmp_path / 'bad.py'}' failed at line 5"
        assert where in bad["reason"]
        assert "dims must be a list of ints" in bad["reason"]
        assert f"bad_dims v1: FAILED ({where}" in server.output()  # the start-up summary
        refused = httpx.post(f"{server.http}/v2/models/bad_dims/infer", json=body)
        assert refused.status_code == 404
        assert where in refused.json()["error"]
        assert server.stop() == 0


def test_strict_makes_a_bad_file_fatal(tmp_path: Path) -> None:
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "bad.py").write_text(BAD_DIMS)
    line = _one_line_error(_serve(tmp_path, "--strict"))
    assert f"importing '{tmp_path / 'bad.py'}' failed at line 5" in line


def test_two_files_defining_one_model_name_both(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(GOOD)
    (tmp_path / "b.py").write_text("\n\n" + GOOD)
    line = _one_line_error(_serve(tmp_path))
    assert "model 'good' version 1 is defined twice" in line
    assert f"{tmp_path / 'a.py'}:5" in line
    assert f"{tmp_path / 'b.py'}:7" in line


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--load-model", "good"], "--load-model requires --model-control-mode explicit"),
        (["--watch", "--model-control-mode", "poll"], "--watch cannot be combined"),
    ],
)
def test_a_bad_combination_of_settings_is_one_line(
    tmp_path: Path, flags: list[str], expected: str
) -> None:
    (tmp_path / "good.py").write_text(GOOD)
    assert expected in _one_line_error(_serve(tmp_path, *flags))
