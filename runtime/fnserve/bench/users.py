"""Locust users that load one KServe v2 model: HTTP JSON, HTTP binary tensors, and gRPC.

Each user is one closed loop (perf_analyzer's concurrency): it sends the next request as soon
as the previous answer arrived, and reports every request to Locust's statistics with its real
latency and failure. The model comes from options this module adds to Locust's command line:

    locust -f loadtest/locustfile.py KServeGrpcUser --host 127.0.0.1:8001 --model mlp

Importing this module needs Locust's gevent patching (importing Locust does it), so only the
load-generating processes import it; never the server, `fnserve bench`'s own process or tests.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from typing import Any, ClassVar

import grpc  # type: ignore[import-untyped]
import grpc.experimental.gevent  # type: ignore[import-untyped]
from locust import User, constant, events, task
from locust.contrib.fasthttp import FastHttpUser
from locust.env import Environment
from locust.exception import StopUser

from fnserve.bench.options import BenchError, BenchOptions, Protocol, parse_shapes
from fnserve.bench.payloads import GRPC_INFER_METHOD, HttpRequest
from fnserve.bench.workload import Workload, build_workload

# grpcio polls its completion queue in a native thread; under gevent that would block the hub.
grpc.experimental.gevent.init_gevent()

GRPC_TIMEOUT_S = 60.0
log = logging.getLogger(__name__)


class SentCounter:
    """Requests the users of this process started: the harness's side of the integrity check.

    Counted before sending, so a request cut off by a forced stop still counts as sent.
    """

    value: int = 0


SENT = SentCounter()


@events.init_command_line_parser.add_listener  # type: ignore[untyped-decorator]
def add_model_options(parser: Any, **_: Any) -> None:
    """The model under load, as Locust command-line (and web UI) options."""
    parser.add_argument("--model", default="", help="model name on the server (required)")
    parser.add_argument("--model-version", default="", help="model version ('' = latest)")
    parser.add_argument(
        "--input-data",
        default="random",
        help="random, zero, or a perf_analyzer --input-data JSON file",
    )
    parser.add_argument(
        "--shape", default="", help="input shapes without the batch dimension: 'A:1,2 B:3'"
    )
    parser.add_argument("--batch-size", type=int, default=1, help="rows per request")


_feeds: dict[BenchOptions, tuple[Workload, Callable[[], Any]]] = {}


def feed(user_class: type[User], environment: Environment) -> tuple[Workload, Callable[[], Any]]:
    """The process-wide workload of a user class, and its round-robin `next`.

    All users of a process share one order through the data, like perf_analyzer's threads.

    Raises:
        BenchError: no model or host given, or the model's workload cannot be built.
    """
    parsed = environment.parsed_options
    options = BenchOptions(
        model=getattr(parsed, "model", ""),
        url=(environment.host or user_class.host or "").removeprefix("grpc://"),
        protocol=user_class.protocol,  # type: ignore[attr-defined]
        model_version=getattr(parsed, "model_version", ""),
        input_data=getattr(parsed, "input_data", "random"),
        shapes=parse_shapes(getattr(parsed, "shape", "").split()),
        batch_size=getattr(parsed, "batch_size", 1),
        binary=user_class.binary,  # type: ignore[attr-defined]
    )
    if options not in _feeds:
        if not options.model or not options.url:
            raise BenchError("give the model with --model NAME and the server with --host")
        workload = build_workload(options)
        items = workload.grpc if options.protocol == "grpc" else workload.http
        _feeds[options] = (workload, itertools.cycle(items).__next__)
    return _feeds[options]


def _start(user: User) -> tuple[Workload, Callable[[], Any]]:
    try:
        return feed(type(user), user.environment)
    except BenchError as exc:
        log.error("%s cannot start: %s", type(user).__name__, exc)
        raise StopUser() from None


class KServeHttpJsonUser(FastHttpUser):
    """POSTs KServe v2 JSON requests to `/v2/models/{model}/infer` (`--host http://HOST:PORT`)."""

    wait_time = constant(0)
    protocol: ClassVar[Protocol] = "http"
    binary: ClassVar[bool] = False

    def on_start(self) -> None:
        workload, self._next = _start(self)
        self._path = workload.path

    @task
    def infer(self) -> None:
        request: HttpRequest = self._next()
        SENT.value += 1
        self.client.post(self._path, data=request.body, headers=request.headers)  # type: ignore[arg-type]


class KServeHttpBinaryUser(KServeHttpJsonUser):
    """Like the JSON user, with tensors in Triton's binary extension (as tritonclient sends)."""

    binary = True


class GrpcCallError(Exception):
    """A failed ModelInfer call, named by its status code (Locust groups failures by text)."""


class KServeGrpcUser(User):
    """Calls `inference.GRPCInferenceService/ModelInfer` (`--host HOST:PORT`).

    All users of a process share one channel (one HTTP/2 connection), as tritonclient's
    cached channels do; requests and replies stay serialized bytes, so the client does no
    protobuf work per request.
    """

    wait_time = constant(0)
    protocol: ClassVar[Protocol] = "grpc"
    binary: ClassVar[bool] = True

    def on_start(self) -> None:
        workload, self._next = _start(self)
        self._name = workload.label
        self._call = _infer_call((self.host or "").removeprefix("grpc://"))

    @task
    def infer(self) -> None:
        payload: bytes = self._next()
        SENT.value += 1
        start_time = time.time()
        started = time.perf_counter()
        error: Exception | None = None
        try:
            size = len(self._call(payload, timeout=GRPC_TIMEOUT_S))
        except grpc.RpcError as exc:
            error, size = GrpcCallError(f"{exc.code().name}: {exc.details()}"), 0
        self.environment.events.request.fire(
            request_type="grpc",
            name=self._name,
            start_time=start_time,
            response_time=(time.perf_counter() - started) * 1000,
            response_length=size,
            exception=error,
            context=self.context(),
            response=None,
            url=None,
        )


_calls: dict[str, Callable[..., bytes]] = {}


def _infer_call(target: str) -> Callable[..., bytes]:
    if target not in _calls:
        unlimited = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
        channel = grpc.insecure_channel(target, options=unlimited)
        _calls[target] = channel.unary_unary(GRPC_INFER_METHOD)  # no (de)serializers: bytes
    return _calls[target]


def user_class_for(protocol: Protocol, binary: bool) -> type[User]:
    """The user that speaks `protocol` (HTTP: binary tensors or JSON)."""
    if protocol == "grpc":
        return KServeGrpcUser
    return KServeHttpBinaryUser if binary else KServeHttpJsonUser
