"""Warmup: the config's warmup samples run through a freshly built model before it serves.

Each sample (Triton's `model_warmup`) becomes one request of `batch_size` rows, with zeros,
random values (a fixed seed, so every load warms the same way) or the raw contents of a file
in the model directory's `warmup/` folder (repeated for every row), and runs `count` times
through the model's own scheduler and instances, exactly as a client's request would. A
sample that fails fails the load with its name and the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fnserve.config.model_config import ModelConfig, Warmup, WarmupInput
from fnserve.errors import FnserveError, RepositoryError
from fnserve.repository.loaded import LoadedModel
from fnserve.scheduling.request import prepare
from fnserve.tensors import element_count, from_raw, numpy_dtype
from fnserve.types import InferInput, InferRequest

_SEED = 0


async def run_warmup(loaded: LoadedModel) -> None:
    """Run every warmup sample of `loaded` (already started), `count` times each.

    Raises:
        RepositoryError: a sample's data cannot be made, or the model failed on it.
    """
    config = loaded.config
    for sample in config.warmup:
        try:
            request = warmup_request(config, sample)
            for _ in range(sample.count):
                entry = prepare(config, request)
                # Nothing else will join a warmup request's batch: dated far back, it is past
                # the batcher's max_queue_delay at once instead of waiting for rows that never
                # come (its queue time is not kept: statistics restart after warmup).
                entry.enqueued_ns = 0
                await loaded.scheduler.execute(entry)
        except (FnserveError, OSError, ValueError) as exc:
            detail = exc.message if isinstance(exc, FnserveError) else str(exc)
            raise RepositoryError(f"warmup sample '{sample.name}' failed: {detail}") from exc


def warmup_request(config: ModelConfig, sample: Warmup) -> InferRequest:
    """The request one warmup sample sends."""
    rows = max(sample.batch_size, 1)
    rng = np.random.default_rng(_SEED)
    inputs = []
    for name, spec in sample.inputs.items():
        shape = (rows, *spec.dims) if config.batching else tuple(spec.dims)
        inputs.append(InferInput(name, spec.datatype, _data(name, spec, shape, rows, rng)))
    return InferRequest(config.name, tuple(inputs), id=f"warmup:{sample.name}")


def _data(
    name: str, spec: WarmupInput, shape: tuple[int, ...], rows: int, rng: np.random.Generator
) -> Any:
    if spec.data == "zero":
        if spec.datatype == "BYTES":
            return np.full(shape, b"", dtype=object)
        return np.zeros(shape, numpy_dtype(spec.datatype))
    if spec.data == "random":
        return _random(spec.datatype, shape, rng)
    one_row = tuple(spec.dims)
    sample = from_raw(name, spec.datatype, one_row, Path(spec.data).read_bytes())
    if element_count(shape) == element_count(one_row):
        return sample.reshape(shape)
    return np.repeat(sample[np.newaxis], rows, axis=0).reshape(shape)


def _random(datatype: str, shape: tuple[int, ...], rng: np.random.Generator) -> Any:
    if datatype == "BYTES":
        letters = rng.integers(ord("a"), ord("z") + 1, size=(*shape, 8), dtype=np.uint8)
        flat = [bytes(row) for row in letters.reshape(-1, 8)]
        return np.array(flat, dtype=object).reshape(shape)
    dtype = numpy_dtype(datatype)
    if datatype == "BOOL":
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 100, size=shape).astype(dtype)
    return rng.random(shape).astype(dtype)
