"""Triton's classification extension: an output answered as its top k classes.

A client asks for it per output (`classification: k` in the output's parameters); both
frontends parse that into `InferRequest.classification`, and the runtime turns the model's
output into a BYTES tensor here, as Triton's `TopkClassifications` does: per batch row (the
whole tensor when the model does not batch) the k largest values, largest first, each as
"value:index" or "value:index:label" (labels from the output's `labels`, read from its
`label_filename`). Values are written as C++'s `std::to_string` writes them (floats with six
decimals, integers in full); k is clamped to the classes there are, and the shape is
`[batch, k]` when the model batches, `[k]` otherwise. Ties keep the lower index first (Triton's
`std::sort` leaves their order unspecified).

Example:
    `top_k(np.array([[0.1, 0.7, 0.2]], np.float32), 2, True, ("a", "b", "c"))` is
    `[[b"0.700000:1:b", b"0.200000:2:c"]]`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from fnserve.config.model_config import ModelConfig
from fnserve.errors import InvalidInputError
from fnserve.types import Array, InferOutput, InferResponse

# The datatypes Triton classifies (TopkClassifications' switch); FP16, BF16, BOOL and BYTES
# are refused.
CLASSIFIABLE = frozenset(
    {"UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP32", "FP64"}
)
# Triton refuses a row of more classes (pathological memory and CPU use).
MAX_CLASSES = 1_000_000


def check_classification(config: ModelConfig, counts: Mapping[str, int]) -> None:
    """Refuse, before the model runs, outputs Triton cannot classify (with its message).

    Unknown output names are left to the request's output check, which names them.

    Raises:
        InvalidInputError: an output whose datatype is not a number of a classifiable type.
    """
    datatypes = config.output_datatypes
    for name in counts:
        datatype = datatypes.get(name)
        if datatype is not None and datatype not in CLASSIFIABLE:
            raise InvalidInputError(
                f"class result not available for output due to unsupported type '{datatype}'"
            )


def classify(
    config: ModelConfig, response: InferResponse, counts: Mapping[str, int]
) -> InferResponse:
    """`response` with each output named in `counts` replaced by its top-k classes.

    Raises:
        InvalidInputError: a row of more than `MAX_CLASSES` classes (Triton's message).
    """
    outputs = []
    for output in response.outputs:
        k = counts.get(output.name)
        if k is not None:
            spec = next(t for t in config.outputs if t.name == output.name)
            data = top_k(output.data, k, config.batching, spec.labels or ())
            output = InferOutput(output.name, "BYTES", data)
        outputs.append(output)
    return response._replace(outputs=tuple(outputs))


def top_k(data: Array, k: int, batching: bool, labels: Sequence[str] = ()) -> Array:
    """The top `k` classes of `data` per batch row (`batching`), as Triton writes them.

    Args:
        data: the output, batch dimension first when `batching`; the rest of each row is
            read flat, as Triton reads it.
        k: classes wanted (>= 1); fewer come back when a row has fewer.
        batching: the model batches; as in Triton, a tensor of 0 rows then counts as one
            unbatched row.
        labels: the i-th names class i.

    Raises:
        InvalidInputError: a row of more than `MAX_CLASSES` classes.
    """
    batched = batching and data.ndim > 0 and data.shape[0] > 0
    rows = data.shape[0] if batched else 1
    classes = int(np.prod(data.shape[1:] if batched else data.shape))
    if classes > MAX_CLASSES:
        raise InvalidInputError("classification output tensor too large")
    table = data.reshape(rows, classes)
    order = _descending(table)[:, :k]
    values = np.take_along_axis(table, order, axis=1).tolist()
    floats = table.dtype.kind == "f"
    out = np.empty(order.shape, dtype=np.object_)
    for r, (row_values, row_order) in enumerate(zip(values, order.tolist(), strict=True)):
        for c, (value, index) in enumerate(zip(row_values, row_order, strict=True)):
            text = f"{value:f}:{index}" if floats else f"{value}:{index}"
            label = labels[index] if index < len(labels) else ""
            if label:
                text = f"{text}:{label}"
            out[r, c] = text.encode("utf-8", "surrogateescape")
    return out if batched else out[0]


def _descending(table: Array) -> Array:
    """Indices sorting each row largest first, ties by lower index (NaN last for floats)."""
    if table.dtype.kind == "f":
        return np.argsort(-table, axis=1, kind="stable")
    # Integers cannot all be negated (unsigned, INT64's minimum): sort the reversed row
    # stably and read it backwards, which puts equal values in index order.
    last = table.shape[1] - 1
    return last - np.argsort(table[:, ::-1], axis=1, kind="stable")[:, ::-1]
