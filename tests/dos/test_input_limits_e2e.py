"""Issue 13's bad inputs, replayed against a real `fnserve serve` process.

Each case must get a clean client error (4xx / a gRPC client status with a short message),
while health checks keep answering in under 50 ms and the process stays within a stated
memory bound. Before the limits, these froze the server for 23-74 s, answered 500, or peaked
at 3.4 GB.
"""

from __future__ import annotations

import asyncio
import gc
import gzip
import multiprocessing
import socket
import struct
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import httpx
import orjson
import pytest
from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from fnserve.protocol import grpc_service_pb2 as pb
from fnserve.server.grpc.stubs.grpc_service_grpc import GRPCInferenceServiceStub
from tests.conftest import MODELS
from tests.serverproc import HealthProbe, ServerProcess

pytestmark = pytest.mark.timeout(120)

HEALTH_WORST_MS = 50
GRPC_BIG_MESSAGE_MS = 1000
# Past the idle process, a request may cost a small multiple of its body but nothing
# proportional to its element count (3.4 GB for 60 MiB before). HTTP reads a body into one
# buffer (measured: +60 MB for 60 MiB); gRPC holds the frames, the joined message and the parsed
# message (measured: +180 MB), which is the transport's to bound.
RSS_BODY_FACTOR_HTTP = 2
RSS_BODY_FACTOR_GRPC = 4
RSS_SLACK_MB = 64
MESSAGE_CHARS = 400  # no error message may echo more than this much of a request

BIG_DIM = 1 << 62
HUGE_SHAPE = [BIG_DIM] * 100_000


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with ServerProcess.start(MODELS) as proc:
        # one good request of each kind first: first-use costs are not what is measured
        doc = _json_infer([{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1]}])
        for body, headers in ((doc, {}), (gzip.compress(doc), {"content-encoding": "gzip"})):
            status, content = post(proc.http + "/v2/models/identity/infer", body, headers)
            assert status == 200, content
        yield proc


@pytest.fixture(scope="module")
def idle_rss_mb(server: ServerProcess) -> float:
    httpx.get(f"{server.http}/v2/health/ready", timeout=10)
    return server.rss_mb()


