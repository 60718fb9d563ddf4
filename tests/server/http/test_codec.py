"""The HTTP codec in-process: JSON and binary bodies, both directions, and their errors."""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import pytest

from fnserve import Tensor
from fnserve.config.model_config import ModelConfig
from fnserve.errors import FnserveError, InvalidInputError, UnsupportedError
from fnserve.server.http.codec import (
    OutputPlan,
    decode_raw_request,
    decode_request,
    encode_response,
    parse_header_length,
)
from fnserve.types import NO_CLASSIFICATION, InferOutput, InferResponse

NUMERIC = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP32": np.float32,
    "FP64": np.float64,
}


def _body(doc: dict[str, Any], *blobs: bytes) -> tuple[bytes, int | None]:
    header = json.dumps(doc).encode()
    if not blobs:
        return header, None
    return header + b"".join(blobs), len(header)


def _decode(doc: dict[str, Any], *blobs: bytes) -> Any:
    body, header_length = _body(doc, *blobs)
    return decode_request("m", "", body, header_length)


def _input(
    name: str = "X", datatype: str = "FP32", shape: Any = (2,), **extra: Any
) -> dict[str, Any]:
    return {"name": name, "datatype": datatype, "shape": list(shape), **extra}


def _serialize_bytes(items: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


def _split_response(body: bytes, header_length: int) -> tuple[dict[str, Any], bytes]:
    return json.loads(body[:header_length]), body[header_length:]


class TestJsonRequest:
    def test_nested_and_flat_data_give_the_same_tensor(self) -> None:
        nested, _ = _decode({"inputs": [_input(shape=(2, 2), data=[[1, 2], [3, 4]])]})
        flat, _ = _decode({"inputs": [_input(shape=(2, 2), data=[1, 2, 3, 4])]})
        assert nested.inputs[0].data.shape == (2, 2)
        np.testing.assert_array_equal(nested.inputs[0].data, flat.inputs[0].data)

    @pytest.mark.parametrize("datatype", sorted(NUMERIC))
    def test_every_json_datatype(self, datatype: str) -> None:
        values = [True, False] if datatype == "BOOL" else [1, 2]
        request, _ = _decode({"inputs": [_input(datatype=datatype, data=values)]})
        array = request.inputs[0].data
        assert array.dtype == NUMERIC[datatype]
        assert array.tolist() == values

    def test_bytes_are_utf8_strings(self) -> None:
        request, _ = _decode({"inputs": [_input(datatype="BYTES", data=["héllo", ""])]})
        assert request.inputs[0].data.tolist() == ["héllo".encode(), b""]

    @pytest.mark.parametrize("datatype", ["FP16", "BF16"])
    def test_half_precision_is_binary_only(self, datatype: str) -> None:
        with pytest.raises(InvalidInputError, match="binary"):
            _decode({"inputs": [_input(datatype=datatype, data=[1.0, 2.0])]})

    def test_request_fields_are_carried(self) -> None:
        doc = {
            "id": "r-1",
            "inputs": [_input(data=[1, 2])],
            "parameters": {"priority": 1, "custom": "x", "binary_data_output": True},
            "outputs": [{"name": "Y"}],
        }
        request, plan = _decode(doc)
        assert request.id == "r-1"
        assert dict(request.parameters) == {"priority": 1, "custom": "x"}
        assert request.outputs == ("Y",)
        assert (request.model_name, request.model_version) == ("m", "")
        assert plan.default_binary

    def test_zero_element_input_needs_no_data(self) -> None:
        request, _ = _decode({"inputs": [_input(shape=(1, 0))]})
        assert request.inputs[0].data.shape == (1, 0)


class TestBinaryRequest:
    @pytest.mark.parametrize("datatype", [*sorted(NUMERIC), "FP16"])
    def test_every_raw_datatype(self, datatype: str) -> None:
        dtype = np.float16 if datatype == "FP16" else NUMERIC[datatype]
        array: np.ndarray = np.arange(6).reshape(2, 3).astype(dtype)
        spec = _input(
            datatype=datatype, shape=(2, 3), parameters={"binary_data_size": array.nbytes}
        )
        request, _ = _decode({"inputs": [spec]}, array.tobytes())
        np.testing.assert_array_equal(request.inputs[0].data, array)

    def test_bf16_travels_as_its_bits(self) -> None:
        bits = np.array([0x3F80, 0x4000], dtype=np.uint16)  # 1.0 and 2.0
        spec = _input(datatype="BF16", parameters={"binary_data_size": 4})
        request, _ = _decode({"inputs": [spec]}, bits.tobytes())
        assert request.inputs[0].data.tolist() == [0x3F80, 0x4000]

    def test_bytes_with_empty_non_utf8_and_nul_elements(self) -> None:
        items = [b"", b"\xff\xfe", b"a\x00b", "ü".encode()]
        raw = _serialize_bytes(items)
        spec = _input(datatype="BYTES", shape=(4,), parameters={"binary_data_size": len(raw)})
        request, _ = _decode({"inputs": [spec]}, raw)
        assert request.inputs[0].data.tolist() == items

    def test_binary_and_json_inputs_mix_in_order(self) -> None:
        a = np.array([1, 2], np.float32)
        c = np.array([5, 6], np.int32)
        doc = {
            "inputs": [
                _input("A", parameters={"binary_data_size": 8}),
                _input("B", data=[3, 4]),
                _input("C", "INT32", parameters={"binary_data_size": 8}),
            ]
        }
        request, _ = _decode(doc, a.tobytes(), c.tobytes())
        assert [i.data.tolist() for i in request.inputs] == [[1, 2], [3, 4], [5, 6]]

    def test_empty_binary_tensor(self) -> None:
        spec = _input(shape=(1, 0), parameters={"binary_data_size": 0})
        request, _ = _decode({"inputs": [spec]}, b"")
        assert request.inputs[0].data.shape == (1, 0)


def _one(fields: str) -> bytes:
    """A request body with one input named X and the given JSON fields."""
    return b'{"inputs": [{"name": "X", ' + fields.encode() + b"}]}"


class TestMalformedRequest:
    @pytest.mark.parametrize(
        ("body", "match"),
        [
            (b"{not json", "malformed JSON"),
            (b"\xff\xfe", "malformed JSON"),
            (b"[1, 2]", "must be a JSON object"),
            (b"{}", "'inputs' must be a list"),
            (b'{"inputs": {}}', "'inputs' must be a list"),
            (b'{"inputs": [1]}', "each input must be a JSON object"),
            (b'{"inputs": [{"shape": [1], "datatype": "FP32", "data": [1]}]}', "'name'"),
            (_one('"shape": [1], "data": [1]'), "'datatype'"),
            (_one('"shape": [-1], "datatype": "FP32"'), "shape"),
            (b'{"inputs": [{"name": "X", "shape": "1", "datatype": "FP32"}]}', "shape"),
            (_one('"shape": [2], "datatype": "FP32"'), "no 'data'"),
            (
                b'{"inputs": [{"name": "X", "shape": [1], "datatype": "F", "data": [1]}]}',
                "datatype",
            ),
            (_one('"shape": [3], "datatype": "FP32", "data": [1]'), "3"),
            (
                b'{"inputs": [{"name": "X", "shape": [1], "datatype": "INT8", "data": ["a"]}]}',
                "INT8",
            ),
            (_one('"shape": [1], "datatype": "BOOL", "data": [2]'), "BOOL"),
            (
                b'{"inputs": [{"name": "X", "shape": [1], "datatype": "BYTES", "data": [1]}]}',
                "BYTES",
            ),
            (b'{"inputs": [], "id": 5}', "'id' must be a string"),
            (b'{"inputs": [], "parameters": []}', "'parameters' must be an object"),
            (b'{"inputs": [], "parameters": {"triton_x": 1}}', "reserved"),
            (b'{"inputs": [], "parameters": {"k": [1]}}', "string, number or boolean"),
            (b'{"inputs": [], "parameters": {"binary_data_output": 1}}', "true or false"),
            (b'{"inputs": [], "outputs": {}}', "'outputs' must be a list"),
            (b'{"inputs": [], "outputs": [{"nam": "Y"}]}', "string 'name'"),
            (b'{"inputs": [], "outputs": [{"name": "Y", "parameters": 1}]}', "must be an object"),
            (
                b'{"inputs": [], "outputs": [{"name": "Y", "parameters": {"binary_data": 1}}]}',
                "binary_data must be",
            ),
        ],
    )
    def test_json_errors_are_invalid_input(self, body: bytes, match: str) -> None:
        with pytest.raises(InvalidInputError, match=match):
            decode_request("m", "", body, None)

    @pytest.mark.parametrize("size", [-1, 1.5, "4", True])
    def test_bad_binary_data_size(self, size: object) -> None:
        with pytest.raises(InvalidInputError, match="binary_data_size"):
            _decode({"inputs": [_input(parameters={"binary_data_size": size})]}, b"12345678")

    def test_binary_size_past_the_end(self) -> None:
        with pytest.raises(InvalidInputError, match="runs past the end"):
            _decode({"inputs": [_input(parameters={"binary_data_size": 16})]}, b"12345678")

    def test_binary_size_not_matching_shape(self) -> None:
        with pytest.raises(InvalidInputError, match="expected 8 bytes"):
            _decode({"inputs": [_input(parameters={"binary_data_size": 4})]}, b"1234")

    def test_leftover_binary_data(self) -> None:
        with pytest.raises(InvalidInputError, match="beyond its inputs"):
            _decode({"inputs": [_input(parameters={"binary_data_size": 8})]}, b"123456789")

    def test_data_and_binary_size_together(self) -> None:
        spec = _input(data=[1, 2], parameters={"binary_data_size": 8})
        with pytest.raises(InvalidInputError, match="both"):
            _decode({"inputs": [spec]}, b"12345678")

    def test_truncated_bytes_element(self) -> None:
        raw = struct.pack("<I", 10) + b"abc"
        spec = _input(datatype="BYTES", shape=(1,), parameters={"binary_data_size": len(raw)})
        with pytest.raises(InvalidInputError, match="runs past the end"):
            _decode({"inputs": [spec]}, raw)

    def test_malformed_json_header_before_binary(self) -> None:
        with pytest.raises(InvalidInputError, match="malformed JSON"):
            decode_request("m", "", b"{bad" + b"\x00" * 8, 4)

    @pytest.mark.parametrize(
        "parameters",
        [{"shared_memory_region": "r", "shared_memory_byte_size": 8}, {"shared_memory_offset": 0}],
    )
    def test_shared_memory_input_is_unsupported(self, parameters: dict[str, Any]) -> None:
        with pytest.raises(UnsupportedError, match="shared memory"):
            _decode({"inputs": [_input(parameters=parameters)]})

    def test_shared_memory_output_is_unsupported(self) -> None:
        doc = {
            "inputs": [],
            "outputs": [{"name": "Y", "parameters": {"shared_memory_region": "r"}}],
        }
        with pytest.raises(UnsupportedError, match="shared"):
            _decode(doc)

    def test_classification_counts_are_read_per_output(self) -> None:
        outputs = [
            {"name": "A", "parameters": {"classification": 3, "binary_data": True}},
            {"name": "B", "parameters": {"classification": 0}},  # 0: the tensor itself
            {"name": "C"},
        ]
        request, plan = _decode({"inputs": [], "outputs": outputs})
        assert request.outputs == ("A", "B", "C")
        assert dict(request.classification) == {"A": 3}
        assert plan.is_binary("A")

    def test_no_classification_shares_the_empty_mapping(self) -> None:
        request, _ = _decode({"inputs": [], "outputs": [{"name": "Y"}]})
        assert request.classification is NO_CLASSIFICATION

    @pytest.mark.parametrize("count", [-1, 1.5, "2", True, None])
    def test_a_classification_that_is_not_an_unsigned_integer_is_refused(self, count: Any) -> None:
        doc = {"inputs": [], "outputs": [{"name": "Y", "parameters": {"classification": count}}]}
        with pytest.raises(InvalidInputError, match="output 'Y': unable to set 'classification'"):
            _decode(doc)


class TestHeaderLength:
    def test_absent_means_all_json(self) -> None:
        assert parse_header_length(None, 10) is None

    @pytest.mark.parametrize(("value", "expected"), [(b"0", 0), (b"7", 7), (b"10", 10)])
    def test_in_range(self, value: bytes, expected: int) -> None:
        assert parse_header_length(value, 10) == expected

    @pytest.mark.parametrize("value", [b"-1", b"11", b"abc", b"", b"1e3"])
    def test_out_of_range_or_not_a_number(self, value: bytes) -> None:
        with pytest.raises(InvalidInputError, match="Inference-Header-Content-Length"):
            parse_header_length(value, 10)


class TestRawRequest:
    def _config(
        self, datatype: str = "FP32", max_batch_size: int = 8, inputs: int = 1
    ) -> ModelConfig:
        return ModelConfig(
            name="raw",
            inputs=[Tensor(f"IN{i}", datatype, [-1]) for i in range(inputs)],
            outputs=[Tensor("OUT", datatype, [-1])],
            max_batch_size=max_batch_size,
        )

    def test_whole_body_is_the_single_input(self) -> None:
        x = np.arange(4, dtype=np.float32)
        request, plan = decode_raw_request("raw", "", x.tobytes(), self._config())
        assert request.inputs[0].name == "IN0"
        np.testing.assert_array_equal(request.inputs[0].data, x.reshape(1, 4))
        assert plan.is_binary("OUT")

    def test_without_batching_the_shape_is_flat(self) -> None:
        x = np.arange(3, dtype=np.int64)
        request, _ = decode_raw_request("raw", "", x.tobytes(), self._config("INT64", 0))
        assert request.inputs[0].data.shape == (3,)

    def test_bytes_input_takes_the_body_as_one_element(self) -> None:
        request, _ = decode_raw_request("raw", "", b"\x00\xffraw", self._config("BYTES", 0))
        assert request.inputs[0].data.tolist() == [b"\x00\xffraw"]

    def test_size_must_be_whole_elements(self) -> None:
        with pytest.raises(InvalidInputError, match="whole number"):
            decode_raw_request("raw", "", b"12345", self._config())

    def test_needs_a_single_input_model(self) -> None:
        with pytest.raises(InvalidInputError, match="exactly one input"):
            decode_raw_request("raw", "", b"1234", self._config(inputs=2))


def _response(*outputs: InferOutput, request_id: str = "") -> InferResponse:
    return InferResponse("m", "3", outputs, id=request_id)


class TestEncodeResponse:
    def test_json_only_has_no_header_length(self) -> None:
        out = InferOutput("Y", "INT32", np.array([[1, 2]], np.int32))
        body, header_length = encode_response(_response(out), OutputPlan())
        assert header_length is None
        assert json.loads(body) == {
            "model_name": "m",
            "model_version": "3",
            "outputs": [{"name": "Y", "datatype": "INT32", "shape": [1, 2], "data": [1, 2]}],
        }

    def test_fp32_json_uses_the_float32_double_form(self) -> None:
        out = InferOutput("Y", "FP32", np.array([0.1], np.float32))
        body, _ = encode_response(_response(out), OutputPlan())
        assert b"0.10000000149011612" in body

    def test_non_finite_floats_survive_json(self) -> None:
        values = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
        body, _ = encode_response(_response(InferOutput("Y", "FP32", values)), OutputPlan())
        assert b"NaN,Infinity,-Infinity,1.0" in body
        decoded = np.array(json.loads(body)["outputs"][0]["data"], np.float32)
        np.testing.assert_array_equal(decoded, values)

    def test_id_only_when_given(self) -> None:
        out = InferOutput("Y", "BOOL", np.array([True]))
        with_id, _ = encode_response(_response(out, request_id="abc"), OutputPlan())
        assert json.loads(with_id)["id"] == "abc"
        assert json.loads(with_id)["outputs"][0]["data"] == [True]

    def test_binary_outputs_follow_the_header_in_order(self) -> None:
        a = InferOutput("A", "FP16", np.array([1.5, 2.5], np.float16))
        b = InferOutput("B", "INT8", np.array([-1], np.int8))
        c = InferOutput("C", "BYTES", np.array([b"\xff", b""], dtype=object))
        plan = OutputPlan(default_binary=False, binary={"A": True, "B": False, "C": True})
        body, header_length = encode_response(_response(a, b, c), plan)
        assert header_length is not None
        header, tail = _split_response(body, header_length)
        sizes = [o.get("parameters", {}).get("binary_data_size") for o in header["outputs"]]
        assert sizes == [4, None, 13 - 4]
        assert header["outputs"][1]["data"] == [-1]
        assert tail == np.array([1.5, 2.5], np.float16).tobytes() + _serialize_bytes([b"\xff", b""])

    def test_binary_data_output_is_the_default_for_unlisted_outputs(self) -> None:
        out = InferOutput("Y", "FP32", np.zeros((1, 0), np.float32))
        body, header_length = encode_response(_response(out), OutputPlan(default_binary=True))
        assert header_length == len(body)  # an empty tensor: binary_data_size 0
        assert json.loads(body)["outputs"][0]["parameters"] == {"binary_data_size": 0}

    @pytest.mark.parametrize(
        "output",
        [
            InferOutput("Y", "FP16", np.array([1.0], np.float16)),
            InferOutput("Y", "BF16", np.array([0x3F80], np.uint16)),
            InferOutput("Y", "BYTES", np.array([b"\xff"], dtype=object)),
        ],
    )
    def test_outputs_json_cannot_carry(self, output: InferOutput) -> None:
        with pytest.raises(InvalidInputError, match="binary"):
            encode_response(_response(output), OutputPlan())

    def test_error_messages_have_no_trailing_period(self) -> None:
        with pytest.raises(FnserveError) as info:
            decode_request("m", "", b"[]", None)
        assert not info.value.message.endswith(".")
        assert info.value.message[0].islower()
