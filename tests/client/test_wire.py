"""The client's wire forms against the server's own codec: what `infer_body` builds, the HTTP
frontend decodes to the same arrays; what the frontend encodes, `decode_outputs` reads back."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fnserve.client.wire import Job, decode_outputs, infer_body
from fnserve.errors import InvalidInputError
from fnserve.jobs.model import JobState
from fnserve.server.http.codec import OutputPlan, decode_request, encode_response
from fnserve.tensors import datatype_of
from fnserve.types import InferOutput, InferResponse

ARRAYS: dict[str, Any] = {
    "F32": np.arange(6, dtype=np.float32).reshape(2, 3),
    "F16": np.array([0.5, -1.25], dtype=np.float16),
    "I8": np.array([[-128, 127]], dtype=np.int8),
    "U64": np.array([2**64 - 1], dtype=np.uint64),
    "B": np.array([True, False]),
    "S": np.array([b"x", b"", "\u00e9".encode()], dtype=np.object_),
}


def _same(a: np.ndarray, b: np.ndarray) -> None:
    assert a.shape == b.shape
    assert a.dtype == b.dtype
    assert a.tolist() == b.tolist()


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_the_server_decodes_what_the_client_encodes(binary: bool) -> None:
    arrays = ARRAYS if binary else {k: v for k, v in ARRAYS.items() if k != "F16"}
    body = infer_body(arrays, outputs=["OUT"] if not binary else None, binary=binary)
    length = body.headers.get("Inference-Header-Content-Length")
    request, plan = decode_request("m", "", body.content, None if length is None else int(length))
    for tensor in request.inputs:
        _same(tensor.data, arrays[tensor.name])
    assert [t.name for t in request.inputs] == list(arrays)
    assert plan.is_binary("anything") is binary
    assert request.outputs == (None if binary else ("OUT",))


def test_strings_become_bytes() -> None:
    body = infer_body({"S": np.array(["ab", "c"])})
    length = int(body.headers["Inference-Header-Content-Length"])
    request, _ = decode_request("m", "", body.content, length)
    assert request.inputs[0].datatype == "BYTES"
    assert request.inputs[0].data.tolist() == [b"ab", b"c"]


def test_fp16_as_json_is_refused_naming_the_input() -> None:
    with pytest.raises(InvalidInputError, match="input 'F16': FP16 data cannot travel as JSON"):
        infer_body({"F16": ARRAYS["F16"]}, binary=False)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_the_client_decodes_what_the_server_encodes(binary: bool) -> None:
    arrays = ARRAYS if binary else {k: v for k, v in ARRAYS.items() if k != "F16"}
    outputs = tuple(
        InferOutput(name, "BYTES" if name == "S" else datatype_of(a), a)
        for name, a in arrays.items()
    )
    content, length = encode_response(InferResponse("m", "1", outputs), OutputPlan(binary))
    decoded = decode_outputs(content, None if length is None else str(length))
    assert list(decoded) == list(arrays)
    for name, array in arrays.items():
        _same(decoded[name], array)


@pytest.mark.parametrize(
    ("content", "length"),
    [(b"{}", None), (b'{"outputs": [{"name": "x"}]}', None), (b"{}", "99")],
    ids=["no outputs", "no datatype", "header past the body"],
)
def test_a_malformed_answer_is_a_value_error(content: bytes, length: str | None) -> None:
    with pytest.raises(ValueError, match="malformed|past"):
        decode_outputs(content, length)


def test_job_documents_round_trip() -> None:
    doc = {
        "id": "j1", "model": "m", "version": "2", "state": "failed", "attempts": 3,
        "max_attempts": 3, "created_at": "2026-01-02T03:04:05.000006Z",
        "started_at": "2026-01-02T03:04:06.000000Z", "finished_at": "2026-01-02T03:04:07.500000Z",
        "error": "boom", "idempotency_key": "k", "callback_url": None, "result_size": None,
    }  # fmt: skip
    job = Job.from_json(doc)
    assert job.state is JobState.FAILED
    assert job.done
    assert job.finished_at is not None
    assert job.started_at is not None
    assert (job.finished_at - job.started_at).total_seconds() == 1.5
    assert job.to_json() == doc
    with pytest.raises(ValueError, match="not a job"):
        Job.from_json({"id": "x"})
