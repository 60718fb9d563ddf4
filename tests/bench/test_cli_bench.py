"""The `fnserve bench` command line: the missing extra, the locustfiles, the server probes."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from fnserve.bench.options import BenchError
from fnserve.bench.probe import GrpcProbe, HttpProbe
from fnserve.bench.runner import USER_CLASSES
from fnserve.cli import main
from tests.conftest import RunningServer

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "runtime" / "fnserve"


def test_only_the_cli_imports_the_bench_and_only_lazily() -> None:
    for path in PACKAGE.rglob("*.py"):
        if "bench" in path.relative_to(PACKAGE).parts:
            continue
        tree = ast.parse(path.read_text())
        top_level = {n.module for n in tree.body if isinstance(n, ast.ImportFrom)}
        nested = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not any(m and m.startswith("fnserve.bench") for m in top_level), path
        if path.name != "cli.py":
            assert not any(m and m.startswith("fnserve.bench") for m in nested), path


def test_command_side_never_loads_locust() -> None:
    code = (
        "import sys, fnserve.cli, fnserve.bench.command, fnserve.bench.plot, fnserve.bench.probe;"
        "bad = sorted(m for m in ('locust', 'gevent', 'fnserve.bench.users') if m in sys.modules);"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_missing_extra_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "locust", None)  # find_spec then reports it missing
    result = CliRunner().invoke(main, ["bench", "identity"])
    assert result.exit_code == 1
    assert "pip install 'fnserve[loadtest]'" in result.output


def test_bad_options_are_usage_errors() -> None:
    result = CliRunner().invoke(main, ["bench", "m", "--concurrency", "0"])
    assert result.exit_code == 1
    assert "concurrency levels must be >= 1, got '0'" in result.output


@pytest.mark.parametrize(
    "locustfile",
    [ROOT / "loadtest" / "locustfile.py", ROOT / "runtime/fnserve/bench/locustfile.py"],
)
def test_locustfiles_offer_the_three_users(locustfile: Path) -> None:
    if importlib.util.find_spec("locust") is None:  # (importing it would patch this process)
        pytest.skip("needs the loadtest extra")
    listed = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(locustfile), "--list"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert set(listed.stdout.split()) >= set(USER_CLASSES.values())


class TestProbes:
    @pytest.fixture(params=["http", "grpc"])
    def probe(self, request: pytest.FixtureRequest, server: RunningServer) -> HttpProbe | GrpcProbe:
        if request.param == "http":
            return HttpProbe(f"http://{server.http_url}", 5.0)
        return GrpcProbe(server.grpc_url, 5.0)

    def test_metadata_config_and_counters(self, probe: HttpProbe | GrpcProbe) -> None:
        metadata = probe.metadata("add_sub", "")
        assert [(i["name"], i["datatype"], i["shape"]) for i in metadata["inputs"]] == [
            ("INPUT0", "FP32", [-1, 16]),
            ("INPUT1", "FP32", [-1, 16]),
        ]
        assert probe.max_batch_size("add_sub", "") == 8
        assert probe.max_batch_size("strings", "") == 0
        assert probe.counters("add_sub", "1").requests >= 0

    def test_unknown_model(self, probe: HttpProbe | GrpcProbe) -> None:
        with pytest.raises(BenchError, match="model 'nosuch'"):
            probe.metadata("nosuch", "")

    @pytest.mark.parametrize("kind", ["http", "grpc"])
    def test_unreachable_server(self, kind: str) -> None:
        probe = (
            HttpProbe("http://127.0.0.1:1", 2.0)
            if kind == "http"
            else GrpcProbe("127.0.0.1:1", 2.0)
        )
        with pytest.raises(BenchError, match="cannot reach the server at"):
            probe.counters("m", "")
