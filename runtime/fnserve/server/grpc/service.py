"""grpclib services: `inference.GRPCInferenceService` (every Triton RPC) and `grpc.health.v1`;
`fnserve.jobs.v1.Jobs` lives in `jobs.py`.

Handlers only translate: messages in, `Runtime` calls, messages out. Errors become gRPC status
codes through the one table in `errors.py`; the shared-memory, trace and log RPCs answer
UNIMPLEMENTED naming the RPC. Pass `grpc_services(runtime, config)` to `grpclib.server.Server`.
"""

# ruff: noqa: N802  (RPC method names are fixed by the .proto service definitions)

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from fnserve.config.server import ServerConfig
from fnserve.errors import InvalidInputError, UnavailableError, UnsupportedError
from fnserve.limits import DEFAULT_LIMITS, InputLimits, check_model, quote
from fnserve.protocol import grpc_service_pb2 as pb, health_pb2
from fnserve.server.grpc import messages
from fnserve.server.grpc.codec import check_target, decode_request, encode_response
from fnserve.server.grpc.errors import to_grpc_error
from fnserve.server.grpc.jobs import JobsService
from fnserve.server.grpc.receive import answer as _answer, receive
from fnserve.server.grpc.reply import check_reply_size, send_unary
from fnserve.server.grpc.stream import StreamLimits, serve_stream
from fnserve.server.grpc.stubs.grpc_service_grpc import GRPCInferenceServiceBase
from fnserve.server.grpc.stubs.health_grpc import HealthBase

if TYPE_CHECKING:
    from grpclib.server import Stream

    from fnserve.jobs.service import JobService
    from fnserve.runtime import Runtime

_SERVING = health_pb2.HealthCheckResponse.SERVING
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
# Load parameters that would replace the model's files; fnserve loads from its definitions only.
_OVERRIDE_PARAMETER = "config"
_FILE_PARAMETER_PREFIX = "file:"


def _unimplemented(rpc: str) -> GRPCError:
    return GRPCError(Status.UNIMPLEMENTED, f"{rpc} is not supported by fnserve")


