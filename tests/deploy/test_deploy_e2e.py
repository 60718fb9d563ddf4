"""`fnserve deploy` end to end: the real CLI (a subprocess) against a real server subprocess.

A deployment is called with tritonclient over HTTP and gRPC; a changed redeploy swaps in
under load without a failed request; identical content is a no-op; broken, hanging, corrupt,
oversized and escaping deployments are refused with the reason while the old version serves;
rollback, undeploy, a restart on the same state directory, and the admin token.
"""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from fnserve.deploy.archive import pack
from tests.backends.triton_python_models import ADD_SUB
from tests.repository.loadloop import LoadLoop, wait_until
from tests.serverproc import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

ADMIN = "admin-secret-1"
SOURCE = """
import numpy as np
from fnserve import Tensor, model

@model(inputs=[Tensor("X", "FP32", [1])], outputs=[Tensor("Y", "FP32", [1])])
def {name}(X: np.ndarray) -> np.ndarray:
    return X + {offset}
"""
SERVED = SOURCE.format(name="served", offset=0)
WARMUP_FAILS = """
import numpy as np
from fnserve import Tensor, Warmup, WarmupInput, model

@model(inputs=[Tensor("X", "FP32", [1])], outputs=[Tensor("Y", "FP32", [1])],
       warmup=[Warmup("zeros", {"X": WarmupInput("FP32", [1])})])
def keep(X: np.ndarray) -> np.ndarray:
    raise ValueError("cannot warm up")
"""


def _server(state: Path, served: Path) -> ServerProcess:
    return ServerProcess.start(
        served, "--state-dir", state, "--admin-token", ADMIN,
        "--deploy-validate-timeout", "3", "--deploy-max-bytes", "64KiB",
    )  # fmt: skip


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("deploy")
    (root / "served").mkdir()
    (root / "served" / "served.py").write_text(SERVED)
    return root / "state", root / "served"


@pytest.fixture(scope="module")
def server(dirs: tuple[Path, Path]) -> Iterator[ServerProcess]:
    with _server(*dirs) as running:
        yield running


