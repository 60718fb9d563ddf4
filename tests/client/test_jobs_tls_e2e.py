"""The jobs client and `fnserve jobs` against a server that speaks mutual TLS (certificates
from `trustme`): a verified server and a client certificate serve; without one, a clear error."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
import trustme

from fnserve.client import JobsClient, JobsError, JobState, tls_context
from tests.client.jobserver import jobs_server

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]


class Pems(NamedTuple):
    ca: str
    client_cert: str
    client_key: str


class Served(NamedTuple):
    url: str
    pems: Pems


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    client = ca.issue_cert("client@fnserve.test")
    names = ("ca.pem", "cert.pem", "key.pem", "client.pem", "client-key.pem")
    ca_pem, cert, key, client_cert, client_key = (folder / name for name in names)
    ca.cert_pem.write_to_path(str(ca_pem))
    for blob in server.cert_chain_pems:
        blob.write_to_path(str(cert), append=True)
    server.private_key_pem.write_to_path(str(key))
    client.cert_chain_pems[0].write_to_path(str(client_cert))
    client.private_key_pem.write_to_path(str(client_key))
    tls = {"tls_cert": str(cert), "tls_key": str(key), "tls_client_ca": str(ca_pem)}
    with jobs_server(folder / "state", **tls) as running:
        url = f"https://{running.http_url}"
        yield Served(url, Pems(str(ca_pem), str(client_cert), str(client_key)))


def test_the_client_verifies_the_server_and_presents_its_certificate(served: Served) -> None:
    pems = served.pems
    context = tls_context(pems.ca, pems.client_cert, pems.client_key)
    with JobsClient(served.url, verify=context) as client:
        job = client.submit("identity", {"INPUT0": np.ones((1, 2), np.float32)})
        assert client.wait(job.id, 20).state is JobState.SUCCEEDED
        assert client.result(job.id)["OUTPUT0"].tolist() == [[1.0, 1.0]]
    with JobsClient(served.url, verify=pems.ca) as anonymous, pytest.raises(JobsError) as excinfo:
        anonymous.get(job.id)  # the server wants a client certificate
    assert excinfo.value.status == 0
    assert "cannot reach" in excinfo.value.message


def test_tls_files_that_cannot_be_used_are_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "empty.pem").write_text("")
    with pytest.raises(JobsError, match="cannot use the TLS files"):
        tls_context(str(tmp_path / "empty.pem"))


def test_the_cli_takes_the_same_files(served: Served) -> None:
    pems = served.pems
    env = {**os.environ, "FNSERVE_SERVER": served.url}
    command = [sys.executable, "-m", "fnserve", "jobs", "submit", "identity", "-q",
               "--input", "INPUT0=[[3]]", "--cacert", pems.ca]  # fmt: skip
    mutual = ["--cert", pems.client_cert, "--key", pems.client_key]
    done = subprocess.run([*command, *mutual], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    refused = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1
    assert "cannot reach" in refused.stderr
