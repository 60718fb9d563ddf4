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

from fnserve.errors import InvalidInputError, PayloadTooLargeError
from fnserve.limits import DEFAULT_LIMITS, MAX_DIM, MAX_DIMS, format_shape, quote

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
# numpy dtype -> protocol name, for arrays made in-process (uint16 reads as UINT16, not BF16)
_PROTOCOL_TYPES = {dt: name for name, dt in reversed(_NUMPY_DTYPES.items())}
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
        f"unknown datatype {quote(datatype)}, expected one of {', '.join(DATATYPES)}"
    )


def config_type(datatype: str) -> str:
    """Protocol name -> Triton config name (`FP32` -> `TYPE_FP32`, `BYTES` -> `TYPE_STRING`)."""
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


def protocol_type(config_name: str) -> str:
    """Triton config name -> protocol name (`TYPE_STRING` -> `BYTES`)."""
    name = config_name.removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def datatype_of(array: Any) -> str:
    """The protocol datatype of a numpy array (BYTES for strings and objects)."""
    return _PROTOCOL_TYPES.get(np.asarray(array).dtype, "BYTES")


def element_count(shape: Sequence[int]) -> int:
    """Number of elements of a tensor with this shape (checked by `check_dims` first)."""
    return math.prod(shape)


def check_shape(name: str, datatype: str, shape: Any) -> tuple[int, ...]:
    """Validate a JSON shape: a list of dims that `check_dims` accepts.

    Raises:
        InvalidInputError: not a list, or dims that `check_dims` refuses.
    """
    if type(shape) is not list:
        raise InvalidInputError(
            f"input '{name}': shape must be a list of integers, got {quote(shape)}"
        )
    return check_dims(name, datatype, shape)


def check_dims(name: str, datatype: str, dims: Sequence[Any]) -> tuple[int, ...]:
    """Validate dims from the wire in O(rank), before anything is sized from them.

    At most `MAX_DIMS` dims, each an integer in [0, 2^63 - 1], and the product of the non-zero
    dims times the item size within 2^63 - 1 bytes (what numpy can represent, even for an
    empty tensor). The product stops growing as soon as it is too large.

    Raises:
        InvalidInputError: any of these rules broken.
    """
    if len(dims) > MAX_DIMS:
        raise InvalidInputError(
            f"input '{name}': shape has {len(dims)} dims, more than the {MAX_DIMS} allowed"
        )
    shape = tuple(dims)
    dtype = _NUMPY_DTYPES.get(datatype)
    size = 1 if dtype is None else dtype.itemsize
    for dim in shape:
        if type(dim) is not int or not 0 <= dim <= MAX_DIM:
            raise InvalidInputError(
                f"input '{name}': shape must hold non-negative integers below 2^63, "
                f"got {quote(dim)}"
            )
        if dim:
            size *= dim
            if size > MAX_DIM:  # raised at once: the product never grows past 2^126
                raise InvalidInputError(
                    f"input '{name}': shape {format_shape(shape)} of {quote(datatype, 16)} is "
                    f"larger than {MAX_DIM} bytes"
                )
    return shape


def from_raw(
    name: str,
    datatype: str,
    shape: tuple[int, ...],
    buf: bytes | bytearray | memoryview,
    max_bytes_elements: int = DEFAULT_LIMITS.max_bytes_elements,
) -> Any:
    """Decode a raw little-endian tensor (the binary extension and gRPC raw contents).

    Args:
        name, datatype, shape: the tensor, `shape` already checked by `check_dims`.
        buf: its data.
        max_bytes_elements: most BYTES elements accepted (the request's remaining budget).

    Raises:
        InvalidInputError: the byte count does not match shape and datatype.
        PayloadTooLargeError: more BYTES elements than `max_bytes_elements`.
    """
    count = element_count(shape)
    if datatype == "BYTES":
        check_bytes_count(name, count, max_bytes_elements)
        return _bytes_from_raw(name, shape, count, memoryview(buf))
    wire = _WIRE_DTYPES.get(datatype)
    if wire is None:
        wire = _unknown_datatype(datatype)
    expected = count * wire.itemsize
    if len(buf) != expected:
        raise InvalidInputError(
            f"input '{name}': expected {expected} bytes for {datatype} {format_shape(shape)}, "
            f"got {len(buf)}"
        )
    array = np.frombuffer(buf, dtype=wire).reshape(shape)
    return array.astype(_NUMPY_DTYPES[datatype], copy=False)


def check_bytes_count(name: str, count: int, limit: int) -> None:
    """Refuse a BYTES tensor of more than `limit` elements before any element is built.

    Raises:
        PayloadTooLargeError: `count` is over `limit`.
    """
    if count > limit:
        raise PayloadTooLargeError(
            f"input '{name}': {count} BYTES elements are more than the {limit} left for this "
            "request"
        )


