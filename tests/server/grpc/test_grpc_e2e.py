"""The gRPC frontend end to end: real tritonclient.grpc (sync and aio) against a real server."""

from __future__ import annotations

import queue
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc  # type: ignore[import-untyped]  # as in fnserve.bench: grpcio has no stubs here
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from google.protobuf import json_format
from tritonclient.utils import InferenceServerException

from fnserve.protocol import health_pb2
from fnserve.server.grpc import messages
from fnserve.server.http import documents
from tests.conftest import RunningServer

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def client(server: RunningServer) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(server.grpc_url) as c:
        yield c


def _input(name: str, array: np.ndarray, datatype: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def _fp32(rows: int = 1, cols: int = 16) -> np.ndarray:
    return np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)


def _status(excinfo: pytest.ExceptionInfo[InferenceServerException]) -> str:
    return str(excinfo.value.status())


class TestHealthAndMetadata:
    def test_server_is_live_and_ready(self, client: grpcclient.InferenceServerClient) -> None:
        assert client.is_server_live()
        assert client.is_server_ready()

    def test_model_readiness(self, client: grpcclient.InferenceServerClient) -> None:
        assert client.is_model_ready("identity")
        assert client.is_model_ready("identity", "1")
        assert not client.is_model_ready("identity", "7")
        assert not client.is_model_ready("no_such_model")  # OK with ready=false, no error
        assert not client.is_model_ready("gpu_only")

    def test_non_integer_version_is_invalid(self, client: grpcclient.InferenceServerClient) -> None:
        with pytest.raises(InferenceServerException) as excinfo:
            client.is_model_ready("identity", "latest")
        assert _status(excinfo) == "StatusCode.INVALID_ARGUMENT"

    def test_server_metadata(self, client: grpcclient.InferenceServerClient) -> None:
        metadata = client.get_server_metadata()
        assert metadata.name == "fnserve"
        assert "model_repository" in metadata.extensions

    def test_model_metadata_shapes_include_batch_dimension(
        self, client: grpcclient.InferenceServerClient
    ) -> None:
        identity = client.get_model_metadata("identity")
        assert (identity.name, list(identity.versions)) == ("identity", ["1"])
        assert [(t.name, t.datatype, list(t.shape)) for t in identity.inputs] == [
            ("INPUT0", "FP32", [-1, -1])
        ]
        add_sub = client.get_model_metadata("add_sub")
        assert [list(t.shape) for t in add_sub.outputs] == [[-1, 16], [-1, 16]]
        assert list(client.get_model_metadata("strings").inputs[0].shape) == [-1]

    def test_model_config(self, client: grpcclient.InferenceServerClient) -> None:
        config = client.get_model_config("add_sub").config
        assert (config.name, config.max_batch_size, config.backend) == ("add_sub", 8, "python")
        assert [(t.name, list(t.dims)) for t in config.input] == [
            ("INPUT0", [16]),
            ("INPUT1", [16]),
        ]
        assert config.input[0].data_type == 11  # TYPE_FP32
        assert config.WhichOneof("scheduling_choice") == "dynamic_batching"

    def test_model_config_matches_the_json_form(
        self, server: RunningServer, client: grpcclient.InferenceServerClient
    ) -> None:
        doc = client.get_model_config("Scaler", as_json=True)["config"]
        expected = server.runtime.model_config("Scaler").to_json()
        assert doc["parameters"] == {"factor": {"string_value": "3"}}
        assert doc["instance_group"][0]["count"] == expected["instance_group"][0]["count"]
        assert doc["instance_group"][0]["kind"] == "KIND_CPU"

    def test_http_documents_and_grpc_messages_agree(self, server: RunningServer) -> None:
        # Both frontends render the core's records; parsing HTTP's JSON strictly into the
        # proto must give exactly gRPC's message (no key drifts, nothing lost either way).
        runtime = server.runtime
        pairs: list[tuple[dict[str, Any], Any]] = [
            (
                documents.server_metadata(runtime.server_metadata()),
                messages.server_metadata(runtime.server_metadata()),
            ),
            (
                documents.statistics(runtime.statistics()),
                messages.statistics(runtime.statistics()),
            ),
        ]
        for entry in runtime.repository_index(ready=True):  # others: 404 / 503
            metadata = runtime.model_metadata(entry.name)
            pairs.append((documents.model_metadata(metadata), messages.model_metadata(metadata)))
            config = runtime.reported_config(entry.name)
            pairs.append((config.to_json(), messages.model_config(config).config))
        for doc, message in pairs:
            assert json_format.ParseDict(doc, type(message)()) == message

    @pytest.mark.parametrize("call", ["get_model_metadata", "get_model_config"])
    def test_unknown_model_is_not_found(
        self, client: grpcclient.InferenceServerClient, call: str
    ) -> None:
        with pytest.raises(InferenceServerException) as excinfo:
            getattr(client, call)("no_such_model")
        assert _status(excinfo) == "StatusCode.NOT_FOUND"

    def test_health_check(self, server: RunningServer) -> None:
        with grpc.insecure_channel(server.grpc_url) as channel:
            check = channel.unary_unary(
                "/grpc.health.v1.Health/Check",
                request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
                response_deserializer=health_pb2.HealthCheckResponse.FromString,
            )
            reply = check(health_pb2.HealthCheckRequest(), timeout=10)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
            watch = channel.unary_stream(
                "/grpc.health.v1.Health/Watch",
                request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
                response_deserializer=health_pb2.HealthCheckResponse.FromString,
            )
            with pytest.raises(grpc.RpcError) as excinfo:
                list(watch(health_pb2.HealthCheckRequest(), timeout=10))
        assert excinfo.value.code() == grpc.StatusCode.UNIMPLEMENTED

    def test_malformed_message_is_invalid_argument(self, server: RunningServer) -> None:
        with grpc.insecure_channel(server.grpc_url) as channel:
            infer = channel.unary_unary(
                "/inference.GRPCInferenceService/ModelInfer",
                request_serializer=lambda _: b"\xff\xff\xff\xff",
                response_deserializer=bytes,
            )
            with pytest.raises(grpc.RpcError) as excinfo:
                infer(None, timeout=10)
        assert excinfo.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    @pytest.mark.parametrize(
        ("call", "rpc"),
        [
            ("get_system_shared_memory_status", "SystemSharedMemoryStatus"),
            ("get_cuda_shared_memory_status", "CudaSharedMemoryStatus"),
            ("get_trace_settings", "TraceSetting"),
            ("get_log_settings", "LogSettings"),
        ],
    )
    def test_unoffered_extensions_are_unimplemented(
        self, client: grpcclient.InferenceServerClient, call: str, rpc: str
    ) -> None:
        with pytest.raises(InferenceServerException) as excinfo:
            getattr(client, call)()
        assert _status(excinfo) == "StatusCode.UNIMPLEMENTED"
        assert rpc in excinfo.value.message()


