"""`make serve` and `make test` started together on a fresh clone set up one working venv."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.skipif(shutil.which("make") is None, reason="needs make"),
]


def test_two_setups_at_once_both_succeed_and_the_venv_works(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    # GROUPS= installs the project and its runtime dependencies only (pip's cache is shared),
    # which is enough to race two set-ups; the recipe is the one `make serve`/`make test` run.
    command = ["make", "-C", str(ROOT), "install", f"VENV={venv}", "GROUPS=",
               f"PYTHON={sys.base_prefix}/bin/python3"]  # fmt: skip
    runs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for _ in range(2)]  # fmt: skip
    outputs = [run.communicate(timeout=580)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0], "\n".join(outputs)
    check = subprocess.run(
        [venv / "bin" / "python", "-c", "import fnserve.cli, numpy; print(fnserve.__version__)"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert check.returncode == 0, check.stderr
    assert (venv / "bin" / "fnserve").exists()
    # A third run finds it ready and builds nothing.
    again = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0
    assert "pip" not in again.stdout
