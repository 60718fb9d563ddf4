"""Fuzz the HTTP codec: JSON bodies, binary tensor bodies, Content-Encoding.

Property: decoding any body raises nothing but `FnserveError` subclasses (the frontend maps
those to 4xx), and valid requests round-trip to the arrays they were built from.
"""

from __future__ import annotations

import gzip
import json
import zlib
from typing import Any

import numpy as np
import orjson
from hypothesis import given, strategies as st

from fnserve.server.http.body import compress, decompress
from fnserve.server.http.codec import (
    OutputPlan,
    decode_request,
    encode_response,
    parse_header_length,
)
from fnserve.tensors import to_raw
from fnserve.types import InferOutput, InferResponse
from tests.fuzz.strategies import (
    JSON_TYPES,
    NUMERIC_DTYPES,
    arrays,
    datatypes,
    hostile_dims,
    json_values,
    near_valid_inputs,
    nested_data,
    only_fnserve_errors,
    same,
    scalars,
    shapes,
    text_array,
)

LIMIT = 1 << 20


def _decode(body: bytes, header_length: int | None = None) -> Any:
    return only_fnserve_errors(lambda: decode_request("model", "", body, header_length))


def _dumps(doc: Any) -> bytes:
    # stdlib json: it writes ints past 64 bits and NaN, which orjson refuses to
    return json.dumps(doc).encode()


@given(st.binary(max_size=200))
def test_arbitrary_bytes(body: bytes) -> None:
    _decode(body)


@given(json_values)
def test_arbitrary_json(doc: Any) -> None:
    _decode(_dumps(doc))


input_specs = st.fixed_dictionaries(
    {"name": st.one_of(st.text(max_size=4), scalars), "datatype": datatypes},
    optional={
        "shape": st.one_of(shapes, st.lists(hostile_dims, max_size=4), scalars),
        "data": st.one_of(nested_data, scalars, json_values),
        "parameters": st.one_of(
            st.fixed_dictionaries({"binary_data_size": st.one_of(st.integers(-2, 64), scalars)}),
            json_values,
        ),
    },
)
documents = st.fixed_dictionaries(
    {"inputs": st.one_of(st.lists(input_specs, max_size=3), json_values)},
    optional={
        "outputs": st.one_of(
            st.lists(
                st.fixed_dictionaries(
                    {"name": st.text(max_size=3)},
                    optional={
                        "parameters": st.one_of(
                            json_values, st.fixed_dictionaries({"binary_data": scalars})
                        )
                    },
                ),
                max_size=3,
            ),
            json_values,
        ),
        "parameters": st.one_of(
            st.dictionaries(st.text(max_size=12), scalars, max_size=3), json_values
        ),
        "id": scalars,
    },
)


@given(documents, st.binary(max_size=64))
def test_structured_documents(doc: dict[str, Any], tail: bytes) -> None:
    header = _dumps(doc)
    _decode(header)
    _decode(header + tail, len(header))


@given(near_valid_inputs())
def test_near_valid_inputs(tensor: dict[str, Any]) -> None:
    header = _dumps({"inputs": [tensor]})
    size = tensor.get("parameters", {}).get("binary_data_size")
    if size is None:
        _decode(header)
    else:
        _decode(header + b"\1" * size, len(header))


@given(
    st.sampled_from(JSON_TYPES).flatmap(lambda t: st.tuples(st.just(t), _json_array(t))),
    st.booleans(),
)
def test_json_round_trip(case: tuple[str, Any], nested: bool) -> None:
    datatype, array = case
    data = array.tolist() if nested else array.ravel().tolist()
    if datatype == "BYTES":
        data = _utf8(data)
    tensor = {"name": "X", "datatype": datatype, "shape": list(array.shape), "data": data}
    request, _ = decode_request("model", "", orjson.dumps({"inputs": [tensor]}), None)
    assert same(request.inputs[0].data, array)


def _json_array(datatype: str) -> st.SearchStrategy[Any]:
    if datatype == "BYTES":
        return st.composite(
            lambda draw: text_array(draw, draw(st.lists(st.integers(0, 3), max_size=3).map(tuple)))
        )()
    return arrays(datatype)


def _utf8(data: Any) -> Any:
    if isinstance(data, list):
        return [_utf8(item) for item in data]
    return data.decode()


@given(
    st.lists(st.sampled_from(list(NUMERIC_DTYPES) + ["BYTES"]), min_size=1, max_size=3).flatmap(
        lambda types: st.tuples(st.just(types), st.tuples(*(arrays(t) for t in types)))
    )
)
def test_binary_round_trip(case: tuple[list[str], tuple[Any, ...]]) -> None:
    datatypes_, tensors = case
    body, header_length = _binary_body(datatypes_, tensors)
    request, _ = decode_request("model", "", body, header_length)
    for datatype, array, got in zip(datatypes_, tensors, request.inputs, strict=True):
        assert got.datatype == datatype
        assert same(got.data, array)