class TestInfer:
    def test_fp32_identity_echoes_data_and_request_id(
        self, client: grpcclient.InferenceServerClient
    ) -> None:
        data = _fp32(3)
        result = client.infer("identity", [_input("INPUT0", data, "FP32")], request_id="req-1")
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
        response = result.get_response()
        assert (response.id, response.model_name, response.model_version) == (
            "req-1",
            "identity",
            "1",
        )

    def test_two_outputs_and_a_requested_subset(
        self, client: grpcclient.InferenceServerClient
    ) -> None:
        a, b = _fp32(2), np.ones((2, 16), np.float32)
        inputs = [_input("INPUT0", a, "FP32"), _input("INPUT1", b, "FP32")]
        both = client.infer("add_sub", inputs)
        np.testing.assert_array_equal(both.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(both.as_numpy("OUTPUT1"), a - b)
        only = client.infer("add_sub", inputs, outputs=[grpcclient.InferRequestedOutput("OUTPUT1")])
        assert [o.name for o in only.get_response().outputs] == ["OUTPUT1"]
        assert only.as_numpy("OUTPUT0") is None
        np.testing.assert_array_equal(only.as_numpy("OUTPUT1"), a - b)

    def test_bytes_with_empty_nul_and_non_utf8_elements(
        self, client: grpcclient.InferenceServerClient
    ) -> None:
        items = np.array([b"", b"a\x00b", b"\xff\xfe", "é".encode()], dtype=object)
        result = client.infer("strings", [_input("INPUT0", items, "BYTES")])
        assert result.as_numpy("OUTPUT0").tolist() == items.tolist()

    def test_bool_fp16_and_int8(self, client: grpcclient.InferenceServerClient) -> None:
        flags = np.array([[True, False, True]])
        half = np.array([[0.5, -1.5, 3.0]], dtype=np.float16)
        ints = np.array([[1, -2, 127]], dtype=np.int8)
        inputs = [
            _input("FLAGS", flags, "BOOL"),
            _input("HALF", half, "FP16"),
            _input("INT", ints, "INT8"),
        ]
        result = client.infer("mixed", inputs)
        np.testing.assert_array_equal(result.as_numpy("NOT_FLAGS"), ~flags)
        np.testing.assert_array_equal(result.as_numpy("HALF_X2"), half * 2)
        np.testing.assert_array_equal(result.as_numpy("INT_NEG"), -ints)

    def test_class_model_with_fp64(self, client: grpcclient.InferenceServerClient) -> None:
        data = np.array([[1.0, 2.0]])
        result = client.infer("Scaler", [_input("INPUT0", data, "FP64")])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data * 3)
        assert result.as_numpy("INSTANCE").dtype == np.int32

    def test_zero_element_tensor(self, client: grpcclient.InferenceServerClient) -> None:
        result = client.infer("identity", [_input("INPUT0", _fp32(1, 0), "FP32")])
        assert result.as_numpy("OUTPUT0").shape == (1, 0)

    def test_64_mib_tensor_in_and_out(self, client: grpcclient.InferenceServerClient) -> None:
        data = np.random.default_rng(0).random((1, 16 * 2**20), dtype=np.float32)
        result = client.infer("identity", [_input("INPUT0", data, "FP32")])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)

    def test_scheduling_and_custom_parameters_are_accepted(
        self, client: grpcclient.InferenceServerClient
    ) -> None:
        tensor = _input("INPUT0", _fp32(), "FP32")
        parameters = {"note": "x", "flag": True, "count": 3, "ratio": 0.5}
        result = client.infer("identity", [tensor], priority=1, parameters=parameters)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), _fp32())

    def test_model_error_is_internal_and_keeps_serving(
        self, client: grpcclient.InferenceServerClient
    ) -> None:
        with pytest.raises(InferenceServerException) as excinfo:
            client.infer("fails", [_input("INPUT0", np.array([-1.0], np.float32), "FP32")])
        assert _status(excinfo) == "StatusCode.INTERNAL"
        assert "negative input" in excinfo.value.message()
        assert client.is_model_ready("fails")

    def test_unknown_model_is_not_found(self, client: grpcclient.InferenceServerClient) -> None:
        with pytest.raises(InferenceServerException) as excinfo:
            client.infer("no_such_model", [_input("INPUT0", _fp32(), "FP32")])
        assert _status(excinfo) == "StatusCode.NOT_FOUND"

    def test_client_deadline_is_deadline_exceeded(
        self, client: grpcclient.InferenceServerClient
    ) -> None:
        seconds = np.array([1.0], np.float32)
        with pytest.raises(InferenceServerException) as excinfo:
            client.infer("sleeper", [_input("SECONDS", seconds, "FP32")], client_timeout=0.2)
        assert _status(excinfo) == "StatusCode.DEADLINE_EXCEEDED"
        assert client.is_server_ready()


