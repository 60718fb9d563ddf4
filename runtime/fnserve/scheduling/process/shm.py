"""Tensors between the server and a worker process through a shared, growable memory buffer.

Each direction has its own buffer: an anonymous memory file (`memfd`, or an unlinked temporary
file where memfd does not exist) that both processes map. The writer lays the arrays out at
aligned offsets and sends only a small descriptor per tensor (name, dtype, shape, offset, size)
over the control pipe; numeric arrays are never pickled. BYTES (object) arrays travel in
Triton's length-prefixed raw form inside the same buffer. A writer that needs more room grows
the file; the reader maps it again when a descriptor names a larger size.
"""

from __future__ import annotations

import mmap
import os
import tempfile
import weakref
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from fnserve.tensors import from_raw, to_raw
from fnserve.types import Array

_ALIGN = 64
_MIN_SIZE = 1 << 20


class TensorRef(NamedTuple):
    """Where one tensor lies in a buffer; `dtype` is a numpy dtype string, or "BYTES"."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int


def create_memory_file() -> int:
    """A new anonymous memory file descriptor, inheritable by a child process."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("fnserve-tensors", 0)  # no MFD_CLOEXEC: the worker inherits it
    else:  # pragma: no cover - non-Linux
        with tempfile.TemporaryFile() as tmp:
            fd = os.dup(tmp.fileno())
    os.set_inheritable(fd, True)
    return fd


class SharedBuffer:
    """One direction's buffer, mapped in this process; both sides hold the same `fd`."""

    def __init__(self, fd: int, *, owner: bool) -> None:
        self.fd = fd
        size = os.fstat(fd).st_size
        if size == 0:
            size = _MIN_SIZE
            os.ftruncate(fd, size)
        self._map = mmap.mmap(fd, size)
        # The creator's fd closes with this object at the latest, whatever path drops it.
        self._release = weakref.finalize(self, os.close, fd) if owner else None

    @property
    def size(self) -> int:
        return len(self._map)

    def write(self, tensors: Mapping[str, Sequence[Array]]) -> tuple[int, list[TensorRef]]:
        """Lay out each tensor, concatenating its parts along axis 0 straight into the buffer.

        Returns the buffer size the reader must map and one reference per tensor.
        """
        plan: list[tuple[str, str, tuple[int, ...], int, Sequence[Array] | bytes]] = []
        end = 0
        for name, parts in tensors.items():
            first = parts[0]
            if first.dtype.kind == "O":
                merged = parts[0] if len(parts) == 1 else np.concatenate(parts)
                raw = to_raw("BYTES", merged)
                plan.append((name, "BYTES", merged.shape, len(raw), raw))
            else:
                rows = sum(p.shape[0] for p in parts) if first.ndim else 0
                shape = (rows, *first.shape[1:]) if first.ndim else ()
                nbytes = int(np.prod(shape, dtype=np.int64)) * first.dtype.itemsize
                plan.append((name, first.dtype.str, shape, nbytes, parts))
            end = _aligned(end + plan[-1][3])
        self._ensure(end)
        refs: list[TensorRef] = []
        offset = 0
        for name, dtype, shape, nbytes, data in plan:
            if isinstance(data, bytes):
                self._map[offset : offset + nbytes] = data
            else:
                view = np.ndarray(shape, np.dtype(dtype), buffer=self._map, offset=offset)
                if len(data) == 1:
                    view[...] = data[0]
                else:
                    np.concatenate(data, out=view)
            refs.append(TensorRef(name, dtype, shape, offset, nbytes))
            offset = _aligned(offset + nbytes)
        return self.size, refs

    def read(self, size: int, refs: Sequence[TensorRef], *, copy: bool) -> dict[str, Array]:
        """The tensors `refs` name; views into the buffer unless `copy` (then owned arrays)."""
        if size > self.size:
            self._map = mmap.mmap(self.fd, size)  # the old map closes once no view uses it
        arrays: dict[str, Array] = {}
        for ref in refs:
            if ref.dtype == "BYTES":
                raw = memoryview(self._map)[ref.offset : ref.offset + ref.nbytes]
                arrays[ref.name] = from_raw(ref.name, "BYTES", ref.shape, raw)
                raw.release()
                continue
            view = np.ndarray(ref.shape, np.dtype(ref.dtype), buffer=self._map, offset=ref.offset)
            arrays[ref.name] = view.copy() if copy else view
        return arrays

    def _ensure(self, needed: int) -> None:
        if needed <= self.size:
            return
        size = max(needed, 2 * self.size)
        size = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE
        os.ftruncate(self.fd, size)
        self._map = mmap.mmap(self.fd, size)

    def close(self) -> None:
        """Drop this side's mapping (and the fd, if this side created it)."""
        try:
            self._map.close()
        except BufferError:  # a view still points into it; it closes when that view goes
            pass
        if self._release is not None:
            self._release()


def _aligned(offset: int) -> int:
    return (offset + _ALIGN - 1) // _ALIGN * _ALIGN
