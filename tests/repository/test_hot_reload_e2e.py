"""`fnserve serve --watch` and `--model-control-mode poll` with real clients: an edited Python
file serves its new code without a failed request, models added to or removed from files load
and unload, and a broken edit leaves the old code serving with the reason in the index and the
log until a fixed edit reloads."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.repository.loadloop import LoadLoop, wait_until
from tests.serverproc import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

SOURCE = """
import sys
import numpy as np
from fnserve import Tensor, model
OFFSET = {n}
CALLS = []

@model(inputs=[Tensor("X", "FP32", [1])], outputs=[Tensor("Y", "FP32", [1])])
def plus(X: np.ndarray) -> np.ndarray:
    return X + OFFSET

@model(inputs=[Tensor("X", "FP32", [1])], outputs=[Tensor("Y", "FP32", [1])])
def calls(X: np.ndarray) -> np.ndarray:
    # Fresh module state after a reload, and no module of the old content left behind.
    CALLS.append(1)
    modules = [m for m in sys.modules if m.startswith("fnserve_user.plus_")]
    return np.array([len(CALLS) + 1000 * len(modules)], np.float32)
"""
EXTRA = """
@model(inputs=[Tensor("X", "FP32", [1])], outputs=[Tensor("Y", "FP32", [1])])
def minus(X: np.ndarray) -> np.ndarray:
    return X - OFFSET
"""
OTHER = """
import numpy as np
from fnserve import Tensor, model

@model(inputs=[Tensor("X", "FP32", [1])], outputs=[Tensor("Y", "FP32", [1])])
def other(X: np.ndarray) -> np.ndarray:
    return X * 3
