"""Connection-level limits, replayed against a real `fnserve serve` process.

Slow or silent clients, too many connections, oversized heads, HTTP/2 floods, oversized or
lying gRPC messages and streams whose client never reads: each gets a clean refusal while
health checks keep answering quickly and the process stays within a stated memory bound.
Attacks that cost the client CPU run in a spawned process (`attacks.py`), so the attacker's
work is never measured as server latency.
"""

from __future__ import annotations

import gc
import multiprocessing
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.conftest import MODELS
from tests.dos import attacks
from tests.serverproc import HealthProbe, ServerProcess

pytestmark = pytest.mark.timeout(120)

HEALTH_WORST_MS = 50
ENHANCE_YOUR_CALM = 0xB
RSS_SLACK_MB = 100  # past the idle process, for any attack here


@pytest.fixture(scope="module")
def attacker() -> Iterator[ProcessPoolExecutor]:
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        pool.submit(time.sleep, 0).result()  # started before anything is measured
        yield pool


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with ServerProcess.start(
        MODELS, "--header-timeout", "2", "--grpc-max-message-bytes", str(4 << 20),
        "--stream-max-inflight", "8",
    ) as proc:  # fmt: skip
        assert httpx.get(proc.http + "/v2/health/ready").status_code == 200
        yield proc


class _Quiet:
    """Keep this process's garbage collector out of the health probe's timings."""

    def __enter__(self) -> None:
        gc.collect()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        gc.enable()


def _split(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def _recv_all(sock: socket.socket, timeout_s: float) -> bytes:
    sock.settimeout(timeout_s)
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except (TimeoutError, ConnectionResetError):
        pass
    return b"".join(chunks)


def test_half_open_connections_are_closed_by_the_header_timeout(server: ServerProcess) -> None:
    host, port = _split(server.http)
    fds_before = server.open_fds()
    sockets = attacks.half_open(host, port, 1000)
    try:
        with _Quiet(), HealthProbe(server) as probe:
            time.sleep(3.5)  # the 2 s header timeout, and then some
        answers = [_recv_all(s, 1.0) for s in sockets]
    finally:
        for sock in sockets:
            sock.close()
    assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers), {a[:40] for a in answers}
    assert b"request head not received within 2 s" in answers[0]
    assert not probe.failures, probe.summary()
    assert probe.worst_ms < HEALTH_WORST_MS, probe.summary()
    assert server.open_fds() < fds_before + 50


def test_connection_cap_refuses_cleanly_on_http_and_grpc() -> None:
    # A header timeout longer than the test: the held connections, which never send a
    # request, must stay open (under 2 s of a slow machine the server would close them).
    with ServerProcess.start(MODELS, "--max-connections", "20", "--header-timeout", "60") as server:
        client = httpx.Client()
        assert client.get(server.http + "/v2/health/ready").status_code == 200  # 1 connection
        host, port = _split(server.http)
        fds = server.open_fds()
        held = [socket.create_connection((host, port)) for _ in range(19)]
        held_grpc = [socket.create_connection((host, server.grpc_port)) for _ in range(20)]
        try:
            deadline = time.monotonic() + 10  # until the server has accepted all of them
            while server.open_fds() < fds + 39 and time.monotonic() < deadline:
                time.sleep(0.05)
            refused = socket.create_connection((host, port))
            answer = _recv_all(refused, 5)
            assert answer.startswith(b"HTTP/1.1 503 "), answer[:80]
            assert b"limit of 20 connections" in answer
            # The server's side: a new gRPC connection gets GOAWAY (NO_ERROR) saying why.
            refused_h2 = attacks.goaway_on_connect(host, server.grpc_port, 5)
            assert refused_h2 is not None, "no GOAWAY within 5 s"
            assert refused_h2.error_code == 0
            assert b"limit of 20 connections" in (refused_h2.additional_data or b"")
            # A Triton client's call fails rather than hangs. Which status it reports is
            # grpc-core's timing: it retries a call never sent on a refused connection, with
            # backoff, and either gives up (UNAVAILABLE) or reaches the deadline first.
            triton = grpcclient.InferenceServerClient(server.grpc)
            started = time.monotonic()
            with pytest.raises(InferenceServerException) as caught:
                triton.is_server_live(client_timeout=5)
            status = str(caught.value.status())
            assert "UNAVAILABLE" in status or "DEADLINE_EXCEEDED" in status, caught.value
            assert time.monotonic() - started < 8
            # the connection made before the flood still serves: the port is not down
            assert client.get(server.http + "/v2/health/ready").status_code == 200
        finally:
            for sock in held + held_grpc:
                sock.close()
        time.sleep(0.3)
        assert grpcclient.InferenceServerClient(server.grpc).is_server_live()
        assert httpx.get(server.http + "/v2/health/ready").status_code == 200


