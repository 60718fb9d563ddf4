"""README's "Deploy" section, executed: its model file and its commands, in order, against a
real server (the `fnserve serve` line is this test's server; `fnserve` runs this checkout)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.serverproc import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

README = (Path(__file__).parents[2] / "README.md").read_text()
SECTION = README.split("## Deploy\n", 1)[1].split("\n## ", 1)[0]


def _block(language: str) -> str:
    found = re.search(rf"```{language}\n(.*?)```", SECTION, re.S)
    assert found is not None, f"no {language} block in README's Deploy section"
    return found.group(1)


def test_readme_deploy_commands_run(tmp_path: Path) -> None:
    model = _block("python")
    (tmp_path / model.splitlines()[0].removeprefix("# ")).write_text(model)
    commands = [line.split("  #")[0].strip() for line in _block("bash").splitlines()]
    token = next(c for c in commands if c.startswith("export ")).split("=", 1)[1]
    args = ("--allow-empty", "--state-dir", tmp_path / ".fnserve-state", "--admin-token", token)
    with ServerProcess.start(*args) as server:
        env = {**os.environ, "FNSERVE_ADMIN_TOKEN": token, "FNSERVE_SERVER": server.http}
        outputs = []
        for command in commands:
            if command.startswith(("export ", "fnserve serve")):
                continue  # done above: this test's server
            command = command.replace("fnserve ", f"{sys.executable} -m fnserve ", 1)
            command = command.replace("localhost:8000", server.http.removeprefix("http://"))
            done = subprocess.run(
                command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True,
                timeout=60,
            )  # fmt: skip
            assert done.returncode == 0, f"{command}\n{done.stdout}{done.stderr}"
            outputs.append(done.stdout)
    joined = "\n".join(outputs)
    assert '"data":[2.0,4.0]' in joined  # the curl call answered
    assert "deployment 'double' version 2" in joined
    assert "deployment 'double' version 1 (hash" in joined  # the rollback
    assert "deployment 'double' undeployed" in joined
