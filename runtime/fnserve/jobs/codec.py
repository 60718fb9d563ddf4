"""A job's request and result as bytes: what the job store keeps.

One layout for both: a magic tag, a 4-byte big-endian header length, a JSON header (orjson)
that names each tensor, its datatype, shape and byte size, then the tensors' raw little-endian
bytes back to back (BYTES as 4-byte length-prefixed elements, as Triton's binary extension
writes them; `fnserve.tensors` does the conversion). The request also keeps which outputs the
client asked for as binary data, so the stored result is answered as `/infer` would have.
"""

from __future__ import annotations

import hashlib
import struct
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from fnserve.errors import InvalidInputError
from fnserve.tensors import check_shape, from_raw, to_raw
from fnserve.types import (
    NO_CLASSIFICATION,
    InferInput,
    InferOutput,
    InferRequest,
    InferResponse,
    ParamValue,
)

_REQUEST_MAGIC = b"FNJQ1"
_RESPONSE_MAGIC = b"FNJR1"
_LENGTH = struct.Struct(">I")
# Stored requests passed the request limits when they were submitted.
_NO_LIMIT = sys.maxsize


@dataclass(frozen=True, slots=True)
class BinaryOutputs:
    """Which outputs the submitted request wanted as binary tensor data (HTTP's
    `binary_data_output` and per-output `binary_data`; gRPC answers in raw form anyway).

    Args:
        default: the choice for outputs the request did not list.
        outputs: per listed output, its choice.
    """

    default: bool = False
    outputs: Mapping[str, bool] = field(default_factory=dict)

    def is_binary(self, name: str) -> bool:
        return self.outputs.get(name, self.default)


def encode_request(request: InferRequest, binary: BinaryOutputs | None = None) -> bytes:
    """The bytes a job stores for `request` (deterministic: equal requests, equal bytes)."""
    binary = binary or BinaryOutputs()
    header: dict[str, Any] = {
        "model": request.model_name,
        "version": request.model_version,
        "id": request.id,
        "outputs": None if request.outputs is None else list(request.outputs),
        "parameters": dict(request.parameters),
        "binary": {"default": binary.default, "outputs": dict(binary.outputs)},
    }
    if request.classification:  # only then: requests stored before keep their bytes
        header["classification"] = dict(request.classification)
    return _pack(_REQUEST_MAGIC, header, request.inputs)


def decode_request(data: bytes) -> tuple[InferRequest, BinaryOutputs]:
    """The request (and output choices) `encode_request` stored.

    Raises:
        InvalidInputError: the bytes are not an encoded request.
    """
    header, inputs = _unpack(_REQUEST_MAGIC, data)
    outputs = header["outputs"]
    parameters: dict[str, ParamValue] = header["parameters"]
    request = InferRequest(
        header["model"],
        tuple(InferInput(t.name, t.datatype, t.data) for t in inputs),
        header["version"],
        header["id"],
        None if outputs is None else tuple(outputs),
        parameters,
        classification=header.get("classification") or NO_CLASSIFICATION,
    )
    binary = header["binary"]
    return request, BinaryOutputs(binary["default"], binary["outputs"])


def encode_response(response: InferResponse, binary: BinaryOutputs | None = None) -> bytes:
    """The bytes a job stores as its result, with the request's output choices (`binary`)."""
    binary = binary or BinaryOutputs()
    header: dict[str, Any] = {
        "model": response.model_name,
        "version": response.model_version,
        "id": response.id,
        "parameters": dict(response.parameters),
        "binary": {"default": binary.default, "outputs": dict(binary.outputs)},
    }
    return _pack(_RESPONSE_MAGIC, header, response.outputs)


def decode_response(data: bytes) -> tuple[InferResponse, BinaryOutputs]:
    """The response (and output choices) `encode_response` stored.

    Raises:
        InvalidInputError: the bytes are not an encoded response.
    """
    header, outputs = _unpack(_RESPONSE_MAGIC, data)
    response = InferResponse(
        header["model"],
        header["version"],
        tuple(InferOutput(t.name, t.datatype, t.data) for t in outputs),
        header["id"],
        header["parameters"],
    )
    binary = header["binary"]
    return response, BinaryOutputs(binary["default"], binary["outputs"])


def request_hash(model: str, version: str, request: bytes) -> str:
    """What tells two submissions under one idempotency key apart (hex SHA-256)."""
    digest = hashlib.sha256()
    for part in (model.encode(), version.encode()):
        digest.update(_LENGTH.pack(len(part)))
        digest.update(part)
    digest.update(request)
    return digest.hexdigest()


def _pack(
    magic: bytes, header: dict[str, Any], tensors: tuple[InferInput | InferOutput, ...]
) -> bytes:
    blobs = [to_raw(t.datatype, t.data) for t in tensors]
    header["tensors"] = [
        {"name": t.name, "datatype": t.datatype, "shape": list(t.data.shape), "size": len(blob)}
        for t, blob in zip(tensors, blobs, strict=True)
    ]
    head = orjson.dumps(header)
    return b"".join([magic, _LENGTH.pack(len(head)), head, *blobs])


def _unpack(magic: bytes, data: bytes) -> tuple[dict[str, Any], list[InferOutput]]:
    view = memoryview(data)
    start = len(magic) + _LENGTH.size
    if bytes(view[: len(magic)]) != magic or len(view) < start:
        raise InvalidInputError(f"stored job data is not a {magic.decode()} record")
    (length,) = _LENGTH.unpack_from(view, len(magic))
    header: dict[str, Any] = orjson.loads(view[start : start + length])
    offset = start + length
    tensors = []
    for spec in header["tensors"]:
        shape = check_shape(spec["name"], spec["datatype"], spec["shape"])
        end = offset + spec["size"]
        array = from_raw(spec["name"], spec["datatype"], shape, view[offset:end], _NO_LIMIT)
        tensors.append(InferOutput(spec["name"], spec["datatype"], array))
        offset = end
    return header, tensors
