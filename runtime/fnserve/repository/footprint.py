"""How much memory a model version holds, measured around its load, and giving memory back.

Host memory is the process's resident set (RSS) before and after a build plus warmup; GPU
memory is this process's usage per device from NVML (the `gpu` extra's nvidia-ml-py), when a
GPU and NVML exist. Loads that overlap share the delta between them, so a footprint is an
estimate, refreshed on every load; the budget (`budget.py`) works with these estimates.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import os
import sys
from pathlib import Path
from typing import Any, NamedTuple

import psutil

from fnserve.backends.base import ModelFileSpec, ModelSpec

log = logging.getLogger(__name__)


class Footprint(NamedTuple):
    """Bytes held: on the host, and per GPU index."""

    host_bytes: int = 0
    gpu_bytes: tuple[tuple[int, int], ...] = ()  # (device index, bytes), sorted

    def on_gpu(self, index: int) -> int:
        return dict(self.gpu_bytes).get(index, 0)

    def describe(self) -> str:
        parts = [_size(self.host_bytes) + " host"]
        parts += [f"{_size(b)} on GPU {i}" for i, b in self.gpu_bytes if b]
        return ", ".join(parts)


def current() -> Footprint:
    """What this process holds now (host RSS; per-GPU usage where NVML can tell)."""
    return Footprint(psutil.Process().memory_info().rss, _gpu_usage())


def delta(before: Footprint, after: Footprint) -> Footprint:
    """Growth from `before` to `after` (never negative)."""
    gpus = dict(after.gpu_bytes)
    grown = {i: max(b - before.on_gpu(i), 0) for i, b in gpus.items()}
    return Footprint(max(after.host_bytes - before.host_bytes, 0), tuple(sorted(grown.items())))


def estimate(spec: ModelSpec) -> Footprint:
    """Before a first load: a model file's size on disk (a session holds at least its
    weights); nothing is known of a Python function's needs until it loads."""
    if isinstance(spec, ModelFileSpec):
        path = Path(spec.path)
        try:
            files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
            return Footprint(sum(p.stat().st_size for p in files))
        except OSError:
            return Footprint()
    return Footprint()


async def give_back() -> None:
    """Return what released models held to the system: collect cycles, empty torch's CUDA
    cache, and ask glibc to hand freed heap pages back (else RSS would not go down). The trim
    walks the whole heap; it runs on a thread (ctypes lets go of the GIL), off the event loop."""
    gc.collect()
    torch: Any = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    if _LIBC is not None:
        await asyncio.to_thread(_LIBC.malloc_trim, 0)


def _gpu_usage() -> tuple[tuple[int, int], ...]:
    if _NVML is None:
        return ()
    pid, usage = os.getpid(), []
    try:
        for index in range(_NVML.nvmlDeviceGetCount()):
            handle = _NVML.nvmlDeviceGetHandleByIndex(index)
            procs = _NVML.nvmlDeviceGetComputeRunningProcesses(handle)
            usage.append((index, sum(p.usedGpuMemory or 0 for p in procs if p.pid == pid)))
    except Exception as exc:  # NVML can fail per call (driver reset): report nothing
        log.debug("NVML query failed: %s", exc)
        return ()
    return tuple(usage)


def _load_nvml() -> Any:
    try:
        import pynvml  # type: ignore[import-not-found,unused-ignore]

        pynvml.nvmlInit()
    except Exception:  # not installed, or no driver / GPU: GPU memory is not measured
        return None
    return pynvml


def _load_libc() -> Any:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        return libc
    except (OSError, AttributeError):  # not glibc
        return None


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


_NVML = _load_nvml()
_LIBC = _load_libc()
