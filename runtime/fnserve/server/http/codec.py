"""KServe v2 HTTP inference bodies <-> `InferRequest` / `InferResponse`.

Handles the JSON form and Triton's binary tensor extension in both directions: a JSON header
(`Inference-Header-Content-Length` bytes long) followed by raw tensors in the order the JSON
lists them, each sized by `parameters.binary_data_size`. A header length of 0 is Triton's "raw
binary request": the whole body is the single input of the model. Tensor conversion itself lives
in `fnserve.tensors`; this module only walks the documents and checks their shape.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import orjson

from fnserve.config.model_config import ModelConfig
from fnserve.errors import InvalidInputError, UnsupportedError
from fnserve.limits import DEFAULT_LIMITS, InputLimits, check_model, check_name, quote
from fnserve.tensors import (
    check_shape,
    element_count,
    from_json,
    from_raw,
    numpy_dtype,
    to_json,
    to_raw,
)
from fnserve.types import (
    NO_CLASSIFICATION,
    InferInput,
    InferRequest,
    InferResponse,
    ParamValue,
)

_SHARED_MEMORY_KEYS = ("shared_memory_region", "shared_memory_offset", "shared_memory_byte_size")
# Frontend-only request parameter: it picks the output encoding and never reaches the core.
_BINARY_DATA_OUTPUT = "binary_data_output"

# orjson parses and writes float-heavy bodies about ten times faster than stdlib json, and
# writes a float32's double form exactly as Triton does (0.1 -> 0.10000000149011612).
loads = orjson.loads
dumps = orjson.dumps
# orjson writes NaN and +-Infinity as null; stdlib json writes the NaN / Infinity tokens that
# tritonclient's rapidjson reads back, so documents holding them are re-encoded with it.
_NON_FINITE_ENCODER = json.JSONEncoder(separators=(",", ":"))


class OutputPlan:
    """Which outputs go back as binary tensor data and which as JSON.

    Args:
        default_binary: the choice for outputs the request did not list (`binary_data_output`).
        binary: per listed output, its `binary_data` parameter (Triton's default: False).
    """

    __slots__ = ("binary", "default_binary")

    def __init__(self, default_binary: bool = False, binary: Mapping[str, bool] | None = None):
        self.default_binary = default_binary
        self.binary = binary or {}

    def is_binary(self, name: str) -> bool:
        """Whether output `name` is sent as binary tensor data."""
        return self.binary.get(name, self.default_binary)


def parse_header_length(value: bytes | None, body_length: int) -> int | None:
    """Validate `Inference-Header-Content-Length` against the (decompressed) body length.

    Raises:
        InvalidInputError: not an integer, or outside [0, body_length] (Triton answers 400).
    """
    if value is None:
        return None
    try:
        length = int(value)
    except ValueError:
        raise InvalidInputError(
            "Inference-Header-Content-Length must be an integer, got "
            f"{quote(value.decode('latin-1'))}"
        ) from None
    if not 0 <= length <= body_length:
        raise InvalidInputError(
            f"Inference-Header-Content-Length {length} is outside the body of {body_length} bytes"
        )
    return length


def decode_request(
    model_name: str,
    model_version: str,
    body: bytes | bytearray | memoryview,
    header_length: int | None,
    limits: InputLimits = DEFAULT_LIMITS,
) -> tuple[InferRequest, OutputPlan]:
    """Decode a JSON (or JSON + binary) inference body; `header_length` None means all JSON.

    Raises:
        InvalidInputError: malformed JSON or tensors, a name or size past `limits`.
        UnsupportedError: shared memory asked for.
    """
    check_model(model_name, model_version, limits)
    if header_length is None:
        doc, binary = parse_json(body), memoryview(b"")
    else:
        view = memoryview(body)
        doc, binary = parse_json(view[:header_length]), view[header_length:]
    if type(doc) is not dict:
        raise InvalidInputError(f"inference request must be a JSON object, got {_kind(doc)}")
    inputs = _decode_inputs(doc.get("inputs"), binary, limits)
    parameters, default_binary = _request_parameters(doc.get("parameters"))
    outputs, plan, classes = _requested_outputs(doc.get("outputs"), default_binary, limits)
    request_id = doc.get("id", "")
    if type(request_id) is not str:
        raise InvalidInputError(f"request 'id' must be a string, got {quote(request_id)}")
    request = InferRequest(
        model_name, inputs, model_version, request_id, outputs, parameters, classification=classes
    )
    return request, plan


def decode_raw_request(
    model_name: str,
    model_version: str,
    body: bytes | bytearray | memoryview,
    config: ModelConfig,
    limits: InputLimits = DEFAULT_LIMITS,
) -> tuple[InferRequest, OutputPlan]:
    """Decode a raw binary request (header length 0): the body is the model's only input.

    As in Triton the tensor is one batch element: shape `[n]` (`[1, n]` when batching), n
    counted from the byte size; BYTES carries the whole body as one element.

    Raises:
        InvalidInputError: the model has more than one input, or the size does not fit.
    """
    if len(config.inputs) != 1:
        raise InvalidInputError(
            f"raw binary request needs a model with exactly one input, model '{model_name}' "
            f"has {len(config.inputs)}"
        )
    spec = config.inputs[0]
    if spec.datatype == "BYTES":
        data: Any = np.empty(1, dtype=np.object_)
        data[0] = bytes(body)
    else:
        itemsize = numpy_dtype(spec.datatype).itemsize
        if len(body) % itemsize:
            raise InvalidInputError(
                f"input '{spec.name}': raw body of {len(body)} bytes is not a whole number of "
                f"{spec.datatype} elements"
            )
        data = from_raw(
            spec.name, spec.datatype, (len(body) // itemsize,), body, limits.max_bytes_elements
        )
    if config.batching:
        data = data.reshape((1, *data.shape))
    inputs = (InferInput(spec.name, spec.datatype, data),)
    return InferRequest(model_name, inputs, model_version), OutputPlan(default_binary=True)


def encode_response(response: InferResponse, plan: OutputPlan) -> tuple[bytes, int | None]:
    """Encode a response; returns the body and the JSON header length (None: all JSON).

    Raises:
        InvalidInputError: an output that cannot be JSON (FP16, BF16, non-UTF-8 BYTES) was
            asked for as JSON.
    """
    blobs: list[bytes] = []
    outputs: list[dict[str, Any]] = []
    for output in response.outputs:
        data = output.data
        entry: dict[str, Any] = {
            "name": output.name,
            "datatype": output.datatype,
            "shape": list(data.shape),
        }
        if plan.is_binary(output.name):
            raw = to_raw(output.datatype, data)
            entry["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
        else:
            entry["data"] = to_json(output.name, output.datatype, data)
        outputs.append(entry)
    doc: dict[str, Any] = {
        "model_name": response.model_name,
        "model_version": response.model_version,
    }
    if response.id:
        doc["id"] = response.id
    if response.parameters:
        doc["parameters"] = dict(response.parameters)
    doc["outputs"] = outputs
    header = dumps(doc)
    if b"null" in header:  # only non-finite floats (or a string holding "null") make it
        header = _NON_FINITE_ENCODER.encode(doc).encode()
    if not blobs:
        return header, None
    return b"".join([header, *blobs]), len(header)


def parse_json(data: bytes | bytearray | memoryview) -> Any:
    """Parse a JSON document from a request body.

    Raises:
        InvalidInputError: not valid UTF-8 JSON.
    """
    try:
        return loads(data)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError
        raise InvalidInputError(f"malformed JSON in request body: {exc}") from None


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _decode_inputs(specs: Any, binary: memoryview, limits: InputLimits) -> tuple[InferInput, ...]:
    if type(specs) is not list:
        raise InvalidInputError(f"request 'inputs' must be a list, got {_kind(specs)}")
    inputs = []
    offset = 0
    budget = limits.max_bytes_elements  # BYTES elements left for this request
    for spec in specs:
        item, offset = _decode_input(spec, binary, offset, budget, limits)
        if item.datatype == "BYTES":
            budget -= item.data.size
        inputs.append(item)
    if offset != len(binary):
        raise InvalidInputError(
            f"request carries {len(binary) - offset} bytes of binary data beyond its inputs"
        )
    return tuple(inputs)


def _decode_input(
    spec: Any, binary: memoryview, offset: int, budget: int, limits: InputLimits
) -> tuple[InferInput, int]:
    if type(spec) is not dict:
        raise InvalidInputError(f"each input must be a JSON object, got {_kind(spec)}")
    name = spec.get("name")
    datatype = spec.get("datatype")
    if type(name) is not str or type(datatype) is not str:
        raise InvalidInputError(
            f"each input needs string 'name' and 'datatype', got {quote(name)} and "
            f"{quote(datatype)}"
        )
    check_name("input name", name, limits)
    shape = check_shape(name, datatype, spec.get("shape"))
    size = _binary_size(name, spec.get("parameters"))
    if size is not None:
        if "data" in spec:
            raise InvalidInputError(f"input '{name}': has both 'data' and binary_data_size")
        end = offset + size
        if end > len(binary):
            raise InvalidInputError(
                f"input '{name}': binary_data_size {size} runs past the end of the body "
                f"({len(binary) - offset} bytes left)"
            )
        data = from_raw(name, datatype, shape, binary[offset:end], budget)
        return InferInput(name, datatype, data), end
    data = spec.get("data")
    if data is None:
        if element_count(shape) != 0:
            raise InvalidInputError(f"input '{name}': no 'data' and no binary_data_size given")
        data = []
    return InferInput(name, datatype, from_json(name, datatype, shape, data, budget)), offset


def _binary_size(name: str, params: Any) -> int | None:
    if params is None:
        return None
    if type(params) is not dict:
        raise InvalidInputError(f"input '{name}': 'parameters' must be an object")
    if any(key in params for key in _SHARED_MEMORY_KEYS):
        raise UnsupportedError(f"input '{name}': shared memory is not supported by fnserve")
    size = params.get("binary_data_size")
    if size is None:
        return None
    if type(size) is not int or size < 0:
        raise InvalidInputError(
            f"input '{name}': binary_data_size must be a non-negative integer, got {quote(size)}"
        )
    return size


def _request_parameters(params: Any) -> tuple[dict[str, ParamValue], bool]:
    if params is None:
        return {}, False
    if type(params) is not dict:
        raise InvalidInputError(f"request 'parameters' must be an object, got {_kind(params)}")
    default_binary = params.pop(_BINARY_DATA_OUTPUT, False)
    if type(default_binary) is not bool:
        raise InvalidInputError(
            f"binary_data_output must be true or false, got {quote(default_binary)}"
        )
    for key, value in params.items():
        if key.startswith("triton_"):
            raise InvalidInputError(f"parameter {quote(key)} is reserved: names starting 'triton_'")
        if not isinstance(value, bool | int | float | str):
            raise InvalidInputError(
                f"parameter {quote(key)} must be a string, number or boolean, got {_kind(value)}"
            )
    return params, default_binary


def _requested_outputs(
    specs: Any, default_binary: bool, limits: InputLimits
) -> tuple[tuple[str, ...] | None, OutputPlan, Mapping[str, int]]:
    """The outputs asked for, how each goes back, and those asked for as classes (k)."""
    if specs is None:
        return None, OutputPlan(default_binary), NO_CLASSIFICATION
    if type(specs) is not list:
        raise InvalidInputError(f"request 'outputs' must be a list, got {_kind(specs)}")
    binary: dict[str, bool] = {}
    classes: dict[str, int] = {}
    for spec in specs:
        if type(spec) is not dict or type(spec.get("name")) is not str:
            raise InvalidInputError(
                f"each requested output needs a string 'name', got {quote(spec)}"
            )
        name = check_name("output name", spec["name"], limits)
        params = spec.get("parameters")
        binary[name] = _output_binary(name, params)
        if params and "classification" in params:
            count = _class_count(name, params["classification"])
            if count:  # 0 asks for the tensor itself, as in Triton
                classes[name] = count
    return tuple(binary), OutputPlan(default_binary, binary), classes or NO_CLASSIFICATION


def _class_count(name: str, value: Any) -> int:
    """Triton reads `classification` as an unsigned integer (400 otherwise)."""
    if type(value) is not int or value < 0:
        raise InvalidInputError(
            f"output '{name}': unable to set 'classification', expected an unsigned integer, "
            f"got {quote(value)}"
        )
    return value


def _output_binary(name: str, params: Any) -> bool:
    if params is None:
        return False
    if type(params) is not dict:
        raise InvalidInputError(f"output '{name}': 'parameters' must be an object")
    if any(key in params for key in _SHARED_MEMORY_KEYS):
        raise UnsupportedError(f"output '{name}': shared memory is not supported by fnserve")
    flag = params.get("binary_data", False)
    if type(flag) is not bool:
        raise InvalidInputError(
            f"output '{name}': binary_data must be true or false, got {quote(flag)}"
        )
    return flag