class InferenceService(GRPCInferenceServiceBase):
    """Every RPC of Triton's `inference.GRPCInferenceService`, served by one Runtime.

    Args:
        runtime: the models to serve.
        limits: names and sizes one request may use.
        max_message_bytes: largest message received or sent.
        stream_max_inflight: requests of one ModelStreamInfer stream running at once.
        repository_refusal: why repository loads and unloads are refused ("": they are not;
            see `ServerConfig.repository_api_refusal`).
    """

    def __init__(
        self,
        runtime: Runtime,
        limits: InputLimits = DEFAULT_LIMITS,
        max_message_bytes: int = ServerConfig.grpc_max_message_bytes,
        stream_max_inflight: int = ServerConfig.stream_max_inflight,
        repository_refusal: str = "",
    ) -> None:
        self._runtime = runtime
        self._limits = limits
        self._max_bytes = max_message_bytes
        self._stream_max_inflight = stream_max_inflight
        self._repository_refusal = repository_refusal

    def _version(self, request: Any) -> str:
        """The request's version, once its model name and version pass the limits."""
        return check_target(request.name, request.version, self._limits)

    # -- health and metadata -------------------------------------------------------------

    async def ServerLive(self, stream: Stream[pb.ServerLiveRequest, pb.ServerLiveResponse]) -> None:
        await _answer(stream, self._server_live, self._max_bytes)

    async def _server_live(self, _: pb.ServerLiveRequest) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=self._runtime.is_live())

    async def ServerReady(
        self, stream: Stream[pb.ServerReadyRequest, pb.ServerReadyResponse]
    ) -> None:
        await _answer(stream, self._server_ready, self._max_bytes)

    async def _server_ready(self, _: pb.ServerReadyRequest) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self._runtime.is_ready())

    async def ModelReady(self, stream: Stream[pb.ModelReadyRequest, pb.ModelReadyResponse]) -> None:
        await _answer(stream, self._model_ready, self._max_bytes)

    async def _model_ready(self, request: pb.ModelReadyRequest) -> pb.ModelReadyResponse:
        # An unknown model is "not ready", not an error (Triton answers OK, ready=false).
        ready = self._runtime.model_ready(request.name, self._version(request))
        return pb.ModelReadyResponse(ready=ready)

    async def ServerMetadata(
        self, stream: Stream[pb.ServerMetadataRequest, pb.ServerMetadataResponse]
    ) -> None:
        await _answer(stream, self._server_metadata, self._max_bytes)

    async def _server_metadata(self, _: pb.ServerMetadataRequest) -> pb.ServerMetadataResponse:
        return messages.server_metadata(self._runtime.server_metadata())

    async def ModelMetadata(
        self, stream: Stream[pb.ModelMetadataRequest, pb.ModelMetadataResponse]
    ) -> None:
        await _answer(stream, self._model_metadata, self._max_bytes)

    async def _model_metadata(self, request: pb.ModelMetadataRequest) -> pb.ModelMetadataResponse:
        return messages.model_metadata(
            self._runtime.model_metadata(request.name, self._version(request))
        )

    async def ModelConfig(
        self, stream: Stream[pb.ModelConfigRequest, pb.ModelConfigResponse]
    ) -> None:
        await _answer(stream, self._model_config, self._max_bytes)

    async def _model_config(self, request: pb.ModelConfigRequest) -> pb.ModelConfigResponse:
        return messages.model_config(
            self._runtime.reported_config(request.name, self._version(request))
        )

    async def ModelStatistics(
        self, stream: Stream[pb.ModelStatisticsRequest, pb.ModelStatisticsResponse]
    ) -> None:
        await _answer(stream, self._model_statistics, self._max_bytes)

    async def _model_statistics(
        self, request: pb.ModelStatisticsRequest
    ) -> pb.ModelStatisticsResponse:
        return messages.statistics(self._runtime.statistics(request.name, self._version(request)))

    # -- inference -----------------------------------------------------------------------

    async def ModelInfer(self, stream: Stream[pb.ModelInferRequest, pb.ModelInferResponse]) -> None:
        # The hot path: written out rather than through _answer, and replied in one write.
        try:
            msg = await receive(stream, self._max_bytes)
            if msg is None:
                raise InvalidInputError("the request message is missing")
            request = decode_request(msg, self._limits)
            parts = encode_response(await self._runtime.infer(request))
            check_reply_size(parts, self._max_bytes)
        except Exception as exc:
            raise to_grpc_error(exc) from None
        await send_unary(stream, parts, pb.ModelInferResponse)

    async def ModelStreamInfer(
        self, stream: Stream[pb.ModelInferRequest, pb.ModelStreamInferResponse]
    ) -> None:
        limits = StreamLimits(self._limits, self._max_bytes, self._stream_max_inflight)
        await serve_stream(self._runtime, stream, limits)

    # -- model repository ----------------------------------------------------------------

    async def RepositoryIndex(
        self, stream: Stream[pb.RepositoryIndexRequest, pb.RepositoryIndexResponse]
    ) -> None:
        await _answer(stream, self._repository_index, self._max_bytes)

    async def _repository_index(
        self, request: pb.RepositoryIndexRequest
    ) -> pb.RepositoryIndexResponse:
        return messages.repository_index(self._runtime.repository_index(ready=request.ready))

    async def RepositoryModelLoad(
        self, stream: Stream[pb.RepositoryModelLoadRequest, pb.RepositoryModelLoadResponse]
    ) -> None:
        await _answer(stream, self._load, self._max_bytes)

    async def _load(self, request: pb.RepositoryModelLoadRequest) -> pb.RepositoryModelLoadResponse:
        if self._repository_refusal:  # Triton's none and poll modes
            raise UnavailableError(self._repository_refusal)
        for key in request.parameters:
            if key == _OVERRIDE_PARAMETER or key.startswith(_FILE_PARAMETER_PREFIX):
                raise UnsupportedError(
                    f"load parameter {quote(key)} is not supported: fnserve loads models only from "
                    "their own definitions"
                )
        check_model(request.model_name, "", self._limits)
        await self._runtime.load_model(request.model_name)
        return pb.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(
        self, stream: Stream[pb.RepositoryModelUnloadRequest, pb.RepositoryModelUnloadResponse]
    ) -> None:
        await _answer(stream, self._unload, self._max_bytes)

    async def _unload(
        self, request: pb.RepositoryModelUnloadRequest
    ) -> pb.RepositoryModelUnloadResponse:
        if self._repository_refusal:
            raise UnavailableError(self._repository_refusal)
        params = request.parameters
        # tritonclient always sends this flag; indexing a missing key would insert it.
        dependents = "unload_dependents" in params and params["unload_dependents"].bool_param
        check_model(request.model_name, "", self._limits)
        await self._runtime.unload_model(request.model_name, unload_dependents=dependents)
        return pb.RepositoryModelUnloadResponse()

    # -- extensions fnserve does not offer ----------------------------------------------

    async def SystemSharedMemoryStatus(self, stream: Stream[Any, Any]) -> None:
        raise _unimplemented("SystemSharedMemoryStatus")

    async def SystemSharedMemoryRegister(self, stream: Stream[Any, Any]) -> None:
        raise _unimplemented("SystemSharedMemoryRegister")

    async def SystemSharedMemoryUnregister(self, stream: Stream[Any, Any]) -> None:
        raise _unimplemented("SystemSharedMemoryUnregister")

    async def CudaSharedMemoryStatus(self, stream: Stream[Any, Any]) -> None:
        raise _unimplemented("CudaSharedMemoryStatus")

    async def CudaSharedMemoryRegister(self, stream: Stream[Any, Any]) -> None:
        raise _unimplemented("CudaSharedMemoryRegister")

    async def CudaSharedMemoryUnregister(self, stream: Stream[Any, Any]) -> None:
        raise _unimplemented("CudaSharedMemoryUnregister")

    async def TraceSetting(self, stream: Stream[Any, Any]) -> None:
        raise _unimplemented("TraceSetting")

    async def LogSettings(self, stream: Stream[Any, Any]) -> None:
        raise _unimplemented("LogSettings")


