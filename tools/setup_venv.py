"""Create or update the project's virtualenv; safe when several `make` runs do it at once.

    python tools/setup_venv.py VENV [pip install arguments...]

`make serve` and `make test` started together on a fresh clone both found no `.venv` and both
built it, each breaking the other's. Here the work happens under an exclusive lock on
`VENV.lock` (beside the venv, which may not exist yet): the first run builds, the others wait
and then find it ready (its stamp is newer than pyproject.toml) and do nothing. A venv left
half-built by a killed run has no stamp and is rebuilt from scratch.
"""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(venv: Path, install_args: list[str]) -> None:
    stamp = venv / ".installed"
    with open(f"{venv}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also on a crash
        if _fresh(stamp):
            return
        stamp.unlink(missing_ok=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "--upgrade", "pip>=25.1"], check=True)
        subprocess.run([*pip, "-e", str(ROOT), *install_args], check=True, cwd=ROOT)
        stamp.touch()


def _fresh(stamp: Path) -> bool:
    project = ROOT / "pyproject.toml"
    return stamp.exists() and stamp.stat().st_mtime >= project.stat().st_mtime


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