"""
WARMUP_FAILS = (
    SOURCE.replace(
        "from fnserve import Tensor, model",
        "from fnserve import Tensor, Warmup, WarmupInput, model",
    )
    .replace(
        '@model(inputs=[Tensor("X", "FP32", [1])], outputs=[Tensor("Y", "FP32", [1])])\ndef plus',
        '@model(inputs=[Tensor("X", "FP32", [1])], outputs=[Tensor("Y", "FP32", [1])],\n'
        '       warmup=[Warmup("zeros", {{"X": WarmupInput("FP32", [1])}})])\ndef plus',
    )
    .replace("return X + OFFSET", 'raise ValueError("cannot warm up")')
)
BROKEN = {
    "syntax error": (SOURCE.replace("def plus(X", "def plus(X(").format(n=0), "SyntaxError"),
    "import error": (
        "import no_such_module_anywhere\n" + SOURCE.format(n=0),
        "ModuleNotFoundError",
    ),
    "failing warmup": (WARMUP_FAILS.format(n=0), "warmup sample 'zeros' failed"),
    "bad declaration": (
        SOURCE.replace('Tensor("X", "FP32", [1])', 'Tensor("X", "FP32", 4)', 1).format(n=0),
        "importing",
    ),
}


def _save(path: Path, text: str) -> None:
    """Write `path` as an editor's save does, in one step (a new file renamed over it): a plain
    write truncates first, and a reload that catches the empty file unloads the model."""
    temporary = path.with_name(path.name + ".saving")
    temporary.write_text(text)
    os.replace(temporary, path)


def _answer(server: ServerProcess, name: str = "plus") -> float | None:
    body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    response = httpx.post(f"{server.http}/v2/models/{name}/infer", json=body, timeout=30)
    if response.status_code != 200:
        return None
    return float(response.json()["outputs"][0]["data"][0])


def _answers(server: ServerProcess, value: float) -> Callable[[], bool]:
    return lambda: _answer(server) == value


def _latest_is(load: LoadLoop, value: float) -> Callable[[], bool]:
    return lambda: load.latest() == value


def _index(server: ServerProcess) -> dict[str, dict[str, str]]:
    rows = httpx.post(f"{server.http}/v2/repository/index", timeout=30).json()
    return {row["name"]: row for row in rows}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("functions")
    (folder / "plus.py").write_text(SOURCE.format(n=1))
    return folder


@pytest.fixture(scope="module")
def server(folder: Path) -> Iterator[ServerProcess]:
    with ServerProcess.start(folder, "--watch") as running:
        yield running
        assert running.stop() == 0


@pytest.fixture
def plus(folder: Path, server: ServerProcess) -> Path:
    """The served file, back to its first content and serving it."""
    for extra in folder.glob("*.py"):
        if extra.name != "plus.py":
            extra.unlink()
    file = folder / "plus.py"
    file.write_text(SOURCE.format(n=1))
    wait_until(lambda: _answer(server) == 2.0, "the first code serves")
    wait_until(lambda: set(_index(server)) == {"plus", "calls"}, "only plus.py's models serve")
    return file


def test_edits_under_load_serve_the_new_code_with_no_failed_request(
    plus: Path, server: ServerProcess
) -> None:
    with LoadLoop(server, "plus", np.ones(1)) as load:
        for n in (10, 100, 1000):
            _save(plus, SOURCE.format(n=n))
            wait_until(_latest_is(load, 1.0 + n), f"OFFSET {n} answers")
        time.sleep(0.2)  # a little traffic on the last code
    assert load.failures == []
    assert {2.0, 11.0, 101.0, 1001.0} <= set(load.seen)
    wait_until(lambda: "reload: model 'plus' reloaded" in server.output(), "the log says so")


def test_a_reload_starts_from_a_fresh_module(plus: Path, server: ServerProcess) -> None:
    assert _answer(server, "calls") is not None
    before = _answer(server, "calls")
    assert before is not None
    assert before >= 1002.0  # one module, two calls or more
    _save(plus, SOURCE.format(n=2))
    wait_until(lambda: _answer(server) == 3.0, "the edited code answers")
    assert _answer(server, "calls") == 1001.0  # the first call of the new module, alone


def test_models_added_to_and_removed_from_a_file(plus: Path, server: ServerProcess) -> None:
    _save(plus, SOURCE.format(n=5) + EXTRA)
    wait_until(lambda: _answer(server, "minus") == -4.0, "the added model serves")
    assert _answer(server) == 6.0
    _save(plus, SOURCE.format(n=5))
    wait_until(lambda: "minus" not in _index(server), "the removed model is unloaded")
    assert _answer(server, "minus") is None
    wait_until(lambda: "reload: model 'minus' unloaded" in server.output(), "the log says so")


def test_a_new_file_loads_and_a_deleted_file_unloads(
    plus: Path, folder: Path, server: ServerProcess
) -> None:
    other = folder / "other.py"
    _save(other, OTHER)
    wait_until(lambda: _answer(server, "other") == 3.0, "the new file's model serves")
    wait_until(lambda: "reload: model 'other' loaded" in server.output(), "the log says so")
    other.unlink()
    wait_until(lambda: "other" not in _index(server), "the deleted file's model is unloaded")
    assert _answer(server, "other") is None
    assert _answer(server) == 2.0


@pytest.mark.parametrize("kind", list(BROKEN))
def test_a_broken_edit_keeps_the_old_code_serving(
    kind: str, plus: Path, server: ServerProcess
) -> None:
    source, fragment = BROKEN[kind]
    with LoadLoop(server, "plus", np.ones(1)) as load:
        _save(plus, source)
        wait_until(lambda: fragment in _index(server)["plus"].get("reason", ""), "the reason shows")
        row = _index(server)["plus"]
        assert row["state"] == "READY"  # as Triton: the previous version keeps serving
        assert row["reason"].startswith("the last change failed to load")
        assert _answer(server) == 2.0
        wait_until(lambda: "failed to reload" in server.output(), "the log says so")
        _save(plus, SOURCE.format(n=7))  # the fix
        wait_until(lambda: load.latest() == 8.0, "the fixed code answers")
    assert load.failures == []
    assert "reason" not in _index(server)["plus"] or not _index(server)["plus"]["reason"]
    assert fragment in server.output()


def test_poll_mode_picks_changes_up_within_the_interval(tmp_path: Path) -> None:
    file = tmp_path / "plus.py"
    file.write_text(SOURCE.format(n=1))
    poll = ("--model-control-mode", "poll", "--repository-poll-secs", "0.5")
    with ServerProcess.start(tmp_path, *poll) as server:
        assert "polling every 0.5 s" in server.output()
        assert _answer(server) == 2.0
        # The poller compares file times to the second (see watch.py): an edit in the very
        # second the file was written before the server started would go unseen.
        first_write = file.stat().st_mtime
        wait_until(lambda: time.time() >= int(first_write) + 1.05, "the next second")
        file.write_text(SOURCE.format(n=20))
        took = wait_until(lambda: _answer(server) == 21.0, "the polled change serves")
        assert took < 0.5 + 5.0  # an interval plus the reload; the default would be 15 s
        file.unlink()
        wait_until(lambda: _index(server) == {}, "the deleted file's models are unloaded")
        assert server.stop() == 0


def test_a_single_served_file_is_watched_across_atomic_saves(tmp_path: Path) -> None:
    file = tmp_path / "plus.py"
    file.write_text(SOURCE.format(n=1))
    with ServerProcess.start(file, "--watch") as server:
        for n in (2, 3):  # as editors save: a new file renamed over the old one
            staged = tmp_path / f".plus.py.{n}.tmp"
            staged.write_text(SOURCE.format(n=n))
            staged.replace(file)
            wait_until(_answers(server, 1.0 + n), f"save {n} serves")
        assert server.stop() == 0


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--watch", "--model-control-mode", "explicit"), "--watch cannot be combined"),
        (("--watch", "--model-control-mode", "poll"), "--watch cannot be combined"),
        (("--repository-poll-secs", "0"), "repository-poll-secs"),
    ],
)
def test_conflicting_watch_flags_are_refused(
    flags: tuple[str, ...], message: str, tmp_path: Path
) -> None:
    (tmp_path / "plus.py").write_text(SOURCE.format(n=1))
    with pytest.raises(RuntimeError, match=message):
        ServerProcess.start(tmp_path, *flags)