class HealthService(HealthBase):
    """`grpc.health.v1.Health`: SERVING while the server is ready (Triton's rule).

    Args:
        runtime: whose readiness is reported.
        max_message_bytes: largest message received.
    """

    def __init__(
        self, runtime: Runtime, max_message_bytes: int = ServerConfig.grpc_max_message_bytes
    ) -> None:
        self._runtime = runtime
        self._max_bytes = max_message_bytes

    async def Check(
        self, stream: Stream[health_pb2.HealthCheckRequest, health_pb2.HealthCheckResponse]
    ) -> None:
        await _answer(stream, self._check, self._max_bytes)

    async def _check(self, _: health_pb2.HealthCheckRequest) -> health_pb2.HealthCheckResponse:
        status = _SERVING if self._runtime.is_ready() else _NOT_SERVING
        return health_pb2.HealthCheckResponse(status=status)

    async def Watch(self, stream: Stream[Any, Any]) -> None:
        raise _unimplemented("Health.Watch")


def grpc_services(
    runtime: Runtime, config: ServerConfig | None = None, jobs: JobService | None = None
) -> list[InferenceService | HealthService | JobsService]:
    """The services to pass to `grpclib.server.Server`.

    Args:
        runtime: the models to serve.
        config: server settings (the input limits are taken from it).
        jobs: the job service; None (`--no-jobs`): `fnserve.jobs.v1.Jobs` answers UNIMPLEMENTED.
    """
    config = config or ServerConfig()
    max_bytes = config.grpc_max_message_bytes
    limits = config.input_limits()
    inference = InferenceService(
        runtime, limits, max_bytes, config.stream_max_inflight, config.repository_api_refusal()
    )
    return [inference, HealthService(runtime, max_bytes), JobsService(jobs, limits, max_bytes)]
