"""The gRPC codec in-process: ModelInferRequest -> InferRequest and InferResponse -> reply."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import InferResult, service_pb2

from fnserve.errors import InvalidInputError
from fnserve.protocol import grpc_service_pb2 as pb
from fnserve.server.grpc.codec import (
    check_version,
    decode_parameters,
    decode_request,
    encode_parameters,
    encode_response,
    wrap_stream_response,
)
from fnserve.types import InferOutput, InferResponse, ParamValue

Tensor = pb.ModelInferRequest.InferInputTensor

# datatype, typed-contents field, values, numpy dtype
TYPED = [
    ("BOOL", "bool_contents", [True, False, True, True], np.bool_),
    ("INT8", "int_contents", [-128, 0, 5, 127], np.int8),
    ("INT16", "int_contents", [-32768, 1, 2, 32767], np.int16),
    ("INT32", "int_contents", [-(2**31), 1, 2, 2**31 - 1], np.int32),
    ("INT64", "int64_contents", [-(2**63), 1, 2, 2**63 - 1], np.int64),
    ("UINT8", "uint_contents", [0, 1, 200, 255], np.uint8),
    ("UINT16", "uint_contents", [0, 1, 2, 65535], np.uint16),
    ("UINT32", "uint_contents", [0, 1, 2, 2**32 - 1], np.uint32),
    ("UINT64", "uint64_contents", [0, 1, 2, 2**64 - 1], np.uint64),
    ("FP32", "fp32_contents", [0.5, -1.25, 3.0, 1e30], np.float32),
    ("FP64", "fp64_contents", [0.1, -1e300, 3.0, 2.5], np.float64),
    ("BYTES", "bytes_contents", [b"", b"a\x00b", b"\xff\xfe", "é".encode()], np.object_),
]
RAW_DTYPES = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
    "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
    "INT64": np.int64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
}  # fmt: skip


def _request(*inputs: Tensor, raw: list[bytes] | None = None, **fields: Any) -> Any:
    return pb.ModelInferRequest(
        model_name="m", inputs=list(inputs), raw_input_contents=raw or [], **fields
    )


def _bytes_raw(items: list[bytes]) -> bytes:
    return b"".join(len(i).to_bytes(4, "little") + i for i in items)


class TestTypedContents:
    @pytest.mark.parametrize(("datatype", "field", "values", "dtype"), TYPED)
    def test_each_datatype_decodes(
        self, datatype: str, field: str, values: list[Any], dtype: Any
    ) -> None:
        tensor = Tensor(name="X", datatype=datatype, shape=[2, 2])
        getattr(tensor.contents, field).extend(values)
        request = decode_request(_request(tensor))
        data = request.inputs[0].data
        assert data.dtype == np.dtype(dtype)
        assert data.shape == (2, 2)
        expected = np.array(values, dtype=dtype).reshape(2, 2)
        assert data.tolist() == expected.tolist()

    @pytest.mark.parametrize(
        ("datatype", "field", "value"),
        [("INT8", "int_contents", 128), ("INT16", "int_contents", -32769),
         ("UINT8", "uint_contents", 256), ("UINT16", "uint_contents", 65536)],
    )  # fmt: skip
    def test_narrow_integer_out_of_range_is_refused(
        self, datatype: str, field: str, value: int
    ) -> None:
        tensor = Tensor(name="X", datatype=datatype, shape=[1])
        getattr(tensor.contents, field).append(value)
        with pytest.raises(InvalidInputError, match=f"values must lie in .* for {datatype}"):
            decode_request(_request(tensor))

    @pytest.mark.parametrize("datatype", ["FP16", "BF16"])
    def test_half_types_have_no_typed_field(self, datatype: str) -> None:
        tensor = Tensor(name="X", datatype=datatype, shape=[1])
        tensor.contents.fp32_contents.append(1.0)
        with pytest.raises(InvalidInputError, match="use raw_input_contents"):
            decode_request(_request(tensor))

    def test_wrong_field_for_datatype_is_refused(self) -> None:
        tensor = Tensor(name="X", datatype="FP32", shape=[1])
        tensor.contents.int_contents.append(1)
        with pytest.raises(InvalidInputError, match="int_contents given for datatype FP32"):
            decode_request(_request(tensor))

    def test_element_count_must_match_shape(self) -> None:
        tensor = Tensor(name="X", datatype="FP32", shape=[2, 2])
        tensor.contents.fp32_contents.extend([1.0, 2.0, 3.0])
        with pytest.raises(InvalidInputError, match="expected 4 elements .* got 3"):
            decode_request(_request(tensor))

    def test_input_without_any_data_is_refused(self) -> None:
        with pytest.raises(InvalidInputError, match="input 'X': no data"):
            decode_request(_request(Tensor(name="X", datatype="FP32", shape=[1])))

    def test_empty_contents_are_a_zero_element_tensor(self) -> None:
        tensor = Tensor(name="X", datatype="FP32", shape=[1, 0])
        tensor.contents.SetInParent()
        request = decode_request(_request(tensor))
        assert request.inputs[0].data.shape == (1, 0)


class TestRawContents:
    @pytest.mark.parametrize("datatype", sorted(RAW_DTYPES))
    def test_each_datatype_decodes(self, datatype: str) -> None:
        array: np.ndarray = np.arange(6).reshape(2, 3).astype(RAW_DTYPES[datatype])
        tensor = Tensor(name="X", datatype=datatype, shape=[2, 3])
        request = decode_request(_request(tensor, raw=[array.tobytes()]))
        np.testing.assert_array_equal(request.inputs[0].data, array)

    def test_bytes_with_empty_nul_and_non_utf8_elements(self) -> None:
        items = [b"", b"a\x00b", b"\xff\xfe\x00", b"plain"]
        tensor = Tensor(name="S", datatype="BYTES", shape=[4])
        request = decode_request(_request(tensor, raw=[_bytes_raw(items)]))
        assert request.inputs[0].data.tolist() == items

    def test_entries_follow_input_order(self) -> None:
        a, b = np.ones(2, np.float32), np.arange(3, dtype=np.int64)
        tensors = (Tensor(name="A", datatype="FP32", shape=[2]),
                   Tensor(name="B", datatype="INT64", shape=[3]))  # fmt: skip
        request = decode_request(_request(*tensors, raw=[a.tobytes(), b.tobytes()]))
        assert [i.name for i in request.inputs] == ["A", "B"]
        np.testing.assert_array_equal(request.inputs[1].data, b)

    @pytest.mark.parametrize("count", [1, 3])
    def test_raw_entry_count_must_match_inputs(self, count: int) -> None:
        tensors = (Tensor(name="A", datatype="FP32", shape=[1]),
                   Tensor(name="B", datatype="FP32", shape=[1]))  # fmt: skip
        raw = [np.ones(1, np.float32).tobytes()] * count
        with pytest.raises(InvalidInputError, match=f"expected 2 raw_input_contents .* {count}"):
            decode_request(_request(*tensors, raw=raw))

    def test_raw_and_typed_contents_cannot_mix(self) -> None:
        typed = Tensor(name="B", datatype="FP32", shape=[1])
        typed.contents.fp32_contents.append(1.0)
        raw = [np.ones(1, np.float32).tobytes()]
        request = _request(Tensor(name="A", datatype="FP32", shape=[1]), typed, raw=raw)
        with pytest.raises(InvalidInputError, match="input 'B': contents must not be given"):
            decode_request(request)

    def test_byte_count_must_match_shape(self) -> None:
        tensor = Tensor(name="X", datatype="FP32", shape=[4])
        with pytest.raises(InvalidInputError, match="expected 16 bytes"):
            decode_request(_request(tensor, raw=[b"\x00" * 12]))

    def test_negative_dimension_is_refused(self) -> None:
        tensor = Tensor(name="X", datatype="FP32", shape=[-1])
        with pytest.raises(InvalidInputError, match="non-negative"):
            decode_request(_request(tensor, raw=[b""]))

    def test_unknown_datatype_is_refused(self) -> None:
        tensor = Tensor(name="X", datatype="FP8", shape=[1])
        with pytest.raises(InvalidInputError, match="unknown datatype 'FP8'"):
            decode_request(_request(tensor, raw=[b"\x00"]))


class TestRequestFields:
    def test_id_version_and_requested_outputs(self) -> None:
        tensor = Tensor(name="X", datatype="FP32", shape=[1])
        msg = _request(tensor, raw=[b"\x00" * 4], id="req-7", model_version="2")
        msg.outputs.add(name="Y")
        request = decode_request(msg)
        assert (request.id, request.model_version, request.outputs) == ("req-7", "2", ("Y",))

    def test_no_requested_outputs_means_all(self) -> None:
        request = decode_request(_request())
        assert request.outputs is None

    def test_parameters_take_every_oneof_member(self) -> None:
        msg = _request()
        msg.parameters["b"].bool_param = True
        msg.parameters["i"].int64_param = -3
        msg.parameters["s"].string_param = "x"
        msg.parameters["d"].double_param = 0.5
        msg.parameters["priority"].uint64_param = 2**64 - 1
        request = decode_request(msg)
        assert dict(request.parameters) == {
            "b": True, "i": -3, "s": "x", "d": 0.5, "priority": 2**64 - 1,
        }  # fmt: skip

    def test_stream_flag_is_removed_from_the_parameters(self) -> None:
        msg = _request()
        msg.parameters["triton_enable_empty_final_response"].bool_param = True
        request = decode_request(msg)
        assert dict(request.parameters) == {}

    def test_stream_flag_must_be_a_bool(self) -> None:
        msg = _request()
        msg.parameters["triton_enable_empty_final_response"].int64_param = 1
        with pytest.raises(InvalidInputError, match="must be a bool_param"):
            decode_request(msg)

    def test_parameter_without_value_is_refused(self) -> None:
        msg = _request()
        msg.parameters["empty"].SetInParent()
        with pytest.raises(InvalidInputError, match="parameter 'empty' has no value"):
            decode_request(msg)

    def test_classification_counts_are_read_per_output(self) -> None:
        msg = _request()
        msg.outputs.add(name="A").parameters["classification"].int64_param = 5
        msg.outputs.add(name="B")
        request = decode_request(msg)
        assert request.outputs == ("A", "B")
        assert dict(request.classification) == {"A": 5}

    @pytest.mark.parametrize(
        ("field", "value", "message"),
        [
            ("int64_param", 0, "invalid value for 'classification' parameter, expected >= 1"),
            ("int64_param", -2, "invalid value for 'classification' parameter"),
            ("uint64_param", 2, "invalid value type for 'classification' parameter, expected "
             "int64_param"),
            ("string_param", "2", "expected int64_param"),
        ],
    )  # fmt: skip
    def test_a_classification_not_a_positive_int64_param_is_refused(
        self, field: str, value: Any, message: str
    ) -> None:
        msg = _request()
        setattr(msg.outputs.add(name="Y").parameters["classification"], field, value)
        with pytest.raises(InvalidInputError, match="output 'Y': ") as caught:
            decode_request(msg)
        assert message in str(caught.value)

    @pytest.mark.parametrize("version", ["", "1", "42"])
    def test_integer_versions_pass(self, version: str) -> None:
        assert check_version(version) == version

    @pytest.mark.parametrize("version", ["latest", "-1", "1.0", "١"])
    def test_other_versions_are_refused(self, version: str) -> None:
        with pytest.raises(InvalidInputError, match="model version must be an integer"):
            check_version(version)


def _parse(parts: list[bytes]) -> Any:
    return pb.ModelInferResponse.FromString(b"".join(parts))


def _as_triton(parts: list[bytes]) -> InferResult:
    """Decode our reply with tritonclient's own message class and result reader."""
    return InferResult(service_pb2.ModelInferResponse.FromString(b"".join(parts)))


