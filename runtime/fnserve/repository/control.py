"""Repository control: loading, reloading and unloading models by name, as Triton's model
repository API does (and what a file watcher's changes go through).

A load re-imports the files that changed since they were imported (when the models come from
a source), rebuilds a version whose code changed beside the serving one and swaps it in (no
request fails), loads new versions and unloads the versions no longer defined. An ensemble's
step models load with it (first), and with `unload_dependents` unload with it; once they are
loaded, the ensemble is checked against them (`ensemble_check.py`): a step that failed to load
or does not fit fails the ensemble's load. Loads and unloads of one name hold that name's lock,
so they run one after the other in the order asked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from pathlib import Path

from fnserve.backends.base import ModelSpec
from fnserve.config.server import ModelDefaults
from fnserve.errors import MemoryBudgetError, RepositoryError
from fnserve.repository.changes import ChangeReloader, ReloadOutcome
from fnserve.repository.ensemble_check import check_ensemble
from fnserve.repository.registry import ModelRegistry
from fnserve.repository.source import ModelSource


class RepositoryControl:
    """Loads and unloads the models of `registry` by name.

    Args:
        registry: the model handles.
        source: the files the models come from (None: definitions given in-process, nothing
            to re-import).
        defaults: the server-wide model settings every load uses (read at each load).
    """

    def __init__(
        self,
        registry: ModelRegistry,
        source: ModelSource | None,
        defaults: Callable[[], ModelDefaults],
    ) -> None:
        self._registry = registry
        self._source = source
        self._defaults = defaults
        self._reloader = None if source is None else ChangeReloader(source, registry, self.load)
        # The steps each ensemble's files named at their last read (an edit may add steps).
        self._declared_steps: dict[str, set[str]] = {}

    async def load(self, name: str) -> None:
        """See `Runtime.load_model`."""
        tried = await self._load_steps(name, (name,))
        try:
            await self._load_versions(name)
        except RepositoryError:
            if self._steps_of(name) <= tried:
                raise
            # Its files changed to name steps the first pass did not load: load them, again.
            await self._load_steps(name, (name,))
            await self._load_versions(name)

    def _steps_of(self, name: str) -> set[str]:
        return self._registry.steps_of(name) | self._declared_steps.get(name, set())

    async def _load_steps(self, name: str, chain: tuple[str, ...]) -> set[str]:
        """Load the step models of ensemble `name` (and theirs) that are not serving; the
        steps considered. `chain`: the ensembles whose steps these are (a step among them is a
        cycle: skipped). A step that fails to load is left to the ensemble's check, which
        fails the ensemble's load with the step's reason."""
        registry = self._registry
        steps = self._steps_of(name)
        for step in sorted(steps):
            if step in chain or any(h.ready for h in registry.versions(step)):
                continue
            try:
                await self._load_steps(step, (*chain, step))
                await self._load_versions(step)
            except (RepositoryError, MemoryBudgetError):
                pass  # its reason is in its own index row, and in the ensemble's
        return steps

    def _check(self, spec: ModelSpec) -> None:
        """An ensemble's checks against its step models (run once they are loaded)."""
        if spec.config.ensemble:
            check_ensemble(spec.config, self._registry)

    async def _load_versions(self, name: str) -> None:
        """`load` for `name` itself."""
        registry = self._registry
        async with registry.lock(name):
            specs = await self._refresh(name) if self._source is not None else None
            if name not in registry:
                raise RepositoryError(f"failed to load '{name}', no version is available")
            handles = registry.versions(name)
            kept = [h for h in handles if specs is None or h.version in specs]
            errors: list[str] = []
            refused: MemoryBudgetError | None = None
            for handle in kept:
                try:
                    spec = None if specs is None else specs[handle.version]
                    await handle.load(self._defaults(), spec, self._check)
                except RepositoryError as exc:
                    errors.append(exc.message)
                except MemoryBudgetError as exc:
                    refused = exc
            # Versions no longer defined go once the new ones serve (a new version folder under
            # a `latest` policy never leaves a gap), or at once when the model itself is gone.
            if not errors or not kept or any(h.ready for h in kept):
                for handle in [h for h in handles if h not in kept]:
                    await handle.unload()
                    registry.remove(handle)
            if errors:
                raise RepositoryError("; ".join([*errors, *([refused.message] if refused else [])]))
            if refused is not None:
                raise refused  # 503 / RESOURCE_EXHAUSTED: it may fit later

    async def _refresh(self, name: str) -> dict[str, ModelSpec]:
        """Re-import changed files; `name`'s definitions by version (new ones registered)."""
        assert self._source is not None
        found = await asyncio.to_thread(self._source.scan)  # user code: not on the loop
        self._registry.set_failures(found.failures)
        broken = [f for f in found.failures if name in (n for n, _ in f.models)]
        if broken:
            raise RepositoryError(f"failed to load '{name}': {broken[0].reason}")
        specs: dict[str, ModelSpec] = {
            str(d.config.version): d for d in found.definitions if d.config.name == name
        }
        self._declared_steps[name] = {
            step.model_name for spec in specs.values() for step in spec.config.ensemble
        }
        known = {h.version for h in self._registry.versions(name)}
        for version in sorted(specs.keys() - known, key=int):
            self._registry.add(specs[version])
        return specs

    async def reload_changed(self, changed: Collection[Path]) -> list[ReloadOutcome]:
        """See `Runtime.reload_changed`."""
        if self._reloader is None:
            return []
        return await self._reloader.apply(changed)

    async def unload(
        self, name: str, unload_dependents: bool, drain_timeout_s: float | None
    ) -> None:
        """See `Runtime.unload_model`."""
        await self._unload(name, (name,) if unload_dependents else None, drain_timeout_s)

    async def _unload(
        self, name: str, chain: tuple[str, ...] | None, drain_timeout_s: float | None
    ) -> None:
        """Unload `name`, then (with a `chain`: the ensembles unloaded so far down to it) its
        step models that no serving ensemble uses."""
        registry = self._registry
        async with registry.lock(name):
            for handle in registry.versions(name):
                await handle.unload(drain_timeout_s)
        if chain is None:
            return
        for step in sorted(registry.steps_of(name)):
            if step not in chain and not registry.used_by_serving_ensemble(step):
                await self._unload(step, (*chain, step), drain_timeout_s)