def fnserve(
    server: ServerProcess, *args: str | Path, token: str = ADMIN
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FNSERVE_ADMIN_TOKEN": token}
    return subprocess.run(
        [sys.executable, "-m", "fnserve", *map(str, args), "--server", server.http],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip


def deploy(server: ServerProcess, path: Path, name: str) -> subprocess.CompletedProcess[str]:
    return fnserve(server, "deploy", path, "--name", name)


def write(folder: Path, name: str, offset: float, file: str = "") -> Path:
    path = folder / (file or f"{name}.py")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SOURCE.format(name=name, offset=offset))
    return path


def call(server: ServerProcess, model: str, x: float = 1.0) -> float:
    client = httpclient.InferenceServerClient(server.http.removeprefix("http://"))
    tensor = httpclient.InferInput("X", [1], "FP32")
    tensor.set_data_from_numpy(np.array([x], np.float32))
    try:
        result = client.infer(model, [tensor])
        return float(result.as_numpy("Y")[0])
    finally:
        client.close()


def call_grpc(server: ServerProcess, model: str, x: float = 1.0) -> float:
    client = grpcclient.InferenceServerClient(server.grpc)
    tensor = grpcclient.InferInput("X", [1], "FP32")
    tensor.set_data_from_numpy(np.array([x], np.float32))
    try:
        result = client.infer(model, [tensor])
        return float(result.as_numpy("Y")[0])
    finally:
        client.close()


def post_archive(server: ServerProcess, name: str, data: bytes) -> httpx.Response:
    return httpx.post(
        f"{server.http}/v2/deployments", params={"name": name}, content=data,
        headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60,
    )  # fmt: skip


def test_deploy_then_call_over_http_and_grpc(server: ServerProcess, tmp_path: Path) -> None:
    result = deploy(server, write(tmp_path, "fresh", 5), "fresh")
    assert result.returncode == 0, result.stderr
    assert "deployment 'fresh' version 1" in result.stdout
    assert "fresh v1: READY (load" in result.stdout
    assert "curl -s" in result.stdout
    assert "tritonclient" in result.stdout
    assert call(server, "fresh", 1) == 6.0
    assert call_grpc(server, "fresh", 2) == 7.0


TRITON_CONFIG = """
name: "tri_add_sub"
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
"""


def test_deploy_a_triton_model_directory(server: ServerProcess, tmp_path: Path) -> None:
    model_dir = tmp_path / "tri_add_sub"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(TRITON_CONFIG)
    (model_dir / "1" / "model.py").write_text(ADD_SUB)
    result = fnserve(server, "deploy", model_dir)
    assert result.returncode == 0, result.stderr
    assert "deployment 'tri_add_sub' version 1" in result.stdout
    client = grpcclient.InferenceServerClient(server.grpc)
    try:
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            tensor = grpcclient.InferInput(name, [1, 4], "FP32")
            tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
            inputs.append(tensor)
        answer = client.infer("tri_add_sub", inputs)
        assert answer.as_numpy("OUTPUT0").tolist() == [[2.0, 2.0, 2.0, 2.0]]
    finally:
        client.close()


def test_identical_redeploy_is_a_no_op(server: ServerProcess, tmp_path: Path) -> None:
    path = write(tmp_path, "same", 1)
    assert deploy(server, path, "same").returncode == 0
    again = deploy(server, path, "same")
    assert again.returncode == 0, again.stderr
    assert "version 1 (hash" in again.stdout
    assert "already serves this content" in again.stdout


class BenchLoad:
    """`fnserve bench` (Locust, binary tensors over HTTP) holding 32 requests in flight on
    `model` for `seconds`, its whole run measured (no warmup window), its table in a CSV."""

    def __init__(self, server: ServerProcess, model: str, csv: Path, seconds: float) -> None:
        self.csv = csv
        self._process = subprocess.Popen(
            [sys.executable, "-m", "fnserve", "bench", model, "--url",
             server.http.removeprefix("http://"), "--concurrency", "32", "--warmup", "0",
             "--duration", str(seconds), "--shape", "X:1", "--csv", str(csv)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip

    def __enter__(self) -> BenchLoad:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._process.poll() is None:  # the test failed before it ended
            self._process.kill()
        self._process.communicate()

    def running(self) -> bool:
        return self._process.poll() is None

    def result(self) -> dict[str, str]:
        """The bench's one row, once it ended (its output in the message when it failed)."""
        output, _ = self._process.communicate(timeout=120)
        # Exit 1 is its integrity check: the server counted other clients' requests too, and
        # the redeploy replaced the version whose statistics it read. Nothing else may fail.
        errors = [line for line in output.splitlines() if line.startswith("error:")]
        assert self._process.returncode in (0, 1), output
        assert all("the harness sent" in line for line in errors), output
        with self.csv.open() as file:
            (row,) = csv.DictReader(file)
        return row


def test_redeploy_under_load_fails_no_request(server: ServerProcess, tmp_path: Path) -> None:
    """The issue's check: a changed redeploy while `fnserve bench` runs at concurrency 32 (and
    LoadLoop's three clients watch which version answers): not one failed request."""
    assert deploy(server, write(tmp_path / "v1", "busy", 10), "busy").returncode == 0
    with (
        BenchLoad(server, "busy", tmp_path / "bench.csv", seconds=12) as bench,
        LoadLoop(server, "busy", np.ones(1, np.float32)) as load,
    ):
        wait_until(lambda: load.latest() == 11.0, "version 1 answers")
        wait_until(lambda: _inferences(server, "busy") > 200, "the bench's load arrives")
        result = deploy(server, write(tmp_path / "v2", "busy", 20), "busy")
        assert result.returncode == 0, result.stderr
        assert "deployment 'busy' version 2" in result.stdout
        wait_until(lambda: load.latest() == 21.0, "the redeployed code answers")
        assert bench.running(), "the bench ended before the swap: lengthen it"
        row = bench.result()
        count = len(load.seen)
        wait_until(lambda: len(load.seen) > count + 30, "more answers after the swap")
    assert load.failures == []
    assert int(row["errors"]) == 0, row
    assert int(row["requests"]) > 500, row


def _inferences(server: ServerProcess, model: str) -> int:
    """Successful inferences of `model` from the statistics API."""
    reply = httpx.get(f"{server.http}/v2/models/{model}/stats", timeout=10)
    if reply.status_code == 404:  # not loaded yet
        return 0
    stats = reply.raise_for_status().json()
    return sum(s["inference_stats"]["success"]["count"] for s in stats["model_stats"])


class TestRefused:
    """Each bad deployment is refused with its reason; the deployed version keeps serving."""

    @pytest.fixture(scope="class")
    def name(self, server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> str:
        assert (
            deploy(server, write(tmp_path_factory.mktemp("ok"), "keep", 100), "keep").returncode
            == 0
        )
        return "keep"

    def _untouched(self, server: ServerProcess) -> None:
        assert call(server, "keep", 1) == 101.0
        listed = fnserve(server, "deployments")
        assert "keep: version 1 serves" in listed.stdout, listed.stdout + listed.stderr

    @pytest.mark.parametrize(
        ("source", "reasons"),
        [
            ("def broken(:\n", ("SyntaxError", "line 1")),
            ("import no_such_package_here\n", ("no_such_package_here",)),
            ("import time\ntime.sleep(600)\n", ("took longer than 3 s",)),
            ("import os\nos.abort()\n", ("crashed",)),
            ("X = 1\n", ("defines no model",)),
            (WARMUP_FAILS, ("failed to load (version 1 keeps serving)",
                            "warmup sample 'zeros' failed")),
        ],
        ids=["syntax-error", "missing-package", "hanging-import", "crashing-import", "no-model",
             "failing-warmup"],
    )  # fmt: skip
    def test_a_broken_deployment_is_refused_with_its_reason(
        self, server: ServerProcess, name: str, tmp_path: Path, source: str,
        reasons: tuple[str, ...],
    ) -> None:  # fmt: skip
        (tmp_path / "keep.py").write_text(source)
        result = deploy(server, tmp_path / "keep.py", name)
        assert result.returncode == 1
        for reason in reasons:
            assert reason in result.stderr
        self._untouched(server)

    def test_model_served_elsewhere(self, server: ServerProcess, name: str, tmp_path: Path) -> None:
        result = deploy(server, write(tmp_path, "served", 3), name)
        assert result.returncode == 1
        assert "model 'served' is already served" in result.stderr
        assert call(server, "served", 1) == 1.0
        self._untouched(server)
        # The server's log says why, once (not again from the task that ran the deployment).
        logged = [line for line in server.output().splitlines() if "already served" in line]
        assert len(logged) == 1, logged
        assert f"deployment '{name}' refused" in logged[0]

    def test_too_large(self, server: ServerProcess, name: str, tmp_path: Path) -> None:
        write(tmp_path, "keep", 7)
        (tmp_path / "blob.bin").write_bytes(np.random.default_rng(0).bytes(100_000))
        result = deploy(server, tmp_path, name)
        assert result.returncode == 1
        assert "deployment archive too large" in result.stderr
        assert "--deploy-max-bytes" in result.stderr
        self._untouched(server)

    def test_corrupt_archive(self, server: ServerProcess, name: str) -> None:
        answer = post_archive(server, name, b"\x1f\x8b\x08\x00 this is no archive")
        assert answer.status_code == 400
        assert "corrupt archive" in answer.json()["error"]
        self._untouched(server)

    @pytest.mark.parametrize(
        ("member", "kind", "reason"),
        [
            ("../keep.py", tarfile.REGTYPE, "escapes the archive's folder"),
            ("/tmp/keep.py", tarfile.REGTYPE, "absolute path"),
            ("keep.py", tarfile.SYMTYPE, "is a link"),
        ],
    )
    def test_escaping_members(
        self, server: ServerProcess, name: str, member: str, kind: bytes, reason: str
    ) -> None:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            info = tarfile.TarInfo(member)
            info.type = kind
            content = SOURCE.format(name="keep", offset=9).encode()
            info.size = len(content) if kind == tarfile.REGTYPE else 0
            info.linkname = "/etc/passwd" if kind == tarfile.SYMTYPE else ""
            tar.addfile(info, io.BytesIO(content) if kind == tarfile.REGTYPE else None)
        answer = post_archive(server, name, buffer.getvalue())
        assert answer.status_code == 400
        assert reason in answer.json()["error"]
        self._untouched(server)


SLOW_WARMUP = """
import time
import numpy as np
from fnserve import Tensor, Warmup, WarmupInput, model

@model(inputs=[Tensor("X", "FP32", [1])], outputs=[Tensor("Y", "FP32", [1])],
       warmup=[Warmup("zeros", {"X": WarmupInput("FP32", [1])})])
def slow(X: np.ndarray) -> np.ndarray:
    if not X.any():
        time.sleep(2)  # the warmup
    return X + 40
"""


def test_a_client_hanging_up_does_not_stop_the_deployment(
    server: ServerProcess, tmp_path: Path
) -> None:
    (tmp_path / "slow.py").write_text(SLOW_WARMUP)
    archive = pack(tmp_path / "slow.py")
    with pytest.raises(httpx.TimeoutException):
        httpx.post(
            f"{server.http}/v2/deployments", params={"name": "slow"}, content=archive,
            headers={"Authorization": f"Bearer {ADMIN}"}, timeout=0.5,
        )  # fmt: skip
    wait_until(lambda: "slow: version 1 serves" in fnserve(server, "deployments").stdout,
               "the deployment finished")  # fmt: skip
    assert call(server, "slow") == 41.0
    result = deploy(server, write(tmp_path / "next", "slow", 50), "slow")
    assert result.returncode == 0, result.stderr
    assert call(server, "slow") == 51.0


def test_rollback_and_undeploy(server: ServerProcess, tmp_path: Path) -> None:
    for offset in (1, 2, 3):
        assert (
            deploy(server, write(tmp_path / str(offset), "rolled", offset), "rolled").returncode
            == 0
        )
    assert call(server, "rolled") == 4.0
    back = fnserve(server, "rollback", "rolled")
    assert back.returncode == 0, back.stderr
    assert "deployment 'rolled' version 2" in back.stdout
    assert call(server, "rolled") == 3.0
    assert fnserve(server, "rollback", "rolled", "--to", "1").returncode == 0
    assert call(server, "rolled") == 2.0
    missing = fnserve(server, "rollback", "rolled", "--to", "9")
    assert missing.returncode == 1
    assert "has no version 9" in missing.stderr
    gone = fnserve(server, "undeploy", "rolled")
    assert gone.returncode == 0, gone.stderr
    with pytest.raises(Exception, match="unknown model"):
        call(server, "rolled")
    again = fnserve(server, "undeploy", "rolled")
    assert again.returncode == 1
    assert "no deployment named 'rolled'" in again.stderr


def test_tokens(server: ServerProcess, tmp_path: Path) -> None:
    path = write(tmp_path, "guarded", 1)
    missing = fnserve(server, "deploy", path, token="")
    assert missing.returncode == 1
    assert "requires a bearer token" in missing.stderr
    wrong = fnserve(server, "deploy", path, token="not-the-token")
    assert wrong.returncode == 1
    assert "not valid" in wrong.stderr
    listing = httpx.get(f"{server.http}/v2/deployments", timeout=10)
    assert listing.status_code == 401
    assert fnserve(server, "deploy", path).returncode == 0
    assert call(server, "guarded") == 2.0


def test_deployments_come_back_after_a_restart(tmp_path: Path) -> None:
    # The state directory inside the served folder (`fnserve serve .`, the default state dir):
    # its hidden folder is not served twice.
    served = tmp_path / "served"
    state = served / ".fnserve-state"
    served.mkdir()
    (served / "served.py").write_text(SERVED)
    with _server(state, served) as first:
        for offset in (1, 2):
            assert (
                deploy(
                    first, write(tmp_path / str(offset), "lasting", offset), "lasting"
                ).returncode
                == 0
            )
        assert deploy(first, write(tmp_path / "other", "other", 50), "other").returncode == 0
        assert fnserve(first, "rollback", "lasting").returncode == 0
        first.stop()
    with _server(state, served) as second:
        assert call(second, "lasting") == 2.0  # the rolled-back version 1 serves
        assert call(second, "other") == 51.0
        listed = fnserve(second, "deployments")
        assert "lasting: version 1 serves" in listed.stdout
        assert "other: version 1 serves" in listed.stdout
        second.stop()
    # A record edited by hand into something unreadable: the server still starts, serves the
    # other deployments and says which record it skipped and why.
    (state / "deployments" / "other" / "deployment.json").write_text("{edited")
    with _server(state, served) as third:
        assert call(third, "lasting") == 2.0
        assert "record of deployment 'other'" in third.output()
        assert "other:" not in fnserve(third, "deployments").stdout