@pytest.fixture(scope="module")
def attacker() -> Iterator[ProcessPoolExecutor]:
    """A separate client process: building and sending a big request in this process would
    hold the GIL that the health probe's thread needs, and be measured as server latency."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        pool.submit(_materialize, b"").result()  # started, this module imported there
        yield pool


Body = bytes | tuple[Callable[..., bytes], tuple[Any, ...]]


def _materialize(body: Body) -> bytes:
    if isinstance(body, bytes):
        return body
    build, args = body
    return build(*args)


def post(url: str, body: Body, headers: dict[str, str]) -> tuple[int, bytes]:
    """(In the attacker process.) POST `body`; its status and body."""
    with httpx.Client(timeout=60) as client:
        response = client.post(url, content=_materialize(body), headers=headers)
        return response.status_code, response.content


def grpc_call(
    host: str, port: int, rpc: str, request: Any, build: Callable[..., Any] | None = None
) -> tuple[int, str]:
    """(In the attacker process.) Call `rpc` with `request` (`_wire` form, or the arguments of
    `build`); the status and message it fails with."""
    if build is not None:
        request = build(*request)
    elif isinstance(request, tuple):
        kind, data = request
        request = getattr(pb, kind).FromString(data)

    async def call() -> tuple[int, str]:
        channel = Channel(host, port)
        try:
            await getattr(GRPCInferenceServiceStub(channel), rpc)(request, timeout=60)
        except GRPCError as exc:
            return exc.status.value, exc.message or ""
        finally:
            channel.close()
        return Status.OK.value, ""

    return asyncio.run(call())


def raw_http(host: str, port: int, request: Body) -> bytes:
    """(In the attacker process.) Send a raw request; the answer until close or 1 s idle."""
    with socket.create_connection((host, port), timeout=30) as sock:
        try:
            sock.sendall(_materialize(request))
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server answered and stopped reading before the end: read its answer
        sock.settimeout(1)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except (TimeoutError, ConnectionResetError):
            pass
    return b"".join(chunks)


def _wire(message: Any) -> tuple[str, bytes]:
    """A protobuf message in a form that pickles (the generated classes do not)."""
    return type(message).__name__, message.SerializeToString()


def _guarded(
    server: ServerProcess,
    attacker: ProcessPoolExecutor,
    action: Callable[..., Any],
    *args: Any,
    worst_ms: float = HEALTH_WORST_MS,
) -> Any:
    """Run `action(*args)` in the attacker process while health checks must stay fast."""
    # A full collection of pytest's heap in this process would hold the GIL the probe's
    # thread needs for tens of ms, and read as server latency; frozen objects are skipped.
    gc.collect()
    gc.freeze()
    try:
        with HealthProbe(server, interval_s=0.01) as probe:
            time.sleep(0.05)  # some checks before the attack
            result = attacker.submit(action, *args).result(timeout=100)
            time.sleep(0.1)  # and after it
    finally:
        gc.unfreeze()
    assert not probe.failures, probe.summary()
    assert probe.worst_ms < worst_ms, probe.summary()
    return result


def _post(server: ServerProcess, path: str, body: bytes, **headers: str) -> tuple[int, bytes]:
    return post(server.http + path, body, headers)


def _assert_client_error(response: tuple[int, bytes], status: int, fragment: str) -> None:
    code, content = response
    assert code == status, content[:500]
    message = orjson.loads(content)["error"]
    assert fragment in message
    assert len(message) < MESSAGE_CHARS


def _json_infer(inputs: list[dict[str, Any]]) -> bytes:
    return orjson.dumps({"inputs": inputs})


def _assert_grpc_error(error: tuple[int, str], status: Status, fragment: str) -> None:
    code, message = error
    assert code == status.value, error[1][:500]
    assert fragment in message
    assert len(message) < MESSAGE_CHARS


def _gzip_members(total: int) -> bytes:
    member = gzip.compress(b"")
    return member * (total // len(member))


def _one_byte_elements(count: int) -> bytes:
    return (struct.pack("<I", 1) + b"a") * count


def _bytes_request(model: str, count: int) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(name="INPUT0", datatype="BYTES", shape=[count])
    request.raw_input_contents.append(_one_byte_elements(count))
    return request


def _binary_bytes_body(count: int) -> bytes:
    size = 5 * count
    tensor: dict[str, object] = {"name": "INPUT0", "datatype": "BYTES", "shape": [count]}
    tensor["parameters"] = {"binary_data_size": size}
    header = orjson.dumps({"inputs": [tensor]})
    return b"%010d" % len(header) + header + _one_byte_elements(count)


def _split_binary(body: bytes) -> tuple[bytes, str]:
    return body[10:], str(int(body[:10]))


def test_many_member_gzip_is_refused_quickly(
    server: ServerProcess, attacker: ProcessPoolExecutor
) -> None:
    url = server.http + "/v2/models/identity/infer"
    start = time.perf_counter()
    body: Body = (_gzip_members, (10_000_000,))  # 10 MB of empty gzip members
    response = _guarded(server, attacker, post, url, body, {"content-encoding": "gzip"})
    assert time.perf_counter() - start < 5
    _assert_client_error(response, 400, "more than 64 gzip members")


def test_a_few_gzip_members_still_decode(server: ServerProcess) -> None:
    doc = _json_infer([{"name": "INPUT0", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}])
    body = gzip.compress(doc[:10]) + gzip.compress(b"") + gzip.compress(doc[10:])
    status, content = _post(
        server, "/v2/models/identity/infer", body, **{"content-encoding": "gzip"}
    )
    assert status == 200, content
    assert orjson.loads(content)["outputs"][0]["data"] == [1.0, 2.0]


def test_hundred_thousand_dims_json(server: ServerProcess, attacker: ProcessPoolExecutor) -> None:
    body = _json_infer([{"name": "INPUT0", "datatype": "FP32", "shape": HUGE_SHAPE, "data": []}])
    assert len(body) > 1_900_000
    url = server.http + "/v2/models/identity/infer"
    response = _guarded(server, attacker, post, url, body, {})
    _assert_client_error(response, 400, "100000 dims, more than the 64 allowed")


def _huge_shape_request(typed: bool) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="identity")
    tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=HUGE_SHAPE)
    if typed:
        tensor.contents.SetInParent()
    else:
        request.raw_input_contents.append(b"")
    return request


@pytest.mark.parametrize("typed", [False, True], ids=["raw", "typed"])
def test_hundred_thousand_dims_grpc(
    server: ServerProcess, attacker: ProcessPoolExecutor, typed: bool
) -> None:
    assert _huge_shape_request(typed).ByteSize() > 900_000
    error = _guarded(
        server,
        attacker,
        grpc_call,
        server.host,
        server.grpc_port,
        "ModelInfer",
        (typed,),
        _huge_shape_request,
    )
    _assert_grpc_error(error, Status.INVALID_ARGUMENT, "100000 dims, more than the 64 allowed")


def test_sixty_five_dims(server: ServerProcess) -> None:
    body = _json_infer([{"name": "INPUT0", "datatype": "FP32", "shape": [1] * 65, "data": [1]}])
    response = _post(server, "/v2/models/identity/infer", body)
    _assert_client_error(response, 400, "65 dims, more than the 64 allowed")


def test_sixty_five_dims_grpc(server: ServerProcess) -> None:
    request = pb.ModelInferRequest(model_name="identity", raw_input_contents=[b"\0\0\0\0"])
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1] * 65)
    error = grpc_call(server.host, server.grpc_port, "ModelInfer", request)
    _assert_grpc_error(error, Status.INVALID_ARGUMENT, "65 dims, more than the 64 allowed")


def test_product_past_int64_with_small_rank(server: ServerProcess) -> None:
    shape = [BIG_DIM, BIG_DIM, 0]  # zero elements, but numpy cannot represent it
    body = _json_infer([{"name": "INPUT0", "datatype": "FP32", "shape": shape, "data": []}])
    response = _post(server, "/v2/models/identity/infer", body)
    _assert_client_error(response, 400, "is larger than 9223372036854775807 bytes")


def test_dim_of_two_to_the_63_with_zero_size_json(server: ServerProcess) -> None:
    body = _json_infer([{"name": "INPUT0", "datatype": "FP32", "shape": [0, 1 << 63], "data": []}])
    response = _post(server, "/v2/models/identity/infer", body)
    _assert_client_error(response, 400, "non-negative integers below 2^63")


def test_negative_dim_with_zero_size_grpc(server: ServerProcess) -> None:
    request = pb.ModelInferRequest(model_name="identity", raw_input_contents=[b""])
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[0, -(1 << 63)])
    error = grpc_call(server.host, server.grpc_port, "ModelInfer", request)
    _assert_grpc_error(error, Status.INVALID_ARGUMENT, "non-negative integers below 2^63")


def test_megabyte_model_name_http(server: ServerProcess, attacker: ProcessPoolExecutor) -> None:
    # httpx refuses such a URL, so it goes over a raw socket
    body = _json_infer([{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1]}])
    path = b"/v2/models/" + b"m" * 1_000_000 + b"/infer"
    request = b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n%s" % (
        path,
        len(body),
        body,
    )
    answer = _guarded(server, attacker, raw_http, server.host, server.http_port, request)
    status = int(answer.split(b" ", 2)[1])
    assert 400 <= status < 500, answer[:300]
    assert len(answer) < 1000


def test_long_model_name_http_is_refused_by_the_codec(server: ServerProcess) -> None:
    name = "m" * 4000  # fits any URL limit, but not the name limit
    body = _json_infer([{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1]}])
    response = _post(server, f"/v2/models/{name}/infer", body)
    _assert_client_error(response, 400, "model name 'mmmm")
    answer = httpx.get(f"{server.http}/v2/models/{name}", timeout=10)
    _assert_client_error(
        (answer.status_code, answer.content), 400, "longer than the limit of 256 characters"
    )


@pytest.mark.parametrize("field", ["model_name", "model_version"])
def test_megabyte_model_name_or_version_grpc(
    server: ServerProcess, attacker: ProcessPoolExecutor, field: str
) -> None:
    request = pb.ModelInferRequest(model_name="identity", raw_input_contents=[b"\0\0\0\0"])
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1])
    setattr(request, field, "7" * 1_000_000)
    error = _guarded(
        server, attacker, grpc_call, server.host, server.grpc_port, "ModelInfer", _wire(request)
    )
    _assert_grpc_error(error, Status.INVALID_ARGUMENT, "longer than the limit of 256 characters")


def test_megabyte_model_name_grpc_metadata(
    server: ServerProcess, attacker: ProcessPoolExecutor
) -> None:
    request = pb.ModelMetadataRequest(name="m" * 1_000_000)
    error = _guarded(
        server, attacker, grpc_call, server.host, server.grpc_port, "ModelMetadata", _wire(request)
    )
    _assert_grpc_error(error, Status.INVALID_ARGUMENT, "model name 'mmm")


def test_sixty_mib_of_one_byte_bytes_elements_http(
    server: ServerProcess, attacker: ProcessPoolExecutor, idle_rss_mb: float
) -> None:
    count = 60 * 1024 * 1024 // 5
    response = _guarded(
        server, attacker, post_binary, server.http + "/v2/models/strings/infer", count
    )
    _assert_client_error(response, 413, "BYTES elements are more than the 1048576")
    assert server.peak_rss_mb() < idle_rss_mb + RSS_BODY_FACTOR_HTTP * 60 + RSS_SLACK_MB


def post_binary(url: str, count: int) -> tuple[int, bytes]:
    """(In the attacker process.) A binary-tensor request of `count` 1-byte BYTES elements."""
    body, header_length = _split_binary(_binary_bytes_body(count))
    return post(url, body, {"inference-header-content-length": header_length})


def test_sixty_mib_of_one_byte_bytes_elements_grpc(
    server: ServerProcess, attacker: ProcessPoolExecutor, idle_rss_mb: float
) -> None:
    count = 60 * 1024 * 1024 // 5
    # Receiving a 60 MiB gRPC message stalls the loop ~150 ms on its own (grpclib/h2 framing,
    # the transport slice's concern: the same happens for a message refused for any reason),
    # so the bound here is looser; what this case checks is the memory, 3.4 GB before.
    error = _guarded(
        server,
        attacker,
        grpc_call,
        server.host,
        server.grpc_port,
        "ModelInfer",
        ("strings", count),
        _bytes_request,
        worst_ms=GRPC_BIG_MESSAGE_MS,
    )
    _assert_grpc_error(error, Status.RESOURCE_EXHAUSTED, "BYTES elements are more than")
    assert server.peak_rss_mb() < idle_rss_mb + RSS_BODY_FACTOR_GRPC * 60 + RSS_SLACK_MB


def test_bytes_under_the_cap_still_work(server: ServerProcess) -> None:
    body = _json_infer(
        [{"name": "INPUT0", "datatype": "BYTES", "shape": [3], "data": ["a", "b", "c"]}]
    )
    status, content = _post(server, "/v2/models/strings/infer", body)
    assert status == 200, content
    assert orjson.loads(content)["outputs"][0]["data"] == ["a", "b", "c"]


def test_jagged_json_is_refused(server: ServerProcess) -> None:
    data = [[1, 2], [3]]
    body = _json_infer([{"name": "INPUT0", "datatype": "FP32", "shape": [1, 3], "data": data}])
    response = _post(server, "/v2/models/identity/infer", body)
    _assert_client_error(response, 400, "jagged")


def test_jagged_bytes_json_is_refused(server: ServerProcess) -> None:
    data = [["a", "b"], ["c"]]
    body = _json_infer([{"name": "INPUT0", "datatype": "BYTES", "shape": [3], "data": data}])
    response = _post(server, "/v2/models/strings/infer", body)
    _assert_client_error(response, 400, "jagged")


def test_server_log_has_no_traceback(server: ServerProcess) -> None:
    httpx.get(f"{server.http}/v2/health/ready", timeout=10)
    assert "Traceback" not in server.output()
