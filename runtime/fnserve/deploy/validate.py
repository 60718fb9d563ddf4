"""Import a deployment in a separate process first, with a deadline.

The serving process must never run code that crashes the interpreter or blocks forever on
import, so `validate` starts `python -m fnserve.deploy.validate FOLDER`, which scans the folder
as the server would and prints the models it defines (or why it cannot), and kills it past the
deadline.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections import Counter
from pathlib import Path

from fnserve.errors import InvalidInputError

_MARKER = "FNSERVE-VALIDATE "
_RUNTIME_ROOT = str(Path(__file__).resolve().parents[2])  # the child imports this fnserve

Models = tuple[tuple[str, str], ...]


async def validate(folder: Path, timeout_s: float) -> Models:
    """The (name, version) pairs `folder` defines, imported in a child process.

    Raises:
        InvalidInputError: a file fails to import, the folder defines no model or a model
            twice, the import ran past `timeout_s`, or the child process crashed.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_RUNTIME_ROOT, env.get("PYTHONPATH")) if p)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "fnserve.deploy.validate", str(folder),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )  # fmt: skip
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise InvalidInputError(
            f"importing the deployment took longer than {timeout_s:g} s (the validation "
            f"deadline, --deploy-validate-timeout): does an import block or loop?"
        ) from None
    return _answer(stdout.decode(errors="replace"), stderr.decode(errors="replace"), proc)


def _answer(stdout: str, stderr: str, proc: asyncio.subprocess.Process) -> Models:
    lines = [line for line in stdout.splitlines() if line.startswith(_MARKER)]
    if not lines:
        tail = " | ".join(stderr.strip().splitlines()[-3:]) or "no output"
        raise InvalidInputError(
            f"importing the deployment crashed (exit code {proc.returncode}): {tail}"
        )
    doc = json.loads(lines[-1].removeprefix(_MARKER))
    if doc.get("error"):
        raise InvalidInputError(str(doc["error"]))
    return tuple((str(name), str(version)) for name, version in doc["models"])


def check(folder: Path) -> dict[str, object]:
    """What the child reports: {"models": [[name, version], ...]} or {"error": reason}."""
    from fnserve.repository.source import ModelSource  # in the child only

    found = ModelSource([folder]).scan()
    if found.failures:
        return {"error": found.failures[0].reason}
    models = [(d.config.name, str(d.config.version)) for d in found.definitions]
    if not models:
        return {
            "error": "the deployment defines no model (no @model function, no Triton model "
            "directory)"
        }
    twice = [f"'{n}' version {v}" for (n, v), k in Counter(models).items() if k > 1]
    if twice:
        return {"error": f"the deployment defines model {twice[0]} more than once"}
    return {"models": sorted(models)}


def main() -> None:
    """Entry point of the child process."""
    result = check(Path(sys.argv[1]))
    sys.stdout.write(_MARKER + json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
