"""TLS and mutual TLS on the HTTP and gRPC ports of a real `fnserve serve` process.

Certificates come from `trustme`: one CA signs the server's (127.0.0.1, localhost) and a
client's. Real clients talk to the server: tritonclient.http (HTTP/1.1, `ssl_options`),
httpx with HTTP/2 negotiated by ALPN, tritonclient.grpc (`root_certificates`, client key and
chain for mutual TLS).
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import h2.config
import h2.connection
import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import trustme
from geventhttpclient.response import HTTPConnectionClosed
from tritonclient.utils import InferenceServerException

from tests.conftest import MODELS
from tests.dos.attacks import GRPC_INFER, _goaway, _grpc_headers
from tests.serverproc import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

HEADER_TIMEOUT_S = 2
ENHANCE_YOUR_CALM = 0xB


class Pems(NamedTuple):
    ca: Path
    cert: Path
    key: Path
    client_cert: Path  # the client's chain and key, in one file (what httpx and grpc take)
    client_key: Path


@pytest.fixture(scope="module")
def pems(tmp_path_factory: pytest.TempPathFactory) -> Pems:
    folder = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("client@fnserve.test")
    paths = Pems(*(folder / n for n in ("ca.pem", "cert.pem", "key.pem", "cc.pem", "ck.pem")))
    ca.cert_pem.write_to_path(str(paths.ca))
    server.cert_chain_pems[0].write_to_path(str(paths.cert))
    for blob in server.cert_chain_pems[1:]:
        blob.write_to_path(str(paths.cert), append=True)
    server.private_key_pem.write_to_path(str(paths.key))
    client.cert_chain_pems[0].write_to_path(str(paths.client_cert))
    client.private_key_pem.write_to_path(str(paths.client_key))
    return paths


def _start(pems: Pems, *extra: str) -> ServerProcess:
    return ServerProcess.start(
        MODELS, "--tls-cert", str(pems.cert), "--tls-key", str(pems.key),
        "--header-timeout", str(HEADER_TIMEOUT_S), *extra,
    )  # fmt: skip


@pytest.fixture(scope="module")
def tls_server(pems: Pems) -> Iterator[ServerProcess]:
    with _start(pems) as server:
        yield server


@pytest.fixture(scope="module")
def mtls_server(pems: Pems) -> Iterator[ServerProcess]:
    with _start(pems, "--tls-client-ca", str(pems.ca)) as server:
        yield server


def _verify(pems: Pems, client: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pems.ca))
    if client:
        context.load_cert_chain(str(pems.client_cert), str(pems.client_key))
    return context


def _http_infer(server: ServerProcess, pems: Pems, client: bool = False) -> np.ndarray:
    options: dict[str, str] = {"ca_certs": str(pems.ca)}
    if client:
        options |= {"certfile": str(pems.client_cert), "keyfile": str(pems.client_key)}
    url = server.http.removeprefix("https://")
    with httpclient.InferenceServerClient(url, ssl=True, ssl_options=options) as triton:
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        tensor = httpclient.InferInput("INPUT0", [2, 3], "FP32")
        tensor.set_data_from_numpy(x)
        return triton.infer("identity", [tensor]).as_numpy("OUTPUT0")  # type: ignore[no-any-return]


def _grpc_infer(server: ServerProcess, pems: Pems, client: bool = False) -> np.ndarray:
    keys = {"private_key": str(pems.client_key), "certificate_chain": str(pems.client_cert)}
    triton = grpcclient.InferenceServerClient(
        server.grpc, ssl=True, root_certificates=str(pems.ca), **(keys if client else {})
    )
    try:
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        tensor = grpcclient.InferInput("INPUT0", [2, 3], "FP32")
        tensor.set_data_from_numpy(x)
        return triton.infer("identity", [tensor], client_timeout=10).as_numpy("OUTPUT0")  # type: ignore[no-any-return]
    finally:
        triton.close()


EXPECTED = np.arange(6, dtype=np.float32).reshape(2, 3)


class TestTls:
    def test_summary_shows_https_and_tls(self, tls_server: ServerProcess) -> None:
        assert tls_server.http.startswith("https://127.0.0.1:")
        output = tls_server.output()
        assert "h2, TLS)" in output
        assert "(inference.GRPCInferenceService, TLS)" in output
        assert "metrics  http://" in output

    def test_tritonclient_http_over_http1(self, tls_server: ServerProcess, pems: Pems) -> None:
        np.testing.assert_array_equal(_http_infer(tls_server, pems), EXPECTED)

    def test_httpx_negotiates_h2_by_alpn(self, tls_server: ServerProcess, pems: Pems) -> None:
        with httpx.Client(http2=True, verify=_verify(pems)) as client:
            answer = client.get(f"{tls_server.http}/v2/health/ready")
        assert answer.status_code == 200
        assert answer.http_version == "HTTP/2"

    def test_httpx_http1_over_tls(self, tls_server: ServerProcess, pems: Pems) -> None:
        answer = httpx.get(f"{tls_server.http}/v2/health/ready", verify=_verify(pems))
        assert answer.status_code == 200
        assert answer.http_version == "HTTP/1.1"

    def test_tritonclient_grpc(self, tls_server: ServerProcess, pems: Pems) -> None:
        np.testing.assert_array_equal(_grpc_infer(tls_server, pems), EXPECTED)

    def test_plaintext_clients_fail_and_the_server_keeps_serving(
        self, tls_server: ServerProcess, pems: Pems
    ) -> None:
        plain = tls_server.http.replace("https://", "http://")
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"{plain}/v2/health/ready", timeout=5)
        triton = grpcclient.InferenceServerClient(tls_server.grpc)
        with pytest.raises(InferenceServerException):
            triton.is_server_live(client_timeout=5)
        triton.close()
        with httpx.Client(http2=True, verify=_verify(pems)) as client:
            assert client.get(f"{tls_server.http}/v2/health/live").status_code == 200
        np.testing.assert_array_equal(_grpc_infer(tls_server, pems), EXPECTED)
        assert "Traceback" not in tls_server.output()

    @pytest.mark.parametrize("port", ["http_port", "grpc_port"])
    def test_a_silent_connection_is_closed_within_the_header_timeout(
        self, tls_server: ServerProcess, port: str
    ) -> None:
        start = time.monotonic()
        with socket.create_connection((tls_server.host, getattr(tls_server, port))) as sock:
            sock.settimeout(HEADER_TIMEOUT_S + 5)
            assert sock.recv(1024) == b""  # closed, without a byte of handshake from us
        assert time.monotonic() - start < HEADER_TIMEOUT_S + 2

    @pytest.mark.parametrize("port", ["http_port", "grpc_port"])
    def test_h2guard_cuts_a_rapid_reset_inside_tls(
        self, tls_server: ServerProcess, pems: Pems, port: str
    ) -> None:
        context = _verify(pems)
        context.set_alpn_protocols(["h2"])
        raw = socket.create_connection((tls_server.host, getattr(tls_server, port)), timeout=10)
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
            assert sock.selected_alpn_protocol() == "h2"
            conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
            conn.initiate_connection()
            headers = _grpc_headers(GRPC_INFER, "127.0.0.1")
            for stream_id in range(1, 2 * 100, 2):  # 100 HEADERS + RST_STREAM pairs
                conn.send_headers(stream_id, headers)
                conn.reset_stream(stream_id)
            try:
                sock.sendall(conn.data_to_send())
            except OSError:
                pass  # already cut
            event = _goaway(sock, conn, 5)
        assert event is not None
        assert event.error_code == ENHANCE_YOUR_CALM


class TestMutualTls:
    def test_summary_says_mutual_tls(self, mtls_server: ServerProcess) -> None:
        assert "(inference.GRPCInferenceService, mutual TLS)" in mtls_server.output()

    def test_with_a_client_certificate_both_ports_serve(
        self, mtls_server: ServerProcess, pems: Pems
    ) -> None:
        np.testing.assert_array_equal(_http_infer(mtls_server, pems, client=True), EXPECTED)
        np.testing.assert_array_equal(_grpc_infer(mtls_server, pems, client=True), EXPECTED)
        with httpx.Client(http2=True, verify=_verify(pems, client=True)) as client:
            answer = client.get(f"{mtls_server.http}/v2/health/ready")
        assert (answer.status_code, answer.http_version) == (200, "HTTP/2")

    def test_without_one_both_ports_refuse(self, mtls_server: ServerProcess, pems: Pems) -> None:
        with pytest.raises((httpx.HTTPError, ssl.SSLError)):
            httpx.get(f"{mtls_server.http}/v2/health/ready", verify=_verify(pems), timeout=5)
        with pytest.raises((OSError, HTTPConnectionClosed)):  # TLS 1.3: after the handshake
            _http_infer(mtls_server, pems)
        with pytest.raises(InferenceServerException):
            _grpc_infer(mtls_server, pems)
        # and it keeps serving the clients that have one
        np.testing.assert_array_equal(_grpc_infer(mtls_server, pems, client=True), EXPECTED)


def _refused_start(*args: str | Path) -> str:
    command = [sys.executable, "-m", "fnserve", "serve", str(MODELS), *map(str, args)]
    command += ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, result.stderr
    return errors[0]


class TestStartupErrors:
    def test_a_missing_certificate_names_the_flag(self, pems: Pems, tmp_path: Path) -> None:
        missing = tmp_path / "nope.pem"
        line = _refused_start("--tls-cert", missing, "--tls-key", pems.key)
        assert line == f"Error: cannot read --tls-cert '{missing}': no such file or directory"

    def test_a_key_that_does_not_match(self, pems: Pems, tmp_path: Path) -> None:
        other = tmp_path / "other.pem"
        trustme.CA().issue_cert("localhost").private_key_pem.write_to_path(str(other))
        line = _refused_start("--tls-cert", pems.cert, "--tls-key", other)
        assert line == f"Error: --tls-key '{other}' does not match --tls-cert '{pems.cert}'"

    def test_a_certificate_without_a_key(self, pems: Pems) -> None:
        line = _refused_start("--tls-cert", pems.cert)
        assert "--tls-cert and --tls-key" in line

    def test_a_client_ca_that_is_not_a_certificate(self, pems: Pems) -> None:
        line = _refused_start(
            "--tls-cert", pems.cert, "--tls-key", pems.key, "--tls-client-ca", pems.key
        )
        assert f"--tls-client-ca '{pems.key}' holds no PEM certificate" in line