def test_oversized_head_is_refused_with_431(server: ServerProcess) -> None:
    host, port = _split(server.http)
    with socket.create_connection((host, port)) as sock:
        sock.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nX-Big: ")
        try:
            for _ in range(64):  # up to 64 MiB; the server stops reading at 64 KiB
                sock.sendall(b"a" * (1 << 20))
        except OSError:
            pass
        answer = _recv_all(sock, 5)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:80]
    assert server.peak_rss_mb() < 300


def test_too_many_header_fields_and_long_url(server: ServerProcess) -> None:
    host, port = _split(server.http)
    with socket.create_connection((host, port)) as sock:
        fields = b"".join(b"X-%d: 1\r\n" % i for i in range(200))
        sock.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n" + fields + b"\r\n")
        assert _recv_all(sock, 5).startswith(b"HTTP/1.1 431 ")
    with socket.create_connection((host, port)) as sock:
        sock.sendall(b"GET /v2/" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _recv_all(sock, 5).startswith(b"HTTP/1.1 414 ")


@pytest.mark.parametrize("port_kind", ["h2c", "grpc"])
def test_rapid_reset_is_cut_off(
    server: ServerProcess, attacker: ProcessPoolExecutor, port_kind: str
) -> None:
    host = server.host
    port = server.http_port if port_kind == "h2c" else server.grpc_port
    idle_mb = server.rss_mb()
    with _Quiet(), HealthProbe(server) as probe:
        time.sleep(0.2)
        result = attacker.submit(
            attacks.rapid_reset, host, port, 100_000, attacks.GRPC_INFER
        ).result(timeout=60)
        time.sleep(0.5)  # the aftermath (closing the streams) counts too
    assert result["goaway"] == ENHANCE_YOUR_CALM, result
    assert result["sent"] < 100_000, result
    assert probe.worst_ms < HEALTH_WORST_MS, probe.summary()
    assert server.rss_mb() < idle_mb + RSS_SLACK_MB
    assert attacks.settings_ack_ok(host, port)  # the port still takes new connections


def test_ping_flood_is_cut_off(server: ServerProcess, attacker: ProcessPoolExecutor) -> None:
    result = attacker.submit(attacks.ping_flood, server.host, server.grpc_port, 20_000).result(60)
    assert result["goaway"] == ENHANCE_YOUR_CALM, result


def test_grpc_message_over_the_limit_is_resource_exhausted(server: ServerProcess) -> None:
    idle_mb = server.rss_mb()
    client = grpcclient.InferenceServerClient(server.grpc)
    data = np.zeros((1, 8 << 20), dtype=np.float32)  # 32 MiB against a 4 MiB limit
    tensor = grpcclient.InferInput("INPUT0", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    with pytest.raises(InferenceServerException) as caught:
        client.infer("identity", [tensor])
    assert caught.value.status() == "StatusCode.RESOURCE_EXHAUSTED", caught.value
    assert "larger than max" in caught.value.message()
    assert server.rss_mb() < idle_mb + RSS_SLACK_MB
    small = np.ones((1, 4), dtype=np.float32)  # and the server serves on
    tensor = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(small)
    assert client.infer("identity", [tensor]).as_numpy("OUTPUT0").tolist() == small.tolist()


@pytest.mark.parametrize(
    ("payload", "status"),
    [
        (b"\x00" + (1000).to_bytes(4, "big") + b"short", "3"),  # INVALID_ARGUMENT
        (b"\x00\x00", "3"),  # a prefix cut short
        (b"\x01" + (5).to_bytes(4, "big") + b"12345", "12"),  # compressed: UNIMPLEMENTED
        (b"\x07" + (5).to_bytes(4, "big") + b"12345", "3"),
    ],
)
def test_lying_grpc_prefixes_are_client_errors(
    server: ServerProcess, payload: bytes, status: str
) -> None:
    trailers = attacks.grpc_raw_message(server.host, server.grpc_port, payload)
    assert trailers.get("grpc-status") == status, trailers
    assert "Traceback" not in server.output()


def test_stream_client_that_never_reads_meets_backpressure(
    server: ServerProcess, attacker: ProcessPoolExecutor
) -> None:
    idle_mb = server.rss_mb()
    result = attacker.submit(
        attacks.stream_without_reading, server.host, server.grpc_port, "identity",
        256 << 10, 2000, 30,
    ).result(timeout=60)  # fmt: skip
    # 8 requests in flight + 4 MiB of window (16 requests) + what the kernel buffers: far
    # from the 2,000 (500 MiB of responses) a server without backpressure takes in.
    assert result["sent"] < 200, result
    assert server.rss_mb() < idle_mb + RSS_SLACK_MB
