"""The registry of model handles: one per name and version, and the lookups requests make.

It also remembers files that failed to import, so that the index can list the models they
declare (FAILED, with the file and line) and a request for one says why it cannot be served;
a model still serving its previous code shows that failure as its READY row's reason.
Name-level operations (a load that re-imports a file and swaps a name's set of versions) hold
the name's lock; each version's own transitions are serialized by its handle.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator

from fnserve.backends.base import ModelSpec
from fnserve.errors import ModelNotFoundError, ModelNotReadyError, RepositoryError
from fnserve.repository.budget import MemoryBudget
from fnserve.repository.discover import ImportFailure
from fnserve.repository.handle import RELOAD_FAILED, ModelHandle
from fnserve.scheduling.supervisor import Supervisor
from fnserve.types import IndexEntry, ModelCaller, ModelState


class ModelRegistry:
    """Model handles by name and version.

    Args:
        supervisor: handed to every handle, for the background work of what it loads.
        caller: handed to every handle, for ensembles to call their steps.

    It owns the memory budget every handle's loads must fit (`budget`; none until its sizes
    are set).
    """

    def __init__(self, supervisor: Supervisor, caller: ModelCaller | None = None) -> None:
        self._supervisor = supervisor
        self._caller = caller
        self.budget = MemoryBudget(0, 0, self.handles)
        self._handles: dict[str, dict[str, ModelHandle]] = {}
        self._ordered: dict[str, list[ModelHandle]] = {}  # versions by number, for lookups
        self._failed: dict[str, list[IndexEntry]] = {}  # models of files that failed to import
        self._locks: dict[str, asyncio.Lock] = {}

    def __contains__(self, name: str) -> bool:
        return name in self._handles

    def names(self) -> list[str]:
        return sorted(self._handles)

    def known(self, name: str) -> bool:
        """Whether `name` is a model here, served or failed."""
        return name in self._handles or name in self._failed

    def handles(self) -> Iterator[ModelHandle]:
        """Every handle, by name then version."""
        for name in sorted(self._handles):
            yield from self._ordered[name]

    def versions(self, name: str) -> list[ModelHandle]:
        """The handles of `name`, by version number (empty when unknown)."""
        return self._ordered.get(name, [])

    def steps_of(self, name: str) -> set[str]:
        """The models the steps of ensemble `name` call (any version; none for a model)."""
        return {step.model_name for h in self.versions(name) for step in h.spec.config.ensemble}

    def used_by_serving_ensemble(self, name: str) -> bool:
        """Whether a serving ensemble has a step that calls `name`."""
        return any(
            h.ready and any(step.model_name == name for step in h.spec.config.ensemble)
            for h in self.handles()
        )

    def lock(self, name: str) -> asyncio.Lock:
        """The lock name-level operations on `name` hold."""
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = asyncio.Lock()
        return lock

    def add(self, spec: ModelSpec) -> ModelHandle:
        """A new UNLOADED handle for `spec`.

        Raises:
            RepositoryError: its name and version are taken (naming both places).
        """
        config = spec.config
        versions = self._handles.setdefault(config.name, {})
        key = str(config.version)
        if key in versions:
            raise RepositoryError(
                f"model '{config.name}' version {key} is defined twice: at "
                f"{versions[key].spec.location()} and at {spec.location()}"
            )
        handle = versions[key] = ModelHandle(spec, self._supervisor, self._caller, self.budget)
        self._ordered[config.name] = [versions[k] for k in sorted(versions, key=int)]
        return handle

    def remove(self, handle: ModelHandle) -> None:
        """Forget `handle` (the caller unloaded it)."""
        versions = self._handles.get(handle.name, {})
        if versions.get(handle.version) is handle:
            del versions[handle.version]
        if versions:
            self._ordered[handle.name] = [versions[k] for k in sorted(versions, key=int)]
        else:
            self._handles.pop(handle.name, None)
            self._ordered.pop(handle.name, None)

    def set_failures(self, failures: Iterable[ImportFailure]) -> None:
        """Replace the list of files that failed to import."""
        self._failed = {}
        for failure in failures:
            for name, version in failure.models or ((failure.file.name, 1),):
                row = IndexEntry(name, str(version), ModelState.FAILED, failure.reason)
                self._failed.setdefault(name, []).append(row)

    def index(self) -> list[IndexEntry]:
        """Every model version with its state and reason, by name and version."""
        entries = [IndexEntry(h.name, h.version, h.state, self._reason(h)) for h in self.handles()]
        entries += [e for name, rows in self._failed.items() if name not in self._handles
                    for e in rows]  # fmt: skip
        entries.sort(key=lambda e: (e.name, int(e.version)))
        return entries

    def _reason(self, handle: ModelHandle) -> str:
        """A READY version whose file now fails to import says so (it serves the old code)."""
        failed = self._failed.get(handle.name)
        if failed and handle.ready:
            return f"{RELOAD_FAILED}: {failed[-1].reason}"
        return handle.reason

    def resolve(self, name: str, version: str, need_ready: bool) -> ModelHandle:
        """The handle a request for `name` (and `version`, "" for the latest) means.

        Without a version: the highest READY version, else the highest (whose state explains
        the error).

        Raises:
            ModelNotFoundError: unknown model or version; or no version named and none is
                ready (Triton 2.51: 404 / NOT_FOUND "... has no available versions").
            ModelNotReadyError: a named version is not ready (503 / UNAVAILABLE).
        """
        if not version:  # the common case first: the latest version serves
            ordered = self._ordered.get(name)
            if ordered and ordered[-1].state is ModelState.READY:
                return ordered[-1]
        versions = self._handles.get(name)
        if not versions:
            failed = self._failed.get(name)
            if failed:  # its file failed to import
                raise ModelNotFoundError(
                    f"model '{name}' has no available versions "
                    f"(version {failed[-1].version} is FAILED: {failed[-1].reason})"
                )
            raise ModelNotFoundError(f"unknown model '{name}'")
        if version:
            handle = versions.get(version)
            if handle is None:
                raise ModelNotFoundError(f"unknown version {version} of model '{name}'")
        else:
            ordered = self._ordered[name]
            handle = next((h for h in reversed(ordered) if h.ready), ordered[-1])
            if need_ready and not handle.ready:
                raise ModelNotFoundError(
                    f"model '{name}' has no available versions "
                    f"(version {handle.version} is {_state(handle)})"
                )
        if need_ready and not handle.ready:
            raise ModelNotReadyError(
                f"model '{name}' version {handle.version} is not ready ({_state(handle)})"
            )
        return handle


def _state(handle: ModelHandle) -> str:
    reason = f": {handle.reason}" if handle.reason else ""
    return f"{handle.state.value}{reason}"
