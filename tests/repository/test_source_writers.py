"""A save that truncates a file and writes it later (a writer held up on a loaded machine):
the re-scan waits for the content rather than dropping the file's models in between."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from fnserve.repository.source import ModelSource

SOURCE = """
import numpy as np
from fnserve import Tensor, model

@model(inputs=[Tensor("X", "FP32", [1])], outputs=[Tensor("Y", "FP32", [1])])
def plus(X: np.ndarray) -> np.ndarray:
    return X + {n}
"""


def _names(source: ModelSource, changed: Path) -> set[str]:
    found, _ = source.rescan([changed])
    return {d.config.name for d in found.definitions}


def test_a_file_emptied_mid_save_keeps_its_models_once_written(tmp_path: Path) -> None:
    file = tmp_path / "plus.py"
    file.write_text(SOURCE.format(n=1))
    source = ModelSource([tmp_path])
    assert {d.config.name for d in source.scan().definitions} == {"plus"}
    file.write_text("")  # truncated; the rest of the save comes 0.3 s later
    writer = threading.Timer(0.3, lambda: file.write_text(SOURCE.format(n=2)))
    writer.start()
    try:
        assert _names(source, file) == {"plus"}
    finally:
        writer.join()


def test_a_file_left_empty_loses_its_models_after_the_grace(tmp_path: Path) -> None:
    file = tmp_path / "plus.py"
    file.write_text(SOURCE.format(n=1))
    source = ModelSource([tmp_path])
    source.scan()
    file.write_text("")
    start = time.monotonic()
    assert _names(source, file) == set()
    assert time.monotonic() - start >= 0.9  # it waited for a writer first