def _binary_body(types: list[str], tensors: tuple[Any, ...]) -> tuple[bytes, int]:
    specs, blobs = [], []
    for i, (datatype, array) in enumerate(zip(types, tensors, strict=True)):
        raw = to_raw(datatype, array)
        blobs.append(raw)
        specs.append(
            {
                "name": f"IN{i}",
                "datatype": datatype,
                "shape": list(array.shape),
                "parameters": {"binary_data_size": len(raw)},
            }
        )
    header = orjson.dumps({"inputs": specs})
    return header + b"".join(blobs), len(header)


@given(
    st.lists(st.sampled_from(list(NUMERIC_DTYPES) + ["BYTES"]), min_size=1, max_size=2).flatmap(
        lambda types: st.tuples(st.just(types), st.tuples(*(arrays(t) for t in types)))
    ),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
    st.integers(-4, 4),
    st.integers(0, 10_000),
)
def test_mutated_binary_bodies(
    case: tuple[list[str], tuple[Any, ...]],
    flips: list[tuple[int, int]],
    header_shift: int,
    cut: int,
) -> None:
    body, header_length = _binary_body(*case)
    mutated = bytearray(body)
    for position, value in flips:
        if mutated:
            mutated[position % len(mutated)] = value
    mutated = mutated[: len(mutated) - cut % (len(mutated) + 1)]
    length = only_fnserve_errors(
        lambda: parse_header_length(b"%d" % (header_length + header_shift), len(mutated))
    )
    if length is not None:
        _decode(bytes(mutated), length)


@given(st.one_of(st.binary(max_size=24), st.text(max_size=24).map(str.encode)), st.integers(0, 100))
def test_header_length_values(value: bytes, body_length: int) -> None:
    only_fnserve_errors(lambda: parse_header_length(value, body_length))


@given(
    st.binary(max_size=300), st.sampled_from([b"gzip", b"deflate", b"identity", b"br", b" GZIP "])
)
def test_arbitrary_compressed_bodies(body: bytes, encoding: bytes) -> None:
    only_fnserve_errors(lambda: decompress(body, encoding, LIMIT))


@given(
    st.lists(st.binary(max_size=200), min_size=1, max_size=5),
    st.sampled_from([b"gzip", b"deflate"]),
)
def test_compression_round_trip(parts: list[bytes], encoding: bytes) -> None:
    if encoding == b"gzip":  # several members back to back are one valid gzip body
        body = b"".join(gzip.compress(part) for part in parts)
    else:
        body = compress(b"".join(parts), encoding)
    assert decompress(body, encoding, LIMIT) == b"".join(parts)
    raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)  # raw deflate, seen in the wild
    raw_body = raw.compress(b"".join(parts)) + raw.flush()
    assert decompress(raw_body, b"deflate", LIMIT) == b"".join(parts)


@given(
    st.lists(st.binary(max_size=20), min_size=1, max_size=4),
    st.lists(st.tuples(st.integers(0, 500), st.integers(0, 255)), max_size=3),
)
def test_mutated_gzip(parts: list[bytes], flips: list[tuple[int, int]]) -> None:
    body = bytearray(b"".join(gzip.compress(part) for part in parts))
    for position, value in flips:
        body[position % len(body)] = value
    only_fnserve_errors(lambda: decompress(bytes(body), b"gzip", LIMIT))


@given(
    st.sampled_from(list(NUMERIC_DTYPES) + ["BYTES"]).flatmap(
        lambda t: st.tuples(st.just(t), arrays(t))
    ),
    st.booleans(),
)
def test_response_round_trip(case: tuple[str, Any], binary: bool) -> None:
    datatype, array = case
    response = InferResponse("model", "1", (InferOutput("OUT", datatype, array),))
    body = only_fnserve_errors(lambda: encode_response(response, OutputPlan(default_binary=binary)))
    if body is None:  # FP16/BF16 or non-UTF-8 BYTES asked for as JSON: a client error
        assert not binary
        return
    payload, header_length = body
    if header_length is None:
        (output,) = json.loads(payload)["outputs"]
        tensor = {
            "name": "OUT",
            "datatype": datatype,
            "shape": output["shape"],
            "data": output["data"],
        }
        request, _ = decode_request("model", "", orjson.dumps({"inputs": [tensor]}), None)
    else:
        header = json.loads(payload[:header_length])
        header["inputs"] = header.pop("outputs")
        new_header = orjson.dumps({"inputs": header["inputs"]})
        request, _ = decode_request(
            "model", "", new_header + payload[header_length:], len(new_header)
        )
    assert same(request.inputs[0].data, array)
    assert np.asarray(request.inputs[0].data).shape == array.shape
