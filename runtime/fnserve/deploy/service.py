"""Deploy, roll back and undeploy on a running server.

A deployment is a named folder of model files (Python files, Triton model directories) pushed
as an archive. `deploy` checks the archive, skips content already serving, unpacks it into the
state directory, imports it in a child process (`validate.py`), then serves it in place of the
previous version through the repository load (`Runtime.load_model`: the new code is built and
warmed beside the old, swapped in, the old drained). When that load fails, the previous folder
serves again, the old version untouched, and the reason is returned. One operation runs at a
time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from fnserve.deploy.archive import read_archive
from fnserve.deploy.store import DeployedVersion, Deployment, DeploymentStore, check_name
from fnserve.deploy.validate import validate
from fnserve.errors import (
    FnserveError,
    InvalidInputError,
    MemoryBudgetError,
    ModelNotFoundError,
    RepositoryError,
    UnsupportedError,
)
from fnserve.repository.source import ModelSource
from fnserve.runtime import Runtime

log = logging.getLogger(__name__)
T = TypeVar("T")


class DeploySettings(NamedTuple):
    """How the server takes deployments.

    Args:
        state_dir: where deployments are kept (and found again after a restart).
        max_bytes: largest archive; its files may unpack to 8 times that.
        validate_timeout_s: how long the import in the child process may take.
    """

    state_dir: str = ".fnserve-state"
    max_bytes: int = 64 * 1024 * 1024
    validate_timeout_s: float = 60.0


@dataclass(frozen=True)
class ModelReport:
    """One model version a deployment serves, and what its load took."""

    name: str
    version: str
    state: str
    load_s: float
    warmup_s: float
    inputs: tuple[tuple[str, str, tuple[int, ...]], ...]  # name, datatype, shape


@dataclass(frozen=True)
class DeployReport:
    """What a deployment serves after an operation.

    Args:
        unchanged: the content was already serving: nothing was done.
    """

    name: str
    version: int
    digest: str
    deployed_at: float
    models: tuple[ModelReport, ...]
    unchanged: bool = False


class DeployService:
    """Deployments of one runtime.

    Args:
        runtime: the server's runtime; it must serve from a `ModelSource`.
        settings: state directory and limits.
    """

    def __init__(self, runtime: Runtime, settings: DeploySettings) -> None:
        self._runtime = runtime
        self.settings = settings
        self.store = DeploymentStore(settings.state_dir)
        self._lock = asyncio.Lock()

    def _source(self) -> ModelSource:
        if self._runtime.source is None:
            raise UnsupportedError("this server does not serve from files: it cannot deploy")
        return self._runtime.source

    async def deploy(self, name: str, data: bytes) -> DeployReport:
        """Serve the archive `data` as the next version of deployment `name`.

        Raises:
            InvalidInputError: a bad name or archive, a failed import or load (the reason;
                the previous version keeps serving), or a model another source serves.
            PayloadTooLargeError: the archive unpacks past the limit.
        """
        try:
            return await _shielded(self._deploy(check_name(name), self._source(), data))
        except FnserveError as exc:
            log.warning("deployment '%s' refused: %s", name[:80], exc.message)
            raise

    async def _deploy(self, name: str, source: ModelSource, data: bytes) -> DeployReport:
        async with self._lock:
            files = await asyncio.to_thread(read_archive, data, 8 * self.settings.max_bytes)
            deployment = await asyncio.to_thread(self.store.load, name)
            serving = deployment.serving
            if serving is not None and serving.digest == files.digest:
                return self._report(name, serving, unchanged=True)
            folder = self.store.folder(name, files.digest)
            await asyncio.to_thread(files.write_once, folder)
            try:
                models = await validate(folder, self.settings.validate_timeout_s)
                self._check_conflicts(deployment, models)
                await self._serve(source, deployment, folder, models)
            except BaseException:
                await asyncio.to_thread(self.store.discard, name, files.digest)
                raise
            deployment = await asyncio.to_thread(self.store.add, name, files.digest, models)
            assert deployment.serving is not None
            log.info("deployment '%s' version %d serves", name, deployment.current)
            return self._report(name, deployment.serving)

    async def rollback(self, name: str, to: int = 0) -> DeployReport:
        """Serve an earlier version of `name` again (`to`: its number; 0: the one deployed
        before the current one).

        Raises:
            ModelNotFoundError: no such deployment or version.
            InvalidInputError: it failed to load (the current version keeps serving).
        """
        try:
            return await _shielded(self._rollback(name, to))
        except FnserveError as exc:
            log.warning("rollback of deployment '%s' refused: %s", name[:80], exc.message)
            raise

    async def _rollback(self, name: str, to: int) -> DeployReport:
        async with self._lock:
            deployment = await self._existing(name)
            target = deployment.get(to) if to else _previous(deployment)
            if target.version != deployment.current:
                self._check_conflicts(deployment, target.models)
                folder = self.store.folder(name, target.digest)
                await self._serve(self._source(), deployment, folder, target.models)
                deployment = Deployment(name, target.version, deployment.versions)
                await asyncio.to_thread(self.store.save, deployment)
            return self._report(name, target)

    async def undeploy(self, name: str) -> None:
        """Stop serving `name`'s models and delete its versions.

        Raises:
            ModelNotFoundError: no such deployment.
        """
        await _shielded(self._undeploy(name))

    async def _undeploy(self, name: str) -> None:
        async with self._lock:
            deployment = await self._existing(name)
            if deployment.serving is not None:
                old = self.store.folder(name, deployment.serving.digest)
                self._source().replace_path(old, None)
                await self._reload(_names(deployment.serving.models))
            await asyncio.to_thread(self.store.remove, name)

    async def deployments(self) -> list[tuple[Deployment, list[ModelReport]]]:
        """Every deployment, with its current version's models."""
        found = await asyncio.to_thread(self.store.all)
        return [(d, list(self._models(d.serving.models if d.serving else ()))) for d in found]

    async def _existing(self, name: str) -> Deployment:
        deployment = await asyncio.to_thread(self.store.load, check_name(name))
        if not deployment.versions:
            raise ModelNotFoundError(f"no deployment named '{name}'")
        return deployment

    def _check_conflicts(self, deployment: Deployment, models: Iterable[tuple[str, str]]) -> None:
        ours = _names(deployment.serving.models) if deployment.serving else set()
        served = set(self._runtime.registry.names())
        taken = sorted((_names(models) & served) - ours)
        if taken:
            raise InvalidInputError(
                f"model '{taken[0]}' is already served from another file or deployment; "
                f"rename it or undeploy the other first"
            )

    async def _serve(
        self,
        source: ModelSource,
        deployment: Deployment,
        folder: Path,
        models: Iterable[tuple[str, str]],
    ) -> None:
        """Serve `folder` in place of the current version; on failure serve the old again."""
        old = (
            self.store.folder(deployment.name, deployment.serving.digest)
            if deployment.serving
            else None
        )
        names = _names(models) | (
            _names(deployment.serving.models) if deployment.serving else set()
        )
        source.replace_path(old, folder)
        try:
            await self._reload(names)
        except (RepositoryError, MemoryBudgetError) as exc:
            source.replace_path(folder, old)
            try:
                await self._reload(names)
            except (RepositoryError, MemoryBudgetError):
                log.exception("deployment '%s': restoring the previous version", deployment.name)
            keeps = f"version {deployment.current} keeps serving" if old else "nothing was served"
            raise InvalidInputError(
                f"deployment '{deployment.name}' failed to load ({keeps}): {exc.message}"
            ) from exc
        except BaseException:
            source.replace_path(folder, old)  # its folder may be deleted next: never serve it
            raise

    async def _reload(self, names: Iterable[str]) -> None:
        for name in sorted(names):
            await self._runtime.load_model(name)

    def _report(self, name: str, version: DeployedVersion, unchanged: bool = False) -> DeployReport:
        models = tuple(self._models(version.models))
        return DeployReport(
            name, version.version, version.digest, version.deployed_at, models, unchanged
        )

    def _models(self, models: Iterable[tuple[str, str]]) -> Iterable[ModelReport]:
        stats = {(s.name, s.version): s for s in self._runtime.version_stats()}
        states = {(e.name, e.version): e for e in self._runtime.repository_index()}
        for name, version in models:
            entry = states.get((name, version))
            record = stats.get((name, version))
            yield ModelReport(
                name,
                version,
                entry.state.value if entry else "UNAVAILABLE",
                record.load_ns / 1e9 if record else 0.0,
                record.warmup_ns / 1e9 if record else 0.0,
                self._inputs(name, version),
            )

    def _inputs(self, name: str, version: str) -> tuple[tuple[str, str, tuple[int, ...]], ...]:
        try:
            metadata = self._runtime.model_metadata(name, version)
        except Exception:  # not ready: no inputs to show
            return ()
        return tuple((t.name, t.datatype, tuple(t.shape)) for t in metadata.inputs)


async def _shielded(operation: Coroutine[Any, Any, T]) -> T:
    """Run `operation` to its end even when the caller is cancelled (a client that hangs up
    mid-deployment must not leave the source half switched); with nobody left to tell, its
    outcome is then logged (only then: the caller reports it otherwise)."""
    task = asyncio.ensure_future(operation)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.add_done_callback(_log_orphan)
        raise


def _log_orphan(task: asyncio.Future[Any]) -> None:
    if task.cancelled():
        return
    error = task.exception()
    if error is None:
        log.info("deployment operation finished after its client went away")
    else:
        log.info("deployment operation ended after its client went away: %s", error)


def _names(models: Iterable[tuple[str, str]]) -> set[str]:
    return {name for name, _ in models}


def _previous(deployment: Deployment) -> DeployedVersion:
    earlier = [v for v in deployment.versions if v.version < deployment.current]
    if not earlier:
        raise ModelNotFoundError(
            f"deployment '{deployment.name}' has no version before {deployment.current} "
            f"to roll back to"
        )
    return earlier[-1]
