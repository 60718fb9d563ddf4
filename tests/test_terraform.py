"""`terraform/` checked offline: fmt, init, validate and `terraform test` on the mock provider.

No registry is reachable from these machines, so the AWS provider comes from the local
filesystem mirror (/opt/tf-plugins) through `terraform/offline.tfrc`. The configuration is
copied to a temporary directory first: init writes a lock file and a data directory, and a
fresh clone must stay clean. Where terraform or the mirror is missing, each test skips and says
which; nothing passes without running.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TERRAFORM_DIR = ROOT / "terraform"
MIRROR = Path("/opt/tf-plugins/registry.terraform.io/hashicorp/aws")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _terraform() -> str:
    found = shutil.which("terraform") or (
        "/usr/local/bin/terraform" if Path("/usr/local/bin/terraform").exists() else None
    )
    if found is None:
        pytest.skip("terraform is not installed: terraform fmt/validate/test not run")
    if not MIRROR.is_dir() or not any(MIRROR.iterdir()):
        pytest.skip(f"no AWS provider in the filesystem mirror {MIRROR}: terraform checks not run")
    return found


def _run(terraform: str, cwd: Path, env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [terraform, *args, "-no-color"], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=540,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"terraform {' '.join(args)} failed:\n{output}"
    return output


@pytest.fixture(scope="module")
def initialised(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[str, Path, dict[str, str]]:
    """terraform/ copied to a temporary directory and `terraform init`-ed from the mirror."""
    terraform = _terraform()
    work = tmp_path_factory.mktemp("terraform") / "terraform"
    shutil.copytree(
        TERRAFORM_DIR, work, ignore=shutil.ignore_patterns(".terraform", ".terraform.lock.hcl")
    )
    env = {
        **os.environ,
        "TF_CLI_CONFIG_FILE": str(TERRAFORM_DIR / "offline.tfrc"),
        "TF_DATA_DIR": str(work / ".terraform"),
        "TF_IN_AUTOMATION": "1",
        "TF_INPUT": "0",
        "CHECKPOINT_DISABLE": "1",
    }
    _run(terraform, work, env, "init", "-backend=false", "-input=false")
    return terraform, work, env


def test_terraform_fmt_is_applied() -> None:
    terraform = _terraform()
    env = {**os.environ, "TF_CLI_CONFIG_FILE": str(TERRAFORM_DIR / "offline.tfrc")}
    _run(terraform, TERRAFORM_DIR, env, "fmt", "-check", "-recursive", "-diff")


def test_mirror_has_the_pinned_provider() -> None:
    _terraform()
    versions = sorted(p.name for p in MIRROR.iterdir())
    pin = re.search(r'version\s*=\s*"~> (\d+)\.(\d+)"', (TERRAFORM_DIR / "versions.tf").read_text())
    assert pin is not None, "versions.tf pins the AWS provider with ~> MAJOR.MINOR"
    major, minor = int(pin.group(1)), int(pin.group(2))
    assert any(int(v.split(".")[0]) == major and int(v.split(".")[1]) >= minor for v in versions), (
        f"the mirror holds {versions}, versions.tf asks for ~> {major}.{minor}"
    )


def test_terraform_validate(initialised: tuple[str, Path, dict[str, str]]) -> None:
    terraform, work, env = initialised
    assert "The configuration is valid" in _run(terraform, work, env, "validate")


def test_terraform_test_passes_with_enough_assertions(
    initialised: tuple[str, Path, dict[str, str]],
) -> None:
    terraform, work, env = initialised
    files = sorted((TERRAFORM_DIR / "tests").glob("*.tftest.hcl"))
    assertions = sum(len(re.findall(r"^\s*assert\s*\{", f.read_text(), re.M)) for f in files)
    assert assertions >= 10, f"only {assertions} assertions in terraform/tests"
    output = _run(terraform, work, env, "test")
    summary = re.search(r"Success! (\d+) passed, 0 failed", output)
    assert summary is not None, output
    runs = sum(len(re.findall(r'^run "', f.read_text(), re.M)) for f in files)
    assert int(summary.group(1)) == runs, f"{runs} runs declared, {summary.group(1)} passed"