def _bytes_from_raw(name: str, shape: tuple[int, ...], count: int, view: memoryview) -> Any:
    end = len(view)
    if count * 4 > end:  # every element has a 4-byte length prefix
        raise InvalidInputError(
            f"input '{name}': {end} bytes cannot hold {count} BYTES elements for shape "
            f"{format_shape(shape)}"
        )
    items: list[bytes] = []
    append = items.append
    offset = 0
    # Parse exactly `count` elements: extra data is refused after at most that much work.
    for _ in range(count):
        if offset + 4 > end:
            raise InvalidInputError(
                f"input '{name}': expected {count} BYTES elements for shape "
                f"{format_shape(shape)}, the data holds fewer"
            )
        (length,) = _LENGTH.unpack_from(view, offset)
        offset += 4
        stop = offset + length
        if stop > end:
            raise InvalidInputError(
                f"input '{name}': BYTES element of {length} bytes runs past the end of the data"
            )
        append(bytes(view[offset:stop]))
        offset = stop
    if offset != end:
        raise InvalidInputError(
            f"input '{name}': expected {count} BYTES elements for shape {format_shape(shape)}, "
            f"the data holds {end - offset} bytes more"
        )
    array = np.empty(count, dtype=np.object_)
    array[:] = items
    return array.reshape(shape)


def to_raw(datatype: str, array: Any) -> bytes:
    """Encode an array as raw little-endian bytes (BYTES: 4-byte length prefix per element)."""
    if datatype == "BYTES":
        # One growing buffer: a list of prefix and data objects cost ~110 bytes per element
        # (1-byte elements: 20x the output) and was slower for large tensors.
        out = bytearray()
        pack = _LENGTH.pack
        for item in np.asarray(array, dtype=np.object_).ravel():
            data = item if type(item) is bytes else _as_bytes(item)
            out += pack(len(data))
            out += data
        return bytes(out)
    return np.ascontiguousarray(array, dtype=_WIRE_DTYPES[datatype]).tobytes()


def _as_bytes(item: object) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode()
    if isinstance(item, bytearray | memoryview | np.bytes_):
        return bytes(item)
    return str(item).encode()


def from_json(
    name: str,
    datatype: str,
    shape: tuple[int, ...],
    data: Any,
    max_bytes_elements: int = DEFAULT_LIMITS.max_bytes_elements,
) -> Any:
    """Decode JSON tensor data (flat, or nested as a regular array, row-major) into `shape`.

    Nested data must be rectangular (`[[1, 2], [3]]` is refused); its element count must
    match the shape's.

    Raises:
        InvalidInputError: binary-only datatype, jagged nesting, wrong element count or
            element types.
        PayloadTooLargeError: more BYTES elements than `max_bytes_elements`.
    """
    if datatype in _BINARY_ONLY:
        raise InvalidInputError(
            f"input '{name}': {datatype} data cannot be sent as JSON, use binary tensor data"
        )
    dtype = numpy_dtype(datatype)
    count = element_count(shape)
    if datatype == "BYTES" or datatype == "BOOL":
        flat = _flatten(name, data)
        _check_count(name, shape, count, len(flat))
        if datatype == "BYTES":
            check_bytes_count(name, count, max_bytes_elements)
            return _bytes_from_json(name, flat).reshape(shape)
        if any(type(v) is not bool for v in flat):
            raise InvalidInputError(f"input '{name}': BOOL data must be true or false")
        return np.array(flat, dtype=dtype).reshape(shape)
    try:
        # numpy walks nested lists in C and refuses ragged ones ("inhomogeneous shape")
        array = np.array(data, dtype=dtype)
    except (TypeError, ValueError, OverflowError) as exc:
        if "inhomogeneous" in str(exc):
            raise _jagged(name) from None
        raise InvalidInputError(
            f"input '{name}': data does not fit {datatype}: {quote(str(exc), 200)}"
        ) from None
    _check_count(name, shape, count, array.size)
    return array.reshape(shape)


def _check_count(name: str, shape: tuple[int, ...], expected: int, got: int) -> None:
    if got != expected:
        raise InvalidInputError(
            f"input '{name}': expected {expected} elements for shape {format_shape(shape)}, "
            f"got {got}"
        )


def _flatten(name: str, data: Any) -> list[Any]:
    """Flatten nested lists in one pass, refusing any that are not a regular array."""
    if type(data) is not list:
        return [data]
    if not data or type(data[0]) is not list:
        return data
    # the first element at each depth fixes the length every list at that depth must have
    lengths: list[int] = []
    node: Any = data
    while type(node) is list:
        lengths.append(len(node))
        node = node[0] if node else None
    flat: list[Any] = []
    leaf_depth = len(lengths)
    stack = [iter(data)]
    while stack:
        depth = len(stack)
        for item in stack[-1]:
            if type(item) is list:
                if depth >= leaf_depth or len(item) != lengths[depth]:
                    raise _jagged(name)
                stack.append(iter(item))
                break
            if depth != leaf_depth:
                raise _jagged(name)
            flat.append(item)
        else:
            stack.pop()
    return flat


def _jagged(name: str) -> InvalidInputError:
    return InvalidInputError(
        f"input '{name}': nested data must be a regular array (every list at one depth the "
        "same length), got a jagged one"
    )


def _bytes_from_json(name: str, flat: list[Any]) -> Any:
    array = np.empty(len(flat), dtype=np.object_)
    for i, item in enumerate(flat):
        if type(item) is not str:
            raise InvalidInputError(
                f"input '{name}': BYTES data must be strings, got {quote(item)}"
            )
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
