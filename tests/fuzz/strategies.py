"""Hypothesis strategies shared by the fuzzers: wire values, hostile shapes, valid tensors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar, cast

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fnserve.errors import FnserveError
from fnserve.tensors import DATATYPES

T = TypeVar("T")

# Datatypes each wire form can carry; BF16 travels as uint16 bits.
JSON_TYPES = [t for t in DATATYPES if t not in ("FP16", "BF16")]
NUMERIC_DTYPES = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BF16": np.uint16,
}

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=24,
)
# Dims a client might send: ordinary, edge, huge, negative, not integers at all.
dims = st.one_of(
    st.integers(min_value=0, max_value=4),
    st.sampled_from([0, 1, 2**31, 2**62, 2**63 - 1, 2**63, 2**64 - 1, -1, -(2**63)]),
    st.integers(min_value=-(2**64), max_value=2**64),
)
hostile_dims = st.one_of(dims, st.booleans(), st.floats(), st.text(max_size=3), st.none())
shapes = st.one_of(
    st.lists(dims, max_size=6),
    st.lists(st.just(1), min_size=63, max_size=70),
    st.lists(st.sampled_from([2**62, 0]), min_size=2, max_size=80),
)
datatypes = st.one_of(st.sampled_from(DATATYPES), st.sampled_from(["", "FP8", "STRING", "fp32"]))
# Nested lists that may be jagged, of values that may not fit the datatype.
nested_data = st.recursive(
    st.lists(scalars, max_size=5), lambda inner: st.lists(inner, max_size=4), max_leaves=30
)


def only_fnserve_errors(call: Callable[[], T]) -> T | None:
    """Run `call`; an `FnserveError` is an accepted outcome, anything else fails the test."""
    try:
        return call()
    except FnserveError:
        return None


@st.composite
def arrays(draw: st.DrawFn, datatype: str, max_dims: int = 3) -> Any:
    """A valid tensor of `datatype`, as the core holds it (object array of bytes for BYTES)."""
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=max_dims, min_side=0, max_side=4))
    if datatype == "BYTES":
        items = draw(
            st.lists(
                st.binary(max_size=6), min_size=int(np.prod(shape)), max_size=int(np.prod(shape))
            )
        )
        array = np.empty(len(items), dtype=np.object_)
        array[:] = items
        return array.reshape(shape)
    dtype = np.dtype(NUMERIC_DTYPES[datatype])
    elements = None
    if dtype.kind == "f":
        width = cast(Literal[16, 32, 64], 8 * dtype.itemsize)  # FP16, FP32 or FP64
        elements = st.floats(width=width, allow_nan=False, allow_infinity=False)
    return draw(hnp.arrays(dtype, shape, elements=elements))


def text_array(draw: st.DrawFn, shape: tuple[int, ...]) -> Any:
    """A BYTES tensor whose elements are UTF-8 (what JSON can carry)."""
    count = int(np.prod(shape))
    items = draw(st.lists(st.text(max_size=6), min_size=count, max_size=count))
    array = np.empty(count, dtype=np.object_)
    array[:] = [s.encode() for s in items]
    return array.reshape(shape)


def same(a: Any, b: Any) -> bool:
    """Equal shape, dtype kind and values (NaN equal to NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype == np.object_ or b.dtype == np.object_:
        return bool(a.tolist() == b.tolist())
    return bool(a.dtype == b.dtype) and bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))


def _value(datatype: str) -> Any:
    return {"BOOL": True, "BYTES": "a"}.get(datatype, 1)


@st.composite
def near_valid_inputs(draw: st.DrawFn) -> dict[str, Any]:
    """A JSON input whose data fits its (often hostile) shape whenever that is small enough:
    the cases that get past the element-count check and reach numpy."""
    datatype = draw(st.sampled_from(JSON_TYPES))
    shape = draw(shapes)
    count = 1
    for dim in shape:
        count *= dim
    data: Any = []
    if 0 < count <= 64 and all(d >= 0 for d in shape):
        data = [_value(datatype)] * count
        if draw(st.booleans()) and all(d > 0 for d in shape) and len(shape) <= 32:
            data = np.array(data, dtype=object).reshape(shape).tolist()
    tensor: dict[str, Any] = {"name": "X", "datatype": datatype, "shape": shape, "data": data}
    if draw(st.booleans()):  # as binary data of the size the shape implies (or nothing)
        itemsize = np.dtype(NUMERIC_DTYPES.get(datatype, np.uint8)).itemsize
        del tensor["data"]
        size = count * itemsize if 0 < count <= 64 and datatype != "BYTES" else 0
        tensor["parameters"] = {"binary_data_size": size}
    return tensor
