"""benchmarks/anchors.sh needs the anchors kit outside the repository and says so when missing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "anchors.sh"


def test_missing_kit_is_a_clear_error(tmp_path: Path) -> None:
    env = {**os.environ, "ANCHORS_SRC": str(tmp_path / "nowhere"), "KIT": str(tmp_path / "kit")}
    result = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                            timeout=30)  # fmt: skip
    assert result.returncode == 2
    assert f"the anchors kit is not at {tmp_path / 'nowhere'}" in result.stderr
    assert "ANCHORS_SRC" in result.stderr
    assert not (tmp_path / "kit").exists()
