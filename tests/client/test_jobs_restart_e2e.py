"""A `JobsClient.wait` outlives its server: the server process is killed (SIGKILL) while the
client long-polls, a new one starts on the same port and state directory, and the wait ends
with the job's stored result."""

from __future__ import annotations

import signal
import socket
import threading
from pathlib import Path

import numpy as np
import pytest

from fnserve.client import Job, JobsClient, JobsError, JobState
from tests.conftest import MODELS
from tests.serverproc import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_wait_rides_out_a_server_crash(tmp_path: Path) -> None:
    args = (MODELS, "--state-dir", tmp_path, "--http-port", str(_free_port()))
    outcome: list[Job | BaseException] = []
    with ServerProcess.start(*args) as first:
        client = JobsClient(first.http)
        # The sleeper's one instance is busy, so the second job waits in the queue.
        client.submit("sleeper", {"SECONDS": np.array([30.0], np.float32)})
        queued = client.submit("sleeper", {"SECONDS": np.array([0.2], np.float32)})

        def wait() -> None:
            try:
                outcome.append(client.wait(queued.id, timeout_s=100))
            except BaseException as exc:  # handed to the test thread
                outcome.append(exc)

        waiter = threading.Thread(target=wait)
        waiter.start()
        assert client.get(queued.id).state is JobState.QUEUED
        first.stop(signal.SIGKILL)
    with pytest.raises(JobsError) as excinfo:
        client.get(queued.id)  # nothing answers now
    assert excinfo.value.status == 0
    with ServerProcess.start(*args):
        waiter.join(100)
        assert not waiter.is_alive()
        (job,) = outcome
        assert isinstance(job, Job), job
        assert job.state is JobState.SUCCEEDED
        assert client.result(queued.id)["OUTPUT0"].tolist() == [np.float32(0.2)]
    client.close()


def test_wait_fails_fast_when_the_server_was_never_reached() -> None:
    with JobsClient(f"127.0.0.1:{_free_port()}") as client, pytest.raises(JobsError) as excinfo:
        client.wait("some-job", timeout_s=30)
    assert excinfo.value.status == 0