def _add_sub_inputs(**overrides: Any) -> list[grpcclient.InferInput]:
    tensors = {"INPUT0": (_fp32(), "FP32"), "INPUT1": (_fp32(), "FP32"), **overrides}
    return [_input(name, *spec) for name, spec in tensors.items() if spec is not None]


@pytest.mark.parametrize(
    ("inputs", "outputs", "message"),
    [
        (_add_sub_inputs(INPUT1=(np.ones((1, 16), np.int32), "INT32")), None, "datatype"),
        (_add_sub_inputs(INPUT1=(_fp32(1, 15), "FP32")), None, "shape"),
        (_add_sub_inputs(INPUT2=(_fp32(), "FP32")), None, "INPUT2"),
        (_add_sub_inputs(INPUT1=None), None, "INPUT1"),
        (_add_sub_inputs(), ["NOPE"], "NOPE"),
        (_add_sub_inputs(INPUT0=(_fp32(9), "FP32"), INPUT1=(_fp32(9), "FP32")), None, "9"),
    ],
    ids=["datatype", "shape", "unknown-input", "missing-input", "unknown-output", "batch"],
)
def test_bad_request_is_invalid_argument_and_server_stays_healthy(
    client: grpcclient.InferenceServerClient,
    inputs: list[grpcclient.InferInput],
    outputs: list[str] | None,
    message: str,
) -> None:
    requested = [grpcclient.InferRequestedOutput(o) for o in outputs] if outputs else None
    with pytest.raises(InferenceServerException) as excinfo:
        client.infer("add_sub", inputs, outputs=requested)
    assert _status(excinfo) == "StatusCode.INVALID_ARGUMENT"
    assert message in excinfo.value.message()
    assert client.is_server_ready()
    assert client.infer("add_sub", _add_sub_inputs()).as_numpy("OUTPUT0") is not None


