"""Request tensors for a load test: random, zero, or perf_analyzer `--input-data` JSON files.

Like perf_analyzer, data is made once and reused: random data is one sample per input, and a
JSON file's entries are sent round-robin. A *sample* is one batch-1 entry (no batch dimension);
`make_requests` stacks `batch_size` consecutive samples into each request of a batching model.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fnserve.bench.options import BenchError
from fnserve.errors import InvalidInputError
from fnserve.tensors import from_json, from_raw, numpy_dtype

Sample = dict[str, np.ndarray]


@dataclass(frozen=True)
class InputSpec:
    """One model input: datatype and dimensions without the batch one (-1: variable)."""

    name: str
    datatype: str
    dims: tuple[int, ...]


@dataclass(frozen=True)
class Tensor:
    """One input of one request, ready to encode."""

    name: str
    datatype: str
    array: np.ndarray


def resolve_inputs(
    metadata: Mapping[str, Any], max_batch_size: int, shapes: Mapping[str, tuple[int, ...]]
) -> tuple[InputSpec, ...]:
    """Model metadata (its shapes include the batch -1) plus `--shape` overrides.

    Raises:
        BenchError: `--shape` names an unknown input or contradicts a fixed dimension.
    """
    specs = []
    for item in metadata.get("inputs", []):
        dims = tuple(int(d) for d in item["shape"])[1 if max_batch_size > 0 else 0 :]
        given = shapes.get(item["name"])
        if given is not None:
            dims = _override(item["name"], dims, given)
        specs.append(InputSpec(item["name"], item["datatype"], dims))
    unknown = sorted(set(shapes) - {s.name for s in specs})
    if unknown:
        raise BenchError(
            f"--shape names input(s) {', '.join(unknown)} the model does not have; "
            f"its inputs: {', '.join(s.name for s in specs)}"
        )
    return tuple(specs)


def _override(name: str, dims: tuple[int, ...], given: tuple[int, ...]) -> tuple[int, ...]:
    fits = len(given) == len(dims) and all(d in (-1, g) for d, g in zip(dims, given, strict=True))
    if not fits:
        raise BenchError(
            f"--shape {name}:{','.join(map(str, given))} does not fit the model's "
            f"dimensions {list(dims)} (batch dimension excluded)"
        )
    return given


def synthetic_sample(specs: Sequence[InputSpec], zero: bool, seed: int = 0) -> Sample:
    """One sample per input, random (values that fit any datatype) or zeros.

    Raises:
        BenchError: an input still has a variable dimension (give it with --shape).
    """
    rng = np.random.default_rng(seed)
    sample: Sample = {}
    for spec in specs:
        if any(d < 0 for d in spec.dims):
            raise BenchError(
                f"input '{spec.name}' has variable dimensions {list(spec.dims)}: "
                f"give its shape with --shape {spec.name}:d1,d2,..."
            )
        sample[spec.name] = _synthetic(spec, rng, zero)
    return sample


def _synthetic(spec: InputSpec, rng: np.random.Generator, zero: bool) -> np.ndarray:
    count = math.prod(spec.dims)
    if spec.datatype == "BYTES":
        values = [b"0" if zero else str(v).encode() for v in rng.integers(0, 1000, count)]
        return np.array(values, dtype=np.object_).reshape(spec.dims)
    dtype = numpy_dtype(spec.datatype)  # BF16: its raw uint16 bits
    if zero:
        return np.zeros(spec.dims, dtype=dtype)
    if dtype.kind == "f":
        return rng.standard_normal(spec.dims).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, spec.dims).astype(dtype)
    return rng.integers(0, 100, spec.dims).astype(dtype)  # in range for every integer type


def load_samples(path: str | Path, specs: Sequence[InputSpec]) -> list[Sample]:
    """Read a perf_analyzer `--input-data` JSON file: `{"data": [{NAME: value, ...}, ...]}`.

    A value is a flat row-major list, `{"b64": ...}` (raw little-endian bytes), or
    `{"content": list-or-b64, "shape": [...]}`. Sequence streams (lists of entries) are
    flattened into one round-robin list.

    Raises:
        BenchError: unreadable file, missing inputs, or values that do not fit the inputs.
    """
    try:
        document = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise BenchError(f"cannot read --input-data '{path}': {exc}") from None
    entries = document.get("data") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise BenchError(f"--input-data '{path}' must hold a non-empty \"data\" list")
    flat = [e for item in entries for e in (item if isinstance(item, list) else [item])]
    return [_sample(path, index, entry, specs) for index, entry in enumerate(flat)]


def _sample(path: str | Path, index: int, entry: Any, specs: Sequence[InputSpec]) -> Sample:
    where = f"--input-data '{path}' entry {index}"
    if not isinstance(entry, dict):
        raise BenchError(f"{where} must be an object of input name to data, got {entry!r:.60}")
    sample: Sample = {}
    for spec in specs:
        if spec.name not in entry:
            raise BenchError(f"{where} has no data for input '{spec.name}'")
        try:
            sample[spec.name] = _decode(spec, entry[spec.name])
        except InvalidInputError as exc:
            raise BenchError(f"{where}: {exc.message}") from None
    return sample


def _decode(spec: InputSpec, value: Any) -> np.ndarray:
    shape = None
    if isinstance(value, dict) and "content" in value:
        shape = tuple(int(d) for d in value["shape"]) if "shape" in value else None
        value = value["content"]
    if isinstance(value, dict) and "b64" in value:
        raw = base64.b64decode(value["b64"])
        if shape is None:
            itemsize = 0 if spec.datatype == "BYTES" else numpy_dtype(spec.datatype).itemsize
            shape = _fill_dims(spec, len(raw) // itemsize if itemsize else -1)
        return np.asarray(from_raw(spec.name, spec.datatype, shape, raw))
    flat = value if isinstance(value, list) else [value]
    shape = shape or _fill_dims(spec, len(flat))
    if spec.datatype == "FP16":  # JSON cannot carry FP16 on the wire, but a data file may
        return np.asarray(from_json(spec.name, "FP32", shape, flat), dtype=np.float16)
    return np.asarray(from_json(spec.name, spec.datatype, shape, flat))


def _fill_dims(spec: InputSpec, count: int) -> tuple[int, ...]:
    """The input's dimensions with one variable dimension inferred from the element count."""
    variable = [i for i, d in enumerate(spec.dims) if d < 0]
    if not variable:
        return spec.dims
    known = math.prod(d for d in spec.dims if d >= 0)
    if len(variable) > 1 or count < 0 or known == 0 or count % known:
        raise InvalidInputError(
            f"input '{spec.name}' has variable dimensions {list(spec.dims)}: "
            f'give "shape" with the data or --shape'
        )
    dims = list(spec.dims)
    dims[variable[0]] = count // known
    return tuple(dims)


