"""`fnserve deploy` over TLS and mutual TLS (`--cacert`, `--cert`, `--key`), certificates made
by `trustme`; without the CA the CLI fails with the reason."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trustme

from tests.serverproc import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

MODEL = """
import numpy as np
from fnserve import Tensor, model

@model(inputs=[Tensor("X", "FP32", [1])], outputs=[Tensor("Y", "FP32", [1])])
def secure(X: np.ndarray) -> np.ndarray:
    return X * 5
"""


def _cli(server: ServerProcess, *args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FNSERVE_ADMIN_TOKEN": "tls-admin"}
    return subprocess.run(
        [sys.executable, "-m", "fnserve", *map(str, args), "--server", server.http],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip


def test_deploy_over_mutual_tls(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("deployer@example.com")
    files = {name: tmp_path / f"{name}.pem" for name in ("ca", "cert", "key", "ccert", "ckey")}
    ca.cert_pem.write_to_path(str(files["ca"]))
    cert.private_key_pem.write_to_path(str(files["key"]))
    cert.cert_chain_pems[0].write_to_path(str(files["cert"]))
    for blob in cert.cert_chain_pems[1:]:
        blob.write_to_path(str(files["cert"]), append=True)
    client.private_key_pem.write_to_path(str(files["ckey"]))
    client.cert_chain_pems[0].write_to_path(str(files["ccert"]))
    (tmp_path / "secure.py").write_text(MODEL)
    with ServerProcess.start(
        "--allow-empty", "--state-dir", tmp_path / "state", "--admin-token", "tls-admin",
        "--tls-cert", files["cert"], "--tls-key", files["key"], "--tls-client-ca", files["ca"],
    ) as server:  # fmt: skip
        assert server.http.startswith("https://")
        untrusted = _cli(server, "deploy", tmp_path / "secure.py")
        assert untrusted.returncode == 1
        assert "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr
        tls = ("--cacert", files["ca"], "--cert", files["ccert"], "--key", files["ckey"])
        done = _cli(server, "deploy", tmp_path / "secure.py", *tls)
        assert done.returncode == 0, done.stderr
        assert "deployment 'secure' version 1" in done.stdout
        listed = _cli(server, "deployments", *tls)
        assert "secure: version 1 serves" in listed.stdout
        context = ssl.create_default_context(cafile=str(files["ca"]))
        context.load_cert_chain(str(files["ccert"]), str(files["ckey"]))
        body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [2.0]}]}
        answer = httpx.post(
            f"{server.http}/v2/models/secure/infer", json=body, verify=context, timeout=30
        )
        assert answer.json()["outputs"][0]["data"] == [10.0]