class TestEncodeResponse:
    def test_every_output_is_raw_in_order_even_when_empty(self) -> None:
        outputs = (
            InferOutput("A", "FP32", np.arange(4, dtype=np.float32).reshape(2, 2)),
            InferOutput("EMPTY", "INT32", np.zeros((1, 0), np.int32)),
            InferOutput("S", "BYTES", np.array([b"", b"\xff\x00"], dtype=object)),
            InferOutput("H", "FP16", np.array([1.5], np.float16)),
        )
        parts = encode_response(InferResponse("m", "3", outputs, id="r1"))
        reply = _parse(parts)
        assert [o.name for o in reply.outputs] == ["A", "EMPTY", "S", "H"]
        assert [list(o.shape) for o in reply.outputs] == [[2, 2], [1, 0], [2], [1]]
        assert len(reply.raw_output_contents) == 4
        assert reply.raw_output_contents[1] == b""
        assert not any(o.HasField("contents") for o in reply.outputs)
        assert (reply.model_name, reply.model_version, reply.id) == ("m", "3", "r1")
        result = _as_triton(parts)
        np.testing.assert_array_equal(result.as_numpy("A"), outputs[0].data)
        assert result.as_numpy("EMPTY").shape == (1, 0)
        assert result.as_numpy("S").tolist() == [b"", b"\xff\x00"]
        np.testing.assert_array_equal(result.as_numpy("H"), outputs[3].data)

    def test_hand_framed_bytes_equal_protobuf_serialization(self) -> None:
        big = np.arange(70_000, dtype=np.float32)  # a length that needs a 3-byte varint
        outputs = (InferOutput("A", "FP32", big), InferOutput("B", "BOOL", np.ones(3, bool)))
        parts = encode_response(InferResponse("m", "1", outputs, id="x"))
        reference = pb.ModelInferResponse(model_name="m", model_version="1", id="x")
        for output in outputs:
            reference.outputs.add(name=output.name, datatype=output.datatype,
                                  shape=output.data.shape)  # fmt: skip
            reference.raw_output_contents.append(output.data.tobytes())
        assert b"".join(parts) == reference.SerializeToString()

    def test_bool_output_round_trips(self) -> None:
        flags = np.array([[True, False, True]])
        parts = encode_response(InferResponse("m", "1", (InferOutput("F", "BOOL", flags),)))
        np.testing.assert_array_equal(_as_triton(parts).as_numpy("F"), flags)

    def test_response_parameters_are_encoded(self) -> None:
        values: dict[str, ParamValue] = {"flag": True, "n": -2, "big": 2**63, "x": 0.25, "s": "v"}
        reply = _parse(encode_response(InferResponse("m", "1", (), parameters=values)))
        assert decode_parameters(reply.parameters) == values
        assert reply.parameters["big"].WhichOneof("parameter_choice") == "uint64_param"

    def test_stream_response_wraps_the_reply_and_flags_it_final(self) -> None:
        response = InferResponse("m", "1", (InferOutput("A", "INT64", np.arange(3)),), id="s")
        parts = wrap_stream_response(encode_response(response, final=True))
        reply = pb.ModelStreamInferResponse.FromString(b"".join(parts))
        assert reply.error_message == ""
        inner = reply.infer_response
        assert inner.id == "s"
        assert inner.parameters["triton_final_response"].bool_param is True
        assert np.frombuffer(inner.raw_output_contents[0], np.int64).tolist() == [0, 1, 2]

    def test_encode_parameters_writes_into_a_map(self) -> None:
        msg = pb.ModelInferResponse()
        encode_parameters(msg.parameters, {"a": 1})
        assert msg.parameters["a"].int64_param == 1
