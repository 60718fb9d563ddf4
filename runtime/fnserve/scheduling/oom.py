"""Out of memory: recognise it, cut a batch that ran out in two, cap the batches formed after.

A model that runs out of memory (torch's `OutOfMemoryError`, an ONNX Runtime or TensorRT
allocation failure, Python's `MemoryError`) on a batch usually fits on a smaller one. The runner
turns each of these into `OutOfMemoryError` (`is_out_of_memory`, `describe`); the pool reruns
the batch as two halves (`halves`) down to single requests, and answers a request that still
runs out alone with that error. `BatchCap` lowers the rows the batcher forms for a cool-down,
so the next batches do not run out again.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fnserve.scheduling.request import PendingRequest

log = logging.getLogger(__name__)
COOLDOWN_S = 30.0  # how long batches stay capped after the last out-of-memory

# Exception classes that mean out of memory whatever they say: torch.OutOfMemoryError (which
# torch.cuda.OutOfMemoryError names since torch 2.5, its subclass before), cupy's, ours.
_CLASS_NAMES = frozenset({"OutOfMemoryError"})
# Libraries that say it only in the message of a general class (onnxruntime's Fail and
# RuntimeException, TensorRT through its logger, torch before 1.13: RuntimeError).
_LIBRARIES = ("onnxruntime", "tensorrt", "torch")
_MESSAGE = re.compile(
    r"out of memory"  # "CUDA out of memory", "CUDA failure 2: out of memory"
    r"|outofmemory"  # TensorRT "Error Code 2: OutOfMemory"
    r"|failed to allocate"  # onnxruntime "Failed to allocate memory for requested buffer"
    r"|smaller than requested bytes"  # onnxruntime BFCArena over its limit
    r"|could not be allocated"  # TensorRT "Requested amount of GPU memory ... could not be ..."
    r"|bad_alloc|cudaErrorMemoryAllocation|_STATUS_ALLOC_FAILED",  # C++, CUDA, cuBLAS/cuDNN
    re.IGNORECASE,
)
_CHAIN_DEPTH = 8  # how far along __cause__ / __context__ to look


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether `exc`, or an exception it was raised from, says memory ran out.

    Classes are matched by name, so neither torch nor onnxruntime is imported here.
    """
    return any(_says_out_of_memory(e) for e in _chain(exc))


def _chain(exc: BaseException) -> Iterator[BaseException]:
    current: BaseException | None = exc
    for _ in range(_CHAIN_DEPTH):
        if current is None:
            return
        yield current
        cause = current.__cause__
        current = cause or (None if current.__suppress_context__ else current.__context__)


def _says_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    cls = type(exc)
    if any(c.__name__ in _CLASS_NAMES for c in cls.__mro__):
        return True
    if isinstance(exc, RuntimeError) or cls.__module__.startswith(_LIBRARIES):
        return _MESSAGE.search(str(exc)) is not None
    return False


def describe(model: str, rows: int, requests: int, exc: BaseException) -> str:
    """The message of an out-of-memory: the model, the batch, what the library said."""
    detail = str(exc)
    detail = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
    return (
        f"model '{model}' ran out of memory on a batch of {rows} row{'s' * (rows != 1)} from "
        f"{requests} request{'s' * (requests != 1)}: {detail}"
    )


def halves(
    batch: Sequence[PendingRequest],
) -> tuple[list[PendingRequest], list[PendingRequest]]:
    """Cut a batch of two or more requests in two, between requests, keeping their order.

    The cut leaves the larger half as few rows as it can (the first such cut when several
    do), so one big request does not drag its neighbours into the next out-of-memory.
    """
    total = sum(e.rows for e in batch)
    cut, larger, left = 1, total + 1, 0
    for index, entry in enumerate(batch[:-1], 1):
        left += entry.rows
        if max(left, total - left) < larger:
            cut, larger = index, max(left, total - left)
    return list(batch[:cut]), list(batch[cut:])


class BatchCap:
    """The most rows one batch may hold for a while after an out-of-memory (None: no cap).

    Running out of memory on `rows` rows lowers the cap to half of them (it never raises it)
    and restarts the cool-down; once `cooldown_s` passes without another, the cap is lifted
    and batches grow to `max_batch_size` again. Pure: callers pass the clock (ns).

    Args:
        model: model name, for the log.
        cooldown_s: how long the cap holds after the last out-of-memory.
    """

    def __init__(self, model: str, cooldown_s: float = COOLDOWN_S) -> None:
        self.model = model
        self.cooldown_ns = int(cooldown_s * 1e9)
        self.rows: int | None = None
        self._until_ns = 0

    def lower(self, failed_rows: int, now_ns: int) -> None:
        """A batch of `failed_rows` rows ran out of memory at `now_ns`."""
        self._until_ns = now_ns + self.cooldown_ns
        cap = max(failed_rows // 2, 1)
        if self.rows is None or cap < self.rows:
            self.rows = cap
            log.warning(
                "model '%s': batches hold at most %d rows until %g s pass without running out "
                "of memory",
                self.model,
                cap,
                self.cooldown_ns / 1e9,
            )

    def limit(self, now_ns: int) -> int | None:
        """The cap at `now_ns`; None once the cool-down has passed (the cap is lifted)."""
        if self.rows is not None and now_ns >= self._until_ns:
            self.rows = None
            log.info(
                "model '%s': batch cap lifted, batches grow to max_batch_size again", self.model
            )
        return self.rows