def make_requests(
    samples: Sequence[Sample], specs: Sequence[InputSpec], batch_size: int, batching: bool
) -> list[tuple[Tensor, ...]]:
    """Group samples into requests: batch `batch_size` consecutive samples (wrapping around).

    Every sample is sent equally often: there are lcm(samples, batch) / batch requests.

    Raises:
        BenchError: batch size > 1 for a model without batching, or samples that differ in
            shape within one batch.
    """
    if not batching:
        if batch_size != 1:
            raise BenchError(f"--batch-size {batch_size} needs a model with max_batch_size > 0")
        return [
            tuple(Tensor(s.name, s.datatype, sample[s.name]) for s in specs) for sample in samples
        ]
    count = math.lcm(len(samples), batch_size) // batch_size
    requests = []
    for r in range(count):
        rows = [samples[(r * batch_size + j) % len(samples)] for j in range(batch_size)]
        requests.append(tuple(Tensor(s.name, s.datatype, _stack(s.name, rows)) for s in specs))
    return requests


def _stack(name: str, rows: Sequence[Sample]) -> np.ndarray:
    shapes = {row[name].shape for row in rows}
    if len(shapes) > 1:
        raise BenchError(
            f"input '{name}' has samples of shapes {sorted(shapes)} in one batch: "
            f"use --batch-size 1 for data of varying shape"
        )
    return np.stack([row[name] for row in rows])
