"""The memory budget: which loaded models must scale to zero so another one fits.

With `--memory-budget` (host) and `--gpu-memory-budget` (each GPU), loading or cold-starting
a model that would not fit first scales the least recently used *evictable* models to zero:
loaded, nothing queued or running, `min_instances` 0, not being loaded or unloaded. If it
still does not fit, the load fails with `MemoryBudgetError` naming what holds the memory, and
nothing else is disturbed. Footprints are those measured at each model's last load
(`footprint.py`); a model never loaded counts its files' size until it is measured.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from fnserve.errors import MemoryBudgetError
from fnserve.repository.footprint import Footprint

log = logging.getLogger(__name__)


class Resident(Protocol):
    """What the budget needs of a model version (a `ModelHandle`)."""

    name: str
    version: str
    footprint: Footprint  # measured at its last load (or estimated before the first)
    last_used_ns: int  # when a request last came or went (perf_counter_ns)

    @property
    def holds_memory(self) -> bool: ...

    def evictable(self) -> str:
        """ "" when it may be scaled to zero now, else why not (for messages)."""
        ...

    async def scale_to_zero(self, why: str) -> bool:
        """Release the instances; False if it was in use by then."""
        ...


class MemoryBudget:
    """Host and per-GPU budgets over every model version the registry holds.

    Args:
        host_bytes: host budget (0: none).
        gpu_bytes: budget of each GPU (0: none).
        residents: every model version (called at each decision).
    """

    def __init__(
        self, host_bytes: int, gpu_bytes: int, residents: Callable[[], Iterable[Resident]]
    ) -> None:
        self.host_bytes = host_bytes
        self.gpu_bytes = gpu_bytes
        self._residents = residents
        self._lock = asyncio.Lock()  # one admission decision at a time

    @property
    def enabled(self) -> bool:
        return bool(self.host_bytes or self.gpu_bytes)

    async def make_room(self, model: Resident, need: Footprint, evictions: list[str]) -> None:
        """Scale least recently used models to zero until `need` fits beside what stays.

        Args:
            model: the one about to load (never evicted itself).
            need: what it is expected to hold.
            evictions: receives "name vN" of each model scaled to zero.

        Raises:
            MemoryBudgetError: it cannot fit even with every evictable model gone.
        """
        if not self.enabled:
            return
        async with self._lock:
            # Hopeless even with every evictable model gone: refuse before evicting anything.
            over = self._overflow(model, need, keep=lambda r: bool(r.evictable()))
            if over is not None:
                raise MemoryBudgetError(self._refusal(model, need, over))
            while (over := self._overflow(model, need)) is not None:
                victim = self._least_recently_used(model)
                if victim is None:  # in use since the check above
                    raise MemoryBudgetError(self._refusal(model, need, over))
                why = f"evicted to make room for '{model.name}' (memory budget)"
                if await victim.scale_to_zero(why):
                    evictions.append(f"{victim.name} v{victim.version}")

    def _overflow(
        self, model: Resident, need: Footprint, keep: Callable[[Resident], bool] = bool
    ) -> str | None:
        """Which budget `need` would exceed beside the other resident models (those `keep`
        selects: all by default), if any."""
        others = [r for r in self._residents() if r is not model and r.holds_memory and keep(r)]
        if self.host_bytes:
            used = sum(r.footprint.host_bytes for r in others)
            if used + need.host_bytes > self.host_bytes:
                return f"host budget {_gib(self.host_bytes)} ({_gib(used)} in use)"
        if self.gpu_bytes:
            for index, want in need.gpu_bytes:
                used = sum(r.footprint.on_gpu(index) for r in others)
                if used + want > self.gpu_bytes:
                    return f"GPU {index} budget {_gib(self.gpu_bytes)} ({_gib(used)} in use)"
        return None

    def _least_recently_used(self, model: Resident) -> Resident | None:
        candidates = [
            r for r in self._residents()
            if r is not model and r.holds_memory and not r.evictable()
        ]  # fmt: skip
        return min(candidates, key=lambda r: r.last_used_ns, default=None)

    def _refusal(self, model: Resident, need: Footprint, over: str) -> str:
        held = [
            f"'{r.name}' v{r.version} ({r.footprint.describe()}; {r.evictable() or 'evictable'})"
            for r in self._residents()
            if r is not model and r.holds_memory
        ]
        return (
            f"model '{model.name}' version {model.version} needs {need.describe()}, which does "
            f"not fit the {over}; in memory: {', '.join(held) or 'nothing else'}"
        )


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"
