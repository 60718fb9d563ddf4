"""Ask the server about the model under test: metadata, batching, and statistics counters.

The same questions over HTTP (urllib, stdlib) or gRPC (grpcio, the loadtest extra), so a
gRPC run needs no HTTP port. Works both in plain processes and under gevent's patching.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol
from urllib.parse import quote

from fnserve.bench.options import BenchError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from fnserve.bench.options import BenchOptions

_DURATIONS = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")


class ServerCounters(NamedTuple):
    """Cumulative statistics of one model (all versions summed), as Triton reports them."""

    inference_count: int = 0
    execution_count: int = 0
    success_count: int = 0
    success_ns: int = 0
    fail_count: int = 0
    fail_ns: int = 0
    queue_count: int = 0
    queue_ns: int = 0
    compute_input_count: int = 0
    compute_input_ns: int = 0
    compute_infer_count: int = 0
    compute_infer_ns: int = 0
    compute_output_count: int = 0
    compute_output_ns: int = 0

    @property
    def requests(self) -> int:
        """Requests the model finished, successful or not."""
        return self.success_count + self.fail_count

    def minus(self, earlier: ServerCounters) -> ServerCounters:
        """The change since `earlier`."""
        return ServerCounters(*(a - b for a, b in zip(self, earlier, strict=True)))

    @classmethod
    def from_json(cls, model_stats: Iterable[dict[str, Any]]) -> ServerCounters:
        """Sum the `model_stats` entries of the statistics extension's JSON."""
        total = [0] * len(cls._fields)
        for entry in model_stats:
            stats = entry.get("inference_stats", {})
            values = [int(entry.get("inference_count", 0)), int(entry.get("execution_count", 0))]
            for name in _DURATIONS:
                duration = stats.get(name, {})
                values += [int(duration.get("count", 0)), int(duration.get("ns", 0))]
            total = [t + v for t, v in zip(total, values, strict=True)]
        return cls(*total)


class ServerProbe(Protocol):
    """What the harness asks the server, over either protocol."""

    def metadata(self, model: str, version: str) -> dict[str, Any]:
        """KServe v2 model metadata in its JSON form (inputs with name, datatype, shape)."""

    def max_batch_size(self, model: str, version: str) -> int:
        """The model configuration's `max_batch_size` (0: no batch dimension)."""

    def counters(self, model: str, version: str) -> ServerCounters:
        """The model's statistics counters now."""


def probe_for(options: BenchOptions, timeout_s: float = 10.0) -> ServerProbe:
    """The probe that speaks the run's protocol."""
    if options.protocol == "grpc":
        return GrpcProbe(options.grpc_target, timeout_s)
    return HttpProbe(options.http_base, timeout_s)


class HttpProbe:
    """The KServe v2 REST endpoints, through urllib."""

    def __init__(self, base_url: str, timeout_s: float) -> None:
        self._base = base_url
        self._timeout_s = timeout_s

    def _get(self, model: str, version: str, suffix: str) -> Any:
        path = f"/v2/models/{quote(model, safe='')}"
        path += f"/versions/{quote(version, safe='')}" if version else ""
        url = f"{self._base}{path}{suffix}"
        try:
            with urllib.request.urlopen(url, timeout=self._timeout_s) as reply:
                return json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            raise BenchError(f"model '{model}': {_http_error(exc)} (GET {url})") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise BenchError(f"cannot reach the server at {self._base}: {reason}") from None

    def metadata(self, model: str, version: str) -> dict[str, Any]:
        result: dict[str, Any] = self._get(model, version, "")
        return result

    def max_batch_size(self, model: str, version: str) -> int:
        return int(self._get(model, version, "/config").get("max_batch_size", 0))

    def counters(self, model: str, version: str) -> ServerCounters:
        return ServerCounters.from_json(self._get(model, version, "/stats")["model_stats"])


def _http_error(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read())["error"])
    except (ValueError, KeyError, TypeError, OSError):
        return f"HTTP {exc.code} {exc.reason}"


class GrpcProbe:
    """`inference.GRPCInferenceService` unary calls through grpcio."""

    def __init__(self, target: str, timeout_s: float) -> None:
        import grpc  # type: ignore[import-untyped]  # loadtest extra; HTTP runs need none

        self._grpc = grpc
        self._target = target
        self._timeout_s = timeout_s
        self._channel = grpc.insecure_channel(target)

    def _call(self, method: str, request: Any, reply_type: Any) -> Any:
        call = self._channel.unary_unary(
            f"/inference.GRPCInferenceService/{method}",
            request_serializer=type(request).SerializeToString,
            response_deserializer=reply_type.FromString,
        )
        try:
            return call(request, timeout=self._timeout_s)
        except self._grpc.RpcError as exc:
            code, details = exc.code(), exc.details()
            if code == self._grpc.StatusCode.UNAVAILABLE:
                raise BenchError(f"cannot reach the server at {self._target}: {details}") from None
            raise BenchError(f"model '{request.name}': {details} ({code.name})") from None

    def metadata(self, model: str, version: str) -> dict[str, Any]:
        from fnserve.protocol import grpc_service_pb2 as pb

        reply = self._call(
            "ModelMetadata",
            pb.ModelMetadataRequest(name=model, version=version),
            pb.ModelMetadataResponse,
        )
        inputs = [
            {"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in reply.inputs
        ]
        return {"name": reply.name, "versions": list(reply.versions), "inputs": inputs}

    def max_batch_size(self, model: str, version: str) -> int:
        from fnserve.protocol import grpc_service_pb2 as pb

        reply = self._call(
            "ModelConfig",
            pb.ModelConfigRequest(name=model, version=version),
            pb.ModelConfigResponse,
        )
        return int(reply.config.max_batch_size)

    def counters(self, model: str, version: str) -> ServerCounters:
        from google.protobuf.json_format import MessageToDict

        from fnserve.protocol import grpc_service_pb2 as pb

        request = pb.ModelStatisticsRequest(name=model, version=version)
        reply = self._call("ModelStatistics", request, pb.ModelStatisticsResponse)
        as_json = MessageToDict(reply, preserving_proto_field_name=True)
        return ServerCounters.from_json(as_json.get("model_stats", []))