class TestStream:
    def _collect(
        self, client: grpcclient.InferenceServerClient, requests: list[tuple[str, str, Any]]
    ) -> list[tuple[Any, Any]]:
        results: queue.Queue[tuple[Any, Any]] = queue.Queue()
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        try:
            for model, request_id, data in requests:
                tensor = _input("INPUT0", data, "FP32")
                client.async_stream_infer(
                    model, [tensor], request_id=request_id, enable_empty_final_response=True
                )
            return [results.get(timeout=20) for _ in requests]
        finally:
            client.stop_stream()

    def test_each_request_gets_one_final_response_in_order(
        self, client: grpcclient.InferenceServerClient
    ) -> None:
        requests = [("identity", f"r{i}", _fp32(1 + i % 3)) for i in range(10)]
        answers = self._collect(client, requests)
        for (_, request_id, data), (result, error) in zip(requests, answers, strict=True):
            assert error is None
            response = result.get_response()
            assert response.id == request_id
            assert response.parameters["triton_final_response"].bool_param
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)

    def test_errors_are_in_band_and_the_stream_stays_open(
        self, client: grpcclient.InferenceServerClient
    ) -> None:
        requests = [
            ("identity", "ok-1", _fp32()),
            ("no_such_model", "bad", _fp32()),
            ("fails", "raises", -np.ones(1, np.float32)),
            ("identity", "ok-2", _fp32()),
        ]
        answers = self._collect(client, requests)
        assert answers[0][1] is None
        assert answers[3][1] is None
        assert "unknown model 'no_such_model'" in answers[1][1].message()
        assert "negative input" in answers[2][1].message()
        assert answers[3][0].get_response().id == "ok-2"


