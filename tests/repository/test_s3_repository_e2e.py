"""`fnserve serve s3://bucket/prefix` against a real S3-compatible server on loopback (moto in
server mode), found through the standard AWS environment variables: the repository is copied
to the local cache and served over HTTP and gRPC; in poll mode a version uploaded while
clients keep calling takes over without a failed request; a bad bucket, bad or missing
credentials and an unreachable endpoint stop the start with one clear line."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.repository.loadloop import LoadLoop, wait_until
from tests.repository.s3server import LoopbackS3
from tests.serverproc import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

CONFIG = """
backend: "python"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
dynamic_batching { }
"""
PLUS = """
import numpy as np
import triton_python_backend_utils as pb_utils

OFFSET = {offset}


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            y = pb_utils.Tensor("Y", (x + OFFSET).astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[y]))
        return responses
"""
DOUBLE = """
import numpy as np

from fnserve import Tensor, model


@model(inputs=[Tensor("X", "FP32", [-1])], outputs=[Tensor("Y", "FP32", [-1])])
def double(X: np.ndarray) -> np.ndarray:
    return X * 2
"""


@pytest.fixture(scope="module")
def s3() -> Iterator[LoopbackS3]:
    with LoopbackS3() as server:
        yield server


@pytest.fixture
def bucket(s3: LoopbackS3, request: pytest.FixtureRequest) -> str:
    """A fresh bucket holding a repository at `repo/`: `plus` (a python_backend model
    directory, version 1 adds 10) and `double.py` (an @model file)."""
    name = s3.bucket(request.node.name.replace("_", "-")[:60])
    s3.put(name, "repo/plus/config.pbtxt", CONFIG)
    s3.put(name, "repo/plus/1/model.py", PLUS.format(offset=10))
    s3.put(name, "repo/double.py", DOUBLE)
    return name


def _serve(s3: LoopbackS3, url: str, state: Path, *args: str) -> ServerProcess:
    return ServerProcess.start(url, "--state-dir", state, *args, env=s3.env())


def _refused(
    s3: LoopbackS3, url: str, state: Path, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run `fnserve serve URL ARGS` expecting it not to start; its outcome."""
    command = [sys.executable, "-m", "fnserve", "serve", url, *args, "--state-dir", str(state),
               "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]  # fmt: skip
    return subprocess.run(
        command, env=s3.env(**env), capture_output=True, text=True, timeout=60, check=False
    )


def _versions(server: ServerProcess, name: str) -> list[str]:
    rows = httpx.post(f"{server.http}/v2/repository/index", timeout=30).json()
    return [row["version"] for row in rows if row["name"] == name and row["state"] == "READY"]


def test_a_repository_in_s3_serves_over_http_and_grpc(
    s3: LoopbackS3, bucket: str, tmp_path: Path
) -> None:
    x = np.array([[1.0], [2.0]], np.float32)
    with _serve(s3, f"s3://{bucket}/repo", tmp_path / "state") as server:
        http = httpclient.InferenceServerClient(server.http.removeprefix("http://"))
        given = httpclient.InferInput("X", [2, 1], "FP32")
        given.set_data_from_numpy(x)
        assert http.infer("plus", [given]).as_numpy("Y").tolist() == [[11.0], [12.0]]
        assert http.get_model_config("plus")["backend"] == "python"
        grpc = grpcclient.InferenceServerClient(server.grpc)
        flat = grpcclient.InferInput("X", [2], "FP32")
        flat.set_data_from_numpy(x.ravel())
        assert grpc.infer("double", [flat]).as_numpy("Y").tolist() == [2.0, 4.0]
        assert grpc.is_model_ready("plus", "1")
        grpc.close()
        assert server.stop() == 0
    assert f"model repository s3://{bucket}/repo: 3 object(s), 3 changed" in server.output()


def test_a_restart_downloads_only_what_changed(s3: LoopbackS3, bucket: str, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    url = f"s3://{bucket}/repo"
    with _serve(s3, url, tmp_path / "state", "--model-cache", str(cache)) as server:
        assert server.stop() == 0
    manifest = json.loads(next(cache.glob("*/manifest.json")).read_text())
    assert manifest["url"] == url
    assert sorted(manifest["objects"]) == ["repo/double.py", "repo/plus/1/model.py",
                                           "repo/plus/config.pbtxt"]  # fmt: skip
    s3.put(bucket, "repo/plus/1/model.py", PLUS.format(offset=30))
    with _serve(s3, url, tmp_path / "state", "--model-cache", str(cache)) as server:
        answer = httpx.post(
            f"{server.http}/v2/models/plus/infer",
            json={"inputs": [{"name": "X", "datatype": "FP32", "shape": [1, 1], "data": [1]}]},
        )
        assert answer.json()["outputs"][0]["data"] == [31.0]
        assert server.stop() == 0
    assert "3 object(s), 1 changed" in server.output()
    assert not list(cache.glob("*/.partial/*"))  # no download left half-written


def test_a_version_uploaded_while_serving_takes_over_under_load(
    s3: LoopbackS3, bucket: str, tmp_path: Path
) -> None:
    url = f"s3://{bucket}/repo"
    args = ("--model-control-mode", "poll", "--repository-poll-secs", "0.5")
    with _serve(s3, url, tmp_path / "state", *args) as server:
        with LoadLoop(server, "plus", np.ones((1, 1))) as load:
            s3.put(bucket, "repo/plus/2/model.py", PLUS.format(offset=20))
            wait_until(lambda: load.latest() == 21.0, "version 2 answers")
            wait_until(lambda: _versions(server, "plus") == ["2"], "version 1 is gone")
            settled = len(load.seen)
            wait_until(lambda: len(load.seen) > settled + 30, "more answers come")
            assert load.seen[-30:] == [21.0] * 30
            s3.put(bucket, "repo/plus/2/model.py", PLUS.format(offset=30))  # edited in place
            wait_until(lambda: load.latest() == 31.0, "the edited version 2 answers")
        assert load.failures == []
        assert set(load.seen) == {11.0, 21.0, 31.0}
        s3.client.delete_object(Bucket=bucket, Key="repo/double.py")
        wait_until(lambda: not _versions(server, "double"), "double is unloaded")
        assert _versions(server, "plus") == ["2"]
        assert server.stop() == 0
    assert "reload: model 'plus' reloaded" in server.output()
    assert "reload: model 'double' unloaded" in server.output()


def test_a_missing_bucket_stops_the_start(s3: LoopbackS3, tmp_path: Path) -> None:
    # The endpoint given by flag this time (the environment names none).
    url = "s3://no-such-bucket/repo"
    outcome = _refused(s3, url, tmp_path, "--s3-endpoint-url", s3.endpoint, AWS_ENDPOINT_URL_S3="")
    assert outcome.returncode != 0
    assert "the bucket 'no-such-bucket' does not exist" in outcome.stderr
    assert "Traceback" not in outcome.stderr


def test_wrong_credentials_stop_the_start(s3: LoopbackS3, bucket: str, tmp_path: Path) -> None:
    s3.enforce_auth(True)
    try:
        outcome = _refused(s3, f"s3://{bucket}/repo", tmp_path, AWS_ACCESS_KEY_ID="AKIAWRONG")
    finally:
        s3.enforce_auth(False)
    assert outcome.returncode != 0
    assert f"listing bucket '{bucket}': access denied (InvalidAccessKeyId)" in outcome.stderr
    assert "Traceback" not in outcome.stderr


def test_no_credentials_stop_the_start(s3: LoopbackS3, bucket: str, tmp_path: Path) -> None:
    outcome = _refused(
        s3, f"s3://{bucket}/repo", tmp_path, AWS_ACCESS_KEY_ID="", AWS_SECRET_ACCESS_KEY=""
    )
    assert outcome.returncode != 0
    assert "no usable AWS credentials" in outcome.stderr


def test_an_unreachable_endpoint_stops_the_start(s3: LoopbackS3, tmp_path: Path) -> None:
    outcome = _refused(s3, "s3://models/repo", tmp_path, AWS_ENDPOINT_URL_S3="http://127.0.0.1:9")
    assert outcome.returncode != 0
    assert "cannot reach http://127.0.0.1:9" in outcome.stderr


def test_a_missing_boto3_names_the_install_line(tmp_path: Path) -> None:
    # boto3 is installed here: hide it from the server process the way a bare install lacks it.
    script = "import sys; sys.modules['boto3'] = None; from fnserve.cli import main; main()"
    outcome = subprocess.run(
        [sys.executable, "-c", script, "serve", "s3://models/repo", "--state-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert outcome.returncode != 0
    assert "needs boto3: pip install 'fnserve[s3]'" in outcome.stderr


def test_an_unsupported_url_scheme_is_refused(s3: LoopbackS3, tmp_path: Path) -> None:
    outcome = _refused(s3, "gs://models/repo", tmp_path)
    assert outcome.returncode != 0
    assert "'gs://models/repo' is not supported; expected s3://bucket/prefix" in outcome.stderr


def test_a_repository_load_reads_the_bucket_again(
    s3: LoopbackS3, bucket: str, tmp_path: Path
) -> None:
    # No poller in the default mode: the repository API's load syncs, as in Triton.
    with _serve(s3, f"s3://{bucket}/repo", tmp_path / "state") as server:
        s3.put(bucket, "repo/plus/2/model.py", PLUS.format(offset=20))
        s3.put(bucket, "repo/triple.py", DOUBLE.replace("double", "triple").replace("* 2", "* 3"))
        http = httpclient.InferenceServerClient(server.http.removeprefix("http://"))
        assert _versions(server, "plus") == ["1"]  # nothing polls
        http.load_model("plus")
        assert _versions(server, "plus") == ["2"]
        http.load_model("triple")
        given = httpclient.InferInput("X", [1], "FP32")
        given.set_data_from_numpy(np.array([2.0], np.float32))
        assert http.infer("triple", [given]).as_numpy("Y").tolist() == [6.0]
        assert server.stop() == 0


def test_an_empty_prefix_names_the_url(s3: LoopbackS3, bucket: str, tmp_path: Path) -> None:
    outcome = _refused(s3, f"s3://{bucket}/nothing-here", tmp_path)
    assert outcome.returncode != 0
    assert f"no model found in 's3://{bucket}/nothing-here'" in outcome.stderr


def test_watch_mode_watches_local_files_and_polls_the_bucket(
    s3: LoopbackS3, bucket: str, tmp_path: Path
) -> None:
    local = tmp_path / "local"
    local.mkdir()
    (local / "triple.py").write_text(DOUBLE.replace("double", "triple").replace("* 2", "* 3"))
    url = f"s3://{bucket}/repo"
    args = ("--watch", "--repository-poll-secs", "0.5")
    with _serve(s3, url, tmp_path / "state", str(local), *args) as server:
        s3.put(bucket, "repo/plus/2/model.py", PLUS.format(offset=20))
        wait_until(lambda: _versions(server, "plus") == ["2"], "version 2 of plus serves")
        (local / "triple.py").write_text(DOUBLE.replace("double", "triple").replace("* 2", "* 4"))
        http = httpclient.InferenceServerClient(server.http.removeprefix("http://"))
        given = httpclient.InferInput("X", [1], "FP32")
        given.set_data_from_numpy(np.array([1.0], np.float32))
        wait_until(
            lambda: http.infer("triple", [given]).as_numpy("Y").tolist() == [4.0],
            "the edited local file serves",
        )
        assert server.stop() == 0
    assert f"polling {url} every 0.5 s" in server.output()
    assert "watching 1 model path(s) for changes (native file events)" in server.output()
