"""Encode requests once, before the load starts: users then send ready-made bytes.

HTTP JSON and HTTP binary tensors (Triton's extension, as tritonclient sends them) and the
serialized gRPC `ModelInferRequest`. No output list is sent, so the server returns every
output (binary ones when the request is binary, as tritonclient asks for them).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import quote

from fnserve.bench.data import Tensor
from fnserve.bench.options import BenchError
from fnserve.errors import InvalidInputError
from fnserve.protocol import grpc_service_pb2 as pb
from fnserve.tensors import to_json, to_raw

GRPC_INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"


@dataclass(frozen=True)
class HttpRequest:
    """A ready POST body for `…/infer` and its headers."""

    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def infer_path(model: str, version: str = "") -> str:
    """`/v2/models/{m}[/versions/{v}]/infer`."""
    path = f"/v2/models/{quote(model, safe='')}"
    return f"{path}/versions/{quote(version, safe='')}/infer" if version else f"{path}/infer"


def http_json(tensors: Sequence[Tensor]) -> HttpRequest:
    """The KServe v2 JSON body (flat row-major data).

    Raises:
        BenchError: FP16/BF16 or non-UTF-8 BYTES inputs, which JSON cannot carry.
    """
    inputs = []
    for t in tensors:
        try:
            data = to_json(t.name, t.datatype, t.array)  # refuses FP16, BF16, non-UTF-8 BYTES
        except InvalidInputError:
            raise BenchError(
                f"input '{t.name}' ({t.datatype}) cannot travel as JSON, use --binary"
            ) from None
        inputs.append(
            {"name": t.name, "datatype": t.datatype, "shape": list(t.array.shape), "data": data}
        )
    body = json.dumps({"inputs": inputs}, separators=(",", ":")).encode()
    return HttpRequest(body, {"Content-Type": "application/json"})


def http_binary(tensors: Sequence[Tensor]) -> HttpRequest:
    """A JSON header followed by the raw tensors (`Inference-Header-Content-Length`)."""
    raws = [to_raw(t.datatype, t.array) for t in tensors]
    inputs = [
        {
            "name": t.name,
            "datatype": t.datatype,
            "shape": list(t.array.shape),
            "parameters": {"binary_data_size": len(raw)},
        }
        for t, raw in zip(tensors, raws, strict=True)
    ]
    header = json.dumps(
        {"inputs": inputs, "parameters": {"binary_data_output": True}}, separators=(",", ":")
    ).encode()
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(header)),
    }
    return HttpRequest(b"".join([header, *raws]), headers)


def grpc_infer(model: str, version: str, tensors: Sequence[Tensor]) -> bytes:
    """A serialized `inference.ModelInferRequest` with raw input contents."""
    request = pb.ModelInferRequest(model_name=model, model_version=version)
    for t in tensors:
        request.inputs.add(name=t.name, datatype=t.datatype, shape=list(t.array.shape))
        request.raw_input_contents.append(to_raw(t.datatype, t.array))
    return request.SerializeToString()