async def _stream_inputs(*requests: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    for request in requests:
        yield request


class TestAioClient:
    async def test_health_and_infer(self, server: RunningServer) -> None:
        async with aioclient.InferenceServerClient(server.grpc_url) as client:
            assert await client.is_server_live()
            data = _fp32(2)
            tensor = aioclient.InferInput("INPUT0", [2, 16], "FP32")
            tensor.set_data_from_numpy(data)
            result = await client.infer("identity", [tensor], request_id="aio")
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
            assert result.get_response().id == "aio"

    async def test_stream_infer(self, server: RunningServer) -> None:
        requests = [
            {"model_name": "identity", "inputs": [_input("INPUT0", _fp32(i + 1), "FP32")],
             "request_id": str(i)}
            for i in range(5)
        ]  # fmt: skip
        async with aioclient.InferenceServerClient(server.grpc_url) as client:
            answers = [a async for a in client.stream_infer(_stream_inputs(*requests))]
        assert [result.get_response().id for result, _ in answers] == ["0", "1", "2", "3", "4"]
        assert all(error is None for _, error in answers)

    async def test_grpc_error_header_ends_the_stream_with_a_status(
        self, server: RunningServer
    ) -> None:
        bad = {"model_name": "no_such_model", "inputs": [_input("INPUT0", _fp32(), "FP32")]}
        async with aioclient.InferenceServerClient(server.grpc_url) as client:
            answers = client.stream_infer(
                _stream_inputs(bad), headers={"triton_grpc_error": "true"}
            )
            with pytest.raises(grpc.aio.AioRpcError) as excinfo:
                _ = [a async for a in answers]
        assert excinfo.value.code() == grpc.StatusCode.NOT_FOUND


def test_closing_a_stream_with_requests_in_flight_keeps_the_server_healthy(
    client: grpcclient.InferenceServerClient,
) -> None:
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    seconds = np.array([0.5], np.float32)
    client.async_stream_infer("sleeper", [_input("SECONDS", seconds, "FP32")])
    client.stop_stream(cancel_requests=True)
    assert client.is_server_ready()
    assert client.infer("identity", [_input("INPUT0", _fp32(), "FP32")]).as_numpy("OUTPUT0").size


class TestStatisticsAndRepository:
    def test_statistics_grow_with_requests(self, client: grpcclient.InferenceServerClient) -> None:
        def successes() -> int:
            stats = client.get_inference_statistics("async_double").model_stats
            return int(stats[0].inference_stats.success.count)

        before = successes()
        tensor = _input("INPUT0", np.array([[3]], np.int32), "INT32")
        for _ in range(3):
            assert client.infer("async_double", [tensor]).as_numpy("OUTPUT0").tolist() == [[6]]
        assert successes() == before + 3

    def test_statistics_of_unknown_model_is_invalid(
        self, client: grpcclient.InferenceServerClient
    ) -> None:
        with pytest.raises(InferenceServerException) as excinfo:
            client.get_inference_statistics("no_such_model")
        assert _status(excinfo) == "StatusCode.INVALID_ARGUMENT"

    def test_repository_index(self, client: grpcclient.InferenceServerClient) -> None:
        index = {m.name: m for m in client.get_model_repository_index().models}
        assert index["identity"].state == "READY"
        assert index["gpu_only"].state == "UNAVAILABLE"
        assert "CUDA" in index["gpu_only"].reason

    def test_unload_then_load(self, client: grpcclient.InferenceServerClient) -> None:
        client.unload_model("sleeper")
        assert not client.is_model_ready("sleeper")
        client.load_model("sleeper")
        assert client.is_model_ready("sleeper")

    def test_load_unknown_model_is_internal(self, client: grpcclient.InferenceServerClient) -> None:
        with pytest.raises(InferenceServerException) as excinfo:
            client.load_model("no_such_model")
        assert _status(excinfo) == "StatusCode.INTERNAL"
        client.unload_model("no_such_model")  # unloading an unknown model is not an error

    def test_load_with_config_override_is_unimplemented(
        self, client: grpcclient.InferenceServerClient
    ) -> None:
        with pytest.raises(InferenceServerException) as excinfo:
            client.load_model("sleeper", config='{"max_batch_size": 2}')
        assert _status(excinfo) == "StatusCode.UNIMPLEMENTED"
