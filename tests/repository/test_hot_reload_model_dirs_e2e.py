"""`fnserve serve --watch` on a Triton repository of ONNX models: an edited config.pbtxt and a
new version folder take over without a failed request, broken ones leave the old version
serving with the reason, and a deleted model directory is unloaded."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.repository.loadloop import LoadLoop, wait_until
from tests.repository.onnx_models import add_one, scale
from tests.serverproc import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

ADD_ONE_CONFIG = """
name: "add_one"
platform: "onnxruntime_onnx"
max_batch_size: {batch}
dynamic_batching {{ }}
parameters {{ key: "tag" value {{ string_value: "{tag}" }} }}
"""
SCALE_CONFIG = """
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 2, 3 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2, 3 ] } ]
"""


def _config(server: ServerProcess, name: str) -> dict[str, object]:
    response = httpx.get(f"{server.http}/v2/models/{name}/config", timeout=30)
    return dict(response.json()) if response.status_code == 200 else {}


def _index(server: ServerProcess) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = httpx.post(f"{server.http}/v2/repository/index").json()
    return rows


def _versions(server: ServerProcess, name: str) -> dict[str, dict[str, str]]:
    return {row["version"]: row for row in _index(server) if row["name"] == name}


def _configured(server: ServerProcess, batch: int, tag: str) -> Callable[[], bool]:
    def check() -> bool:
        config = _config(server, "add_one")
        parameters = config.get("parameters", {})
        assert isinstance(parameters, dict)
        return config.get("max_batch_size") == batch and parameters.get("tag") == {
            "string_value": tag
        }

    return check


def _install(model: Path, target: Path) -> None:
    """Put a finished model file in place at once, as a deployment copies one in."""
    target.parent.mkdir(parents=True, exist_ok=True)
    model.replace(target)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    add_one(root / "add_one" / "1" / "model.onnx")
    (root / "add_one" / "config.pbtxt").write_text(ADD_ONE_CONFIG.format(batch=4, tag="first"))
    scale(root / "scale" / "1" / "model.onnx", 1.0)
    (root / "scale" / "config.pbtxt").write_text(SCALE_CONFIG)
    return root


def test_a_config_edit_reloads_under_load(repo: Path) -> None:
    with ServerProcess.start(repo, "--watch") as server:
        assert _configured(server, 4, "first")()
        with LoadLoop(server, "add_one", np.ones((1, 4))) as load:
            config = repo / "add_one" / "config.pbtxt"
            config.write_text(ADD_ONE_CONFIG.format(batch=8, tag="second"))
            wait_until(_configured(server, 8, "second"), "the edited config serves")
        assert load.failures == []
        assert set(load.seen) == {2.0}
        wait_until(lambda: "reload: model 'add_one' reloaded" in server.output(), "the log says so")
        assert server.stop() == 0


def test_a_new_version_folder_takes_over_under_load(repo: Path, tmp_path: Path) -> None:
    with ServerProcess.start(repo, "--watch") as server:
        with LoadLoop(server, "scale", np.ones((2, 3))) as load:
            _install(scale(tmp_path / "v2.onnx", 2.0), repo / "scale" / "2" / "model.onnx")
            wait_until(lambda: load.latest() == 2.0, "version 2 answers")
            wait_until(lambda: list(_versions(server, "scale")) == ["2"], "version 1 is gone")
        assert load.failures == []
        assert set(load.seen) == {1.0, 2.0}
        assert server.stop() == 0


def test_a_broken_version_leaves_the_old_one_serving(repo: Path, tmp_path: Path) -> None:
    with ServerProcess.start(repo, "--watch") as server:
        with LoadLoop(server, "scale", np.ones((2, 3))) as load:
            garbage = tmp_path / "garbage.onnx"
            garbage.write_bytes(b"\x08\x01not a model")
            _install(garbage, repo / "scale" / "2" / "model.onnx")
            wait_until(
                lambda: _versions(server, "scale").get("2", {}).get("state") == "UNAVAILABLE",
                "version 2 failed",
            )
            assert _versions(server, "scale")["1"]["state"] == "READY"
            _install(scale(tmp_path / "v2.onnx", 3.0), repo / "scale" / "2" / "model.onnx")
            wait_until(lambda: load.latest() == 3.0, "the fixed version 2 answers")
            wait_until(lambda: list(_versions(server, "scale")) == ["2"], "version 1 is gone")
        assert load.failures == []
        assert set(load.seen) == {1.0, 3.0}
        assert server.stop() == 0


def test_a_broken_config_keeps_the_old_version_serving(repo: Path) -> None:
    config = repo / "add_one" / "config.pbtxt"
    with ServerProcess.start(repo, "--watch") as server:
        with LoadLoop(server, "add_one", np.ones((1, 4))) as load:
            config.write_text(ADD_ONE_CONFIG.format(batch=8, tag="x") + "max_batch_size: many\n")
            wait_until(
                lambda: "config.pbtxt" in _versions(server, "add_one")["1"].get("reason", ""),
                "the reason shows",
            )
            row = _versions(server, "add_one")["1"]
            assert row["state"] == "READY"
            assert row["reason"].startswith("the last change failed to load")
            assert _configured(server, 4, "first")()
            config.write_text(ADD_ONE_CONFIG.format(batch=8, tag="fixed"))
            wait_until(_configured(server, 8, "fixed"), "the fixed config serves")
        assert load.failures == []
        assert not _versions(server, "add_one")["1"].get("reason")
        assert "failed to reload" in server.output()
        assert server.stop() == 0


def test_a_deleted_model_directory_is_unloaded(repo: Path) -> None:
    with ServerProcess.start(repo, "--watch") as server:
        shutil.rmtree(repo / "add_one")
        wait_until(lambda: not _versions(server, "add_one"), "add_one leaves the index")
        answer = httpx.post(
            f"{server.http}/v2/models/add_one/infer",
            json={"inputs": [{"name": "X", "datatype": "FP32", "shape": [1, 4], "data": [0] * 4}]},
        )
        assert answer.status_code == 404
        assert _versions(server, "scale")["1"]["state"] == "READY"
        wait_until(lambda: "reload: model 'add_one' unloaded" in server.output(), "the log says so")
        assert server.stop() == 0
