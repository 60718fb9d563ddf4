"""Job requests and results as bytes: every datatype round-trips exactly, BYTES included."""

from __future__ import annotations

import numpy as np
import pytest

from fnserve.errors import InvalidInputError
from fnserve.jobs.codec import (
    BinaryOutputs,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    request_hash,
)
from fnserve.types import InferInput, InferOutput, InferRequest, InferResponse

ARRAYS = [
    ("FP32", np.arange(6, dtype=np.float32).reshape(2, 3)),
    ("FP16", np.array([[0.5, -1.25]], dtype=np.float16)),
    ("INT8", np.array([-128, 0, 127], dtype=np.int8)),
    ("UINT64", np.array([2**64 - 1], dtype=np.uint64)),
    ("BOOL", np.array([[True, False]])),
    ("BYTES", np.array([b"", b"\x00\xffbin", "h\u00e9llo".encode()], dtype=np.object_)),
    ("FP64", np.zeros((0, 4), dtype=np.float64)),
]


def _request() -> InferRequest:
    inputs = tuple(InferInput(f"IN_{dt}", dt, a) for dt, a in ARRAYS)
    return InferRequest("m", inputs, "2", "req-1", ("OUT",), {"custom": 1.5, "flag": True})


def test_request_round_trips_with_binary_choices() -> None:
    binary = BinaryOutputs(True, {"OUT": False})
    request, got_binary = decode_request(encode_request(_request(), binary))
    original = _request()
    assert (request.model_name, request.model_version, request.id) == ("m", "2", "req-1")
    assert request.outputs == ("OUT",)
    assert dict(request.parameters) == {"custom": 1.5, "flag": True}
    assert got_binary == binary
    for got, want in zip(request.inputs, original.inputs, strict=True):
        assert (got.name, got.datatype) == (want.name, want.datatype)
        assert got.data.shape == want.data.shape
        assert got.data.tolist() == want.data.tolist()


def test_a_classification_round_trips_and_its_absence_changes_no_bytes() -> None:
    plain = _request()
    classified = plain._replace(classification={"OUT": 3})
    assert dict(decode_request(encode_request(classified))[0].classification) == {"OUT": 3}
    assert decode_request(encode_request(plain))[0].classification == {}
    assert b"classification" not in encode_request(plain)  # jobs stored before hash the same


def test_response_round_trips() -> None:
    outputs = tuple(InferOutput(f"OUT_{dt}", dt, a) for dt, a in ARRAYS)
    response = InferResponse("m", "1", outputs, "req-9", {"p": "v"})
    got, binary = decode_response(encode_response(response, BinaryOutputs(False, {"X": True})))
    assert (got.model_name, got.model_version, got.id) == ("m", "1", "req-9")
    assert dict(got.parameters) == {"p": "v"}
    assert binary.is_binary("X")
    assert not binary.is_binary("Y")
    for a, b in zip(got.outputs, outputs, strict=True):
        assert a.datatype == b.datatype
        assert a.data.dtype == b.data.dtype
        assert a.data.tolist() == b.data.tolist()


def test_equal_requests_encode_equally_and_hash_by_model() -> None:
    data = encode_request(_request())
    assert data == encode_request(_request())
    assert request_hash("m", "", data) == request_hash("m", "", data)
    assert request_hash("m", "", data) != request_hash("m", "1", data)
    assert request_hash("ab", "", data) != request_hash("a", "b", data)


def test_foreign_bytes_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="not a FNJR1 record"):
        decode_response(encode_request(_request()))
