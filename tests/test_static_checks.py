"""`make lint` as a test: mypy (strict, pyproject's files) and ruff (lint and format) are clean.

No server: each check runs as a subprocess from the repository root on the source tree.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ["runtime", "functions", "tests", "benchmarks", "examples"]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT / "runtime"), env.get("PYTHONPATH", "")) if p
    )
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )


def _assert_clean(result: subprocess.CompletedProcess[str]) -> None:
    output = f"{' '.join(map(str, result.args))}\n{result.stdout}{result.stderr}"
    assert result.returncode == 0, output


def test_mypy_strict_passes(tmp_path: Path) -> None:
    # files and strictness come from pyproject.toml; a fresh cache keeps the run honest
    _assert_clean(_run("mypy", "--cache-dir", str(tmp_path / "mypy_cache")))


def test_ruff_check_passes() -> None:
    _assert_clean(_run("ruff", "check", "--no-cache", *SOURCES))


def test_ruff_format_is_applied() -> None:
    _assert_clean(_run("ruff", "format", "--check", "--no-cache", *SOURCES))
