"""Fuzz the gRPC codec with arbitrary, structured and mutated `ModelInferRequest` messages.

Property: a message protobuf can parse decodes to a request or raises an `FnserveError`
(INVALID_ARGUMENT and kin on the wire), never anything else; bytes protobuf cannot parse
raise `DecodeError`, which the gRPC error table maps to INVALID_ARGUMENT. Valid tensors, in raw
or typed contents, round-trip.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from google.protobuf.message import DecodeError
from hypothesis import given, strategies as st

from fnserve.protocol import grpc_service_pb2 as pb
from fnserve.server.grpc.codec import CONTENTS_FIELD, decode_request, encode_response
from fnserve.tensors import to_raw
from fnserve.types import InferOutput, InferResponse
from tests.fuzz.strategies import NUMERIC_DTYPES, arrays, datatypes, only_fnserve_errors, same

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
shapes = st.one_of(
    st.lists(st.integers(-2, 4), max_size=5),
    st.lists(st.sampled_from([0, 1, 2**62, 2**63 - 1, -1, -(2**63)]), max_size=8),
    st.lists(st.just(1), min_size=60, max_size=70),
    st.lists(INT64, max_size=4),
)
# Values for each typed-contents field, in their protobuf ranges.
_FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "bool_contents": st.booleans(),
    "int_contents": st.integers(-(2**31), 2**31 - 1),
    "int64_contents": INT64,
    "uint_contents": st.integers(0, 2**32 - 1),
    "uint64_contents": st.integers(0, 2**64 - 1),
    "fp32_contents": st.floats(width=32),
    "fp64_contents": st.floats(),
    "bytes_contents": st.binary(max_size=4),
}


@st.composite
def requests(draw: st.DrawFn) -> pb.ModelInferRequest:
    """A message with any mix of inputs, typed or raw contents, outputs and parameters."""
    msg = pb.ModelInferRequest(
        model_name=draw(st.text(max_size=4)),
        model_version=draw(st.one_of(st.just(""), st.text(max_size=3))),
        id=draw(st.text(max_size=3)),
    )
    for _ in range(draw(st.integers(0, 3))):
        tensor = msg.inputs.add(
            name=draw(st.text(max_size=3)), datatype=draw(datatypes), shape=draw(shapes)
        )
        if draw(st.booleans()):
            field = draw(st.sampled_from(sorted(_FIELD_VALUES)))
            values = draw(st.lists(_FIELD_VALUES[field], max_size=6))
            getattr(tensor.contents, field).extend(values)
            tensor.contents.SetInParent()
    raw_count = draw(st.integers(0, 3))
    msg.raw_input_contents.extend(
        draw(st.lists(st.binary(max_size=32), min_size=raw_count, max_size=raw_count))
    )
    for name in draw(st.lists(st.text(max_size=3), max_size=2)):
        msg.outputs.add(name=name)
    for key in draw(st.lists(st.text(max_size=30), max_size=2)):
        param = msg.parameters[key]
        choice = draw(
            st.sampled_from(
                ["bool_param", "int64_param", "string_param", "double_param", "uint64_param", None]
            )
        )
        if choice == "bool_param":
            param.bool_param = draw(st.booleans())
        elif choice == "int64_param":
            param.int64_param = draw(INT64)
        elif choice == "string_param":
            param.string_param = draw(st.text(max_size=3))
        elif choice == "double_param":
            param.double_param = draw(st.floats())
        elif choice == "uint64_param":
            param.uint64_param = draw(st.integers(0, 2**64 - 1))
    return msg


def _decode_bytes(data: bytes) -> None:
    try:
        msg = pb.ModelInferRequest.FromString(data)
    except DecodeError:
        return  # mapped to INVALID_ARGUMENT by server/grpc/errors.py
    only_fnserve_errors(lambda: decode_request(msg))


@given(st.binary(max_size=300))
def test_arbitrary_bytes(data: bytes) -> None:
    _decode_bytes(data)


@given(requests())
def test_structured_requests(msg: pb.ModelInferRequest) -> None:
    only_fnserve_errors(lambda: decode_request(msg))


@given(
    requests(),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
    st.integers(0, 64),
)
def test_mutated_requests(
    msg: pb.ModelInferRequest, flips: list[tuple[int, int]], cut: int
) -> None:
    data = bytearray(msg.SerializeToString())
    if not data:
        return
    for position, value in flips:
        data[position % len(data)] = value
    _decode_bytes(bytes(data[: max(0, len(data) - cut)]))


@st.composite
def near_valid_requests(draw: st.DrawFn) -> pb.ModelInferRequest:
    """Raw contents sized to fit the (often hostile) shape whenever that is small."""
    datatype = draw(st.sampled_from(sorted(NUMERIC_DTYPES) + ["BYTES"]))
    shape = draw(shapes)
    count = int(np.prod([abs(d) for d in shape], dtype=object)) if shape else 1
    msg = pb.ModelInferRequest(model_name="m")
    msg.inputs.add(name="X", datatype=datatype, shape=shape)
    itemsize = np.dtype(NUMERIC_DTYPES.get(datatype, np.uint8)).itemsize
    if datatype == "BYTES":
        raw = b"\0\0\0\0" * count if count <= 64 else b""
    else:
        raw = b"\1" * (count * itemsize) if count <= 64 else b""
    msg.raw_input_contents.append(raw)
    return msg


@given(near_valid_requests())
def test_near_valid_requests(msg: pb.ModelInferRequest) -> None:
    only_fnserve_errors(lambda: decode_request(msg))


tensor_cases = st.lists(
    st.sampled_from(sorted(NUMERIC_DTYPES) + ["BYTES"]), min_size=1, max_size=3
).flatmap(lambda types: st.tuples(st.just(types), st.tuples(*(arrays(t) for t in types))))


@given(tensor_cases)
def test_raw_round_trip(case: tuple[list[str], tuple[Any, ...]]) -> None:
    types, tensors = case
    msg = pb.ModelInferRequest(model_name="m", model_version="3")
    for i, (datatype, array) in enumerate(zip(types, tensors, strict=True)):
        msg.inputs.add(name=f"IN{i}", datatype=datatype, shape=array.shape)
        msg.raw_input_contents.append(to_raw(datatype, array))
    request = decode_request(pb.ModelInferRequest.FromString(msg.SerializeToString()))
    assert request.model_version == "3"
    for array, got in zip(tensors, request.inputs, strict=True):
        assert same(got.data, array)


@given(st.sampled_from(sorted(CONTENTS_FIELD)).flatmap(lambda t: st.tuples(st.just(t), arrays(t))))
def test_typed_round_trip(case: tuple[str, Any]) -> None:
    datatype, array = case
    msg = pb.ModelInferRequest(model_name="m")
    tensor = msg.inputs.add(name="X", datatype=datatype, shape=array.shape)
    getattr(tensor.contents, CONTENTS_FIELD[datatype]).extend(array.ravel().tolist())
    tensor.contents.SetInParent()
    request = decode_request(msg)
    assert same(request.inputs[0].data, array)


@given(tensor_cases)
def test_response_round_trip(case: tuple[list[str], tuple[Any, ...]]) -> None:
    types, tensors = case
    outputs = tuple(
        InferOutput(f"OUT{i}", t, a) for i, (t, a) in enumerate(zip(types, tensors, strict=True))
    )
    reply = pb.ModelInferResponse.FromString(
        b"".join(encode_response(InferResponse("m", "1", outputs)))
    )
    echo = pb.ModelInferRequest(model_name="m")
    for output in reply.outputs:
        echo.inputs.add(name=output.name, datatype=output.datatype, shape=output.shape)
    echo.raw_input_contents.extend(reply.raw_output_contents)
    request = decode_request(echo)
    for array, got in zip(tensors, request.inputs, strict=True):
        assert same(got.data, array)
