"""Apply changed files to the served models: which models a change touches, and their reloads.

A watcher (`watch.py`) hands over the paths that changed; `ChangeReloader.apply` re-scans the
model paths once (importing only changed files) and reloads, through the same load the
repository API uses, every model that

- a changed Python file or model directory held before the change or holds after it (edited,
  added to the file, removed from it),
- appeared in the model paths (a new file, a new model directory), or
- no longer exists anywhere (a deleted file or directory): that load unloads it.

Each model's reload runs under its own lock (models reload side by side, one model one change
at a time), and each outcome is logged: loaded, reloaded, unloaded, unchanged (debug only),
or failed, with the reason and what keeps serving.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from fnserve.backends.base import ModelSpec
from fnserve.errors import RepositoryError
from fnserve.repository.registry import ModelRegistry
from fnserve.repository.source import ModelSource

log = logging.getLogger(__name__)

LoadModel = Callable[[str], Awaitable[None]]


@dataclass(frozen=True)
class ReloadOutcome:
    """What a change did to one model.

    Args:
        name: the model.
        action: "loaded", "reloaded", "unloaded", "unchanged" or "failed".
        versions: its READY versions afterwards.
        error: why it failed ("" unless `action` is "failed").
        duration_s: how long the reload took.
    """

    name: str
    action: str
    versions: tuple[str, ...]
    error: str = ""
    duration_s: float = 0.0

    def describe(self) -> str:
        """One line for the log."""
        serving = ", ".join(self.versions)
        if self.action == "failed":
            keeps = f"version {serving} keeps serving" if serving else "nothing serves it"
            return f"model '{self.name}' failed to reload ({keeps}): {self.error}"
        if self.action == "unloaded":
            return f"model '{self.name}' unloaded: its files no longer define it"
        return f"model '{self.name}' {self.action} in {self.duration_s:.2f} s (version {serving})"


class ChangeReloader:
    """Turns changed paths into model loads and unloads.

    Args:
        source: the model paths, re-scanned on each change.
        registry: the served models (read to tell new, removed and changed ones apart).
        load: the runtime's repository load of one model (reloads, loads, unloads it).
    """

    def __init__(self, source: ModelSource, registry: ModelRegistry, load: LoadModel) -> None:
        self._source = source
        self._registry = registry
        self._load = load

    async def apply(self, changed: Collection[Path]) -> list[ReloadOutcome]:
        """Reload every model the change touches; returns (and logs) what happened to each.

        Raises:
            RepositoryError: a model path given at start no longer exists.
        """
        names = await self.affected(changed)
        outcomes = await asyncio.gather(*(self._reload(name) for name in sorted(names)))
        for outcome in outcomes:
            level = logging.DEBUG if outcome.action == "unchanged" else logging.INFO
            level = logging.ERROR if outcome.action == "failed" else level
            log.log(level, "reload: %s", outcome.describe())
        return list(outcomes)

    async def affected(self, changed: Collection[Path]) -> set[str]:
        """The models the change touches (scanning the model paths; runs user code)."""
        found, names = await asyncio.to_thread(self._source.rescan, changed)
        self._registry.set_failures(found.failures)
        defined = {d.config.name for d in found.definitions}
        failed = {name for f in found.failures for name, _ in f.models}
        served = set(self._registry.names())
        return names | (served - defined - failed) | (defined - served)

    async def _reload(self, name: str) -> ReloadOutcome:
        before = self._specs(name)
        start = time.perf_counter()
        error = ""
        try:
            await self._load(name)
        except RepositoryError as exc:
            error = exc.message
        duration_s = time.perf_counter() - start
        after = self._specs(name)
        action = _action(before, after, error)
        if not error and name not in self._registry:
            action = "unloaded"
        return ReloadOutcome(name, action, tuple(after), error, duration_s)

    def _specs(self, name: str) -> dict[str, ModelSpec]:
        return {h.version: h.spec for h in self._registry.versions(name) if h.ready}


def _action(before: dict[str, ModelSpec], after: dict[str, ModelSpec], error: str) -> str:
    if error:
        return "failed"
    if not before:
        return "loaded" if after else "unchanged"
    if before.keys() != after.keys() or any(after[v] is not before[v] for v in after):
        return "reloaded"
    return "unchanged"
