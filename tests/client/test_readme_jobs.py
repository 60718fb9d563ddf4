"""README's "Jobs" section, executed: its Python client example and its commands, in order, in
one shell, against a real `fnserve serve double.py` (the Deploy section's model file)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.serverproc import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

README = (Path(__file__).parents[2] / "README.md").read_text()


def _section(title: str) -> str:
    return README.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _block(section: str, language: str) -> str:
    found = re.search(rf"```{language}\n(.*?)```", section, re.S)
    assert found is not None, f"no {language} block"
    return found.group(1)


def test_readme_jobs_section_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _block(_section("Deploy"), "python")
    (tmp_path / "double.py").write_text(model)
    section = _section("Jobs")
    lines = _block(section, "bash").splitlines()
    assert lines[0].startswith("fnserve serve double.py &")  # this test's server
    state = tmp_path / ".fnserve-state"
    with ServerProcess.start(tmp_path / "double.py", "--state-dir", state) as server:
        address = server.http.removeprefix("http://")
        exec(
            compile(_block(section, "python").replace("localhost:8000", address), "README", "exec")
        )
        assert capsys.readouterr().out.split() == ["succeeded", "[2.", "4.]"]
        script = "\n".join(
            ["set -e", f'fnserve() {{ "{sys.executable}" -m fnserve "$@"; }}', *lines[1:]]
        ).replace("localhost:8000", address)
        env = {**os.environ, "FNSERVE_SERVER": server.http}
        done = subprocess.run(
            ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert '"model":"double"' in out  # curl's submit answered the job
    assert '"state":"succeeded"' in out  # curl's long poll
    assert '"data":[2.0,4.0]' in out  # curl's result, as /infer answers
    assert '"data": [2.0, 4.0]' in out  # fnserve jobs result
    assert re.search(r"^double\s+0\s+0\s+[1-9]", out, re.M)  # ls: none queued or running
    assert (state / "jobs.db").is_file()
