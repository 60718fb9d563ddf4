"""Times every call of the MiniLM encoder, so that a c=1 comparison can take it out.

The encoder is ~30 ms of a ~34 ms request at concurrency 1 and varies by about 1 ms from call
to call: as much as the whole difference benchmarks/minilm.py measures between the ensemble
and the fused function. Both run the same `MiniLMEncoder`, so subtracting each request's own
encoder time leaves what serving adds, with an interval a few times narrower.

    install(sink)                  every call's duration in ns goes to sink(ns)
    python benchmarks/minilm_clock.py FILE serve ARGS...
                                   `fnserve serve ARGS...` with the last call's duration
                                   (8 bytes, native int64 ns) kept in FILE for the client
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import examples.minilm.steps as steps

LAST_NS = struct.Struct("q")  # the layout of FILE


def install(sink: Callable[[int], object]) -> None:
    """Wrap `MiniLMEncoder.__call__` (before any model is loaded) to report each duration."""
    encode = steps.MiniLMEncoder.__call__

    def timed(
        self: steps.MiniLMEncoder, INPUT_IDS: np.ndarray, ATTENTION_MASK: np.ndarray
    ) -> np.ndarray:  # the model's inputs, by name
        start = time.perf_counter_ns()
        try:
            return encode(self, INPUT_IDS, ATTENTION_MASK)
        finally:
            sink(time.perf_counter_ns() - start)

    steps.MiniLMEncoder.__call__ = timed  # type: ignore[method-assign]


def last_ns_file(path: Path) -> mmap.mmap:
    """FILE mapped (created with zero when missing)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        if os.fstat(fd).st_size < LAST_NS.size:
            os.ftruncate(fd, LAST_NS.size)
        return mmap.mmap(fd, LAST_NS.size)
    finally:
        os.close(fd)


def read_last_ns(mapped: mmap.mmap) -> int:
    value: int = LAST_NS.unpack_from(mapped)[0]
    return value


if __name__ == "__main__":
    shared = last_ns_file(Path(sys.argv[1]))
    install(lambda ns: LAST_NS.pack_into(shared, 0, ns))
    from fnserve.cli import main

    main(args=sys.argv[2:], prog_name="fnserve")
