"""benchmarks/triton_reference/run.sh needs a Triton venv outside the repository: without one it
stops at once with a message saying what is missing and how to build it."""

from __future__ import annotations

import subprocess
from pathlib import Path

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "triton_reference" / "run.sh"


def test_missing_triton_venv_is_one_clear_error(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "VENV": str(tmp_path / "absent")}
    done = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "out")],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert f"no Triton venv at {tmp_path / 'absent'}" in done.stderr
    assert "setup.sh" in done.stderr
    assert not (tmp_path / "out").exists()  # nothing started, nothing written
