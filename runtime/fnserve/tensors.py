"""Datatypes and tensor conversions between numpy and the wire (raw bytes and JSON).

Protocol datatype names (`FP32`, `BYTES`, ...) are the vocabulary everywhere in fnserve; config
files use Triton's `TYPE_*` names, translated here. Arrays in the core are numpy arrays:
BYTES is an object array of `bytes`, BF16 (which numpy lacks) travels as its raw uint16 bits.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from fnserve.errors import InvalidInputError

_NUMPY_DTYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
    "BF16": np.dtype(np.uint16),
}
DATATYPES: tuple[str, ...] = tuple(_NUMPY_DTYPES)
# Little-endian forms for the wire: Triton's raw tensors are little-endian whatever the host.
_WIRE_DTYPES = {name: dt.newbyteorder("<") for name, dt in _NUMPY_DTYPES.items() if name != "BYTES"}
# Types that JSON cannot carry exactly; Triton refuses them there too.
_BINARY_ONLY = frozenset({"FP16", "BF16"})
_LENGTH = struct.Struct("<I")


def numpy_dtype(datatype: str) -> np.dtype[Any]:
    """The numpy dtype that holds `datatype` in the core (object for BYTES, uint16 for BF16)."""
    # (np.dtype has __len__ == 0, so `or` cannot be used as a fallback here)
    dtype = _NUMPY_DTYPES.get(datatype)
    return _unknown_datatype(datatype) if dtype is None else dtype


def _unknown_datatype(datatype: str) -> np.dtype[Any]:
    raise InvalidInputError(
        f"unknown datatype '{datatype}', expected one of {', '.join(DATATYPES)}"
    )


def config_type(datatype: str) -> str:
    """Protocol name -> Triton config name (`FP32` -> `TYPE_FP32`, `BYTES` -> `TYPE_STRING`)."""
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


def protocol_type(config_name: str) -> str:
    """Triton config name -> protocol name (`TYPE_STRING` -> `BYTES`)."""
    name = config_name.removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def element_count(shape: Sequence[int]) -> int:
    """Number of elements of a tensor with this shape."""
    return math.prod(shape)


def check_shape(name: str, shape: Sequence[Any]) -> tuple[int, ...]:
    """Validate a wire shape: a list of non-negative integers."""
    if not isinstance(shape, Sequence) or isinstance(shape, str | bytes):
        raise InvalidInputError(f"input '{name}': shape must be a list of integers, got {shape!r}")
    for dim in shape:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 0:
            raise InvalidInputError(
                f"input '{name}': shape must hold non-negative integers, got {list(shape)}"
            )
    return tuple(shape)


def from_raw(name: str, datatype: str, shape: tuple[int, ...], buf: bytes | memoryview) -> Any:
    """Decode a raw little-endian tensor (the binary extension and gRPC raw contents).

    Raises:
        InvalidInputError: the byte count does not match shape and datatype.
    """
    count = element_count(shape)
    if datatype == "BYTES":
        return _bytes_from_raw(name, shape, count, memoryview(buf))
    wire = _WIRE_DTYPES.get(datatype)
    if wire is None:
        wire = _unknown_datatype(datatype)
    expected = count * wire.itemsize
    if len(buf) != expected:
        raise InvalidInputError(
            f"input '{name}': expected {expected} bytes for {datatype} {list(shape)}, "
            f"got {len(buf)}"
        )
    array = np.frombuffer(buf, dtype=wire).reshape(shape)
    return array.astype(_NUMPY_DTYPES[datatype], copy=False)


def _bytes_from_raw(name: str, shape: tuple[int, ...], count: int, view: memoryview) -> Any:
    items: list[bytes] = []
    offset, end = 0, len(view)
    while offset < end:
        if offset + 4 > end:
            raise InvalidInputError(f"input '{name}': truncated BYTES element length prefix")
        (length,) = _LENGTH.unpack_from(view, offset)
        offset += 4
        if offset + length > end:
            raise InvalidInputError(
                f"input '{name}': BYTES element of {length} bytes runs past the end of the data"
            )
        items.append(bytes(view[offset : offset + length]))
        offset += length
    if len(items) != count:
        raise InvalidInputError(
            f"input '{name}': expected {count} BYTES elements for shape {list(shape)}, "
            f"got {len(items)}"
        )
    array = np.empty(count, dtype=np.object_)
    array[:] = items
    return array.reshape(shape)


def to_raw(datatype: str, array: Any) -> bytes:
    """Encode an array as raw little-endian bytes (BYTES: 4-byte length prefix per element)."""
    if datatype == "BYTES":
        parts: list[bytes] = []
        for item in np.asarray(array, dtype=np.object_).ravel():
            data = _as_bytes(item)
            parts.append(_LENGTH.pack(len(data)))
            parts.append(data)
        return b"".join(parts)
    return np.ascontiguousarray(array, dtype=_WIRE_DTYPES[datatype]).tobytes()


def _as_bytes(item: object) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode()
    if isinstance(item, bytearray | memoryview | np.bytes_):
        return bytes(item)
    return str(item).encode()


def from_json(name: str, datatype: str, shape: tuple[int, ...], data: Any) -> Any:
    """Decode JSON tensor data (nested or flat, row-major) into an array of `shape`.

    Raises:
        InvalidInputError: binary-only datatype, wrong element count or element types.
    """
    if datatype in _BINARY_ONLY:
        raise InvalidInputError(
            f"input '{name}': {datatype} data cannot be sent as JSON, use binary tensor data"
        )
    dtype = numpy_dtype(datatype)
    flat = _flatten(data)
    count = element_count(shape)
    if len(flat) != count:
        raise InvalidInputError(
            f"input '{name}': expected {count} elements for shape {list(shape)}, got {len(flat)}"
        )
    if datatype == "BYTES":
        return _bytes_from_json(name, flat).reshape(shape)
    try:
        array = np.array(flat, dtype=dtype)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidInputError(f"input '{name}': data does not fit {datatype}: {exc}") from None
    if datatype == "BOOL" and any(not isinstance(v, bool) for v in flat):
        raise InvalidInputError(f"input '{name}': BOOL data must be true or false")
    return array.reshape(shape)


def _flatten(data: Any) -> list[Any]:
    if not isinstance(data, list):
        return [data]
    if not data or not isinstance(data[0], list):
        return data
    flat: list[Any] = []
    stack = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            flat.append(item)
        else:
            stack.pop()
    return flat


def _bytes_from_json(name: str, flat: list[Any]) -> Any:
    array = np.empty(len(flat), dtype=np.object_)
    for i, item in enumerate(flat):
        if not isinstance(item, str):
            raise InvalidInputError(f"input '{name}': BYTES data must be strings, got {item!r}")
        array[i] = item.encode()
    return array


def to_json(name: str, datatype: str, array: Any) -> list[Any]:
    """Encode an array as a flat JSON list (Triton's form).

    Raises:
        InvalidInputError: FP16/BF16, or BYTES that are not UTF-8 (the client must ask for binary).
    """
    if datatype in _BINARY_ONLY:
        raise InvalidInputError(
            f"output '{name}': {datatype} cannot be returned as JSON, request binary_data"
        )
    if datatype != "BYTES":
        values: list[Any] = np.asarray(array).ravel().tolist()
        return values
    try:
        return [_as_bytes(item).decode() for item in np.asarray(array, dtype=np.object_).ravel()]
    except UnicodeDecodeError:
        raise InvalidInputError(
            f"output '{name}': BYTES data is not valid UTF-8, request binary_data"
        ) from None
