"""Runtime: the in-process facade of the core (infer, load, unload, metadata, statistics).

Frontends translate wire formats to `InferRequest` and call `Runtime.infer`; ensembles and
business-logic functions call it the same way (through the `ModelCaller` protocol).

Example:
    ```python
    runtime = Runtime([identity])
    await runtime.start()
    response = await runtime.infer(InferRequest("identity", (InferInput("INPUT0", "FP32", x),)))
    await runtime.aclose()
    ```
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any

from fnserve import __version__
from fnserve.config.model_config import ModelConfig
from fnserve.config.server import ModelDefaults
from fnserve.errors import (
    CancelledError,
    DeadlineExceededError,
    FnserveError,
    InvalidInputError,
    ModelExecutionError,
    ModelNotFoundError,
    ModelNotReadyError,
    RepositoryError,
    UnavailableError,
)
from fnserve.model import ModelDefinition
from fnserve.repository.discover import ImportFailure
from fnserve.repository.lifecycle import ModelVersion
from fnserve.repository.source import ModelSource
from fnserve.scheduling.request import prepare
from fnserve.types import IndexEntry, InferOutput, InferRequest, InferResponse

log = logging.getLogger(__name__)

EXTENSIONS = (
    "model_configuration",
    "statistics",
    "model_repository",
    "binary_tensor_data",
    "parameters",
    "schedule_policy",
)


class Runtime:
    """Serves a set of model definitions in this process.

    Args:
        definitions: `@model` definitions; several versions of one name are allowed.
        source: the files they came from; a repository `load` then re-imports changed files
            and serves their new code.
        failures: files that failed to import: their models are listed UNAVAILABLE with the
            reason (file and line) until a `load` imports them.

    Raises:
        RepositoryError: two definitions share a name and version (naming both places).
    """

    def __init__(
        self,
        definitions: Iterable[ModelDefinition[Any, Any]] = (),
        source: ModelSource | None = None,
        failures: Iterable[ImportFailure] = (),
    ) -> None:
        self._models: dict[str, dict[str, ModelVersion]] = {}
        self._ordered: dict[str, list[ModelVersion]] = {}  # versions by number, for lookups
        self._source = source
        self._failed: dict[str, list[IndexEntry]] = {}  # models of files that failed to import
        self._started = False
        self._closing = False
        self._inflight = 0
        self._idle: asyncio.Event | None = None
        self._defaults = ModelDefaults()
        for definition in definitions:
            self.add(definition)
        self._set_failures(failures)

    def add(self, definition: ModelDefinition[Any, Any]) -> None:
        """Register a definition (loaded by `start` or `load_model`)."""
        config = definition.config
        versions = self._models.setdefault(config.name, {})
        key = str(config.version)
        if key in versions:
            raise RepositoryError(
                f"model '{config.name}' version {key} is defined twice: at "
                f"{versions[key].definition.location()} and at {definition.location()}"
            )
        versions[key] = ModelVersion(definition)
        self._ordered[config.name] = [versions[k] for k in sorted(versions, key=int)]

    async def start(self, defaults: ModelDefaults | None = None) -> None:
        """Load every registered model; one failing model does not stop the others.

        Args:
            defaults: server-wide model settings (`ServerConfig.model_defaults()`), kept for
                later loads too.
        """
        self._defaults = defaults or self._defaults
        for name in list(self._models):
            try:
                await self.load_model(name)
            except RepositoryError:
                pass  # the reason is in the repository index and the log
        self._started = True

    def stop_accepting(self) -> None:
        """Refuse new requests (UNAVAILABLE) from now on; requests in flight carry on."""
        self._closing = True

    async def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no request is in flight; False if `timeout_s` passed first."""
        if not self._inflight:
            return True
        self._idle = asyncio.Event()  # set by the request that leaves the server idle
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    def abort(self, error: UnavailableError) -> None:
        """Fail every queued and running request with `error` (past the shutdown deadline);
        instances stuck in them are abandoned, so nothing is left to wait for."""
        for versions in self._models.values():
            for version in versions.values():
                version.abort(error)

    async def aclose(self, drain_timeout_s: float | None = None) -> None:
        """Unload everything, letting queued and running requests finish first.

        Args:
            drain_timeout_s: how long they may take (default: the server's drain deadline);
                past it they fail with UnavailableError.
        """
        self._closing = True
        await asyncio.gather(
            *(v.unload(drain_timeout_s) for vs in self._models.values() for v in vs.values())
        )

    # -- health and metadata -------------------------------------------------------------

    def server_metadata(self) -> dict[str, Any]:
        return {"name": "fnserve", "version": __version__, "extensions": list(EXTENSIONS)}

    def is_live(self) -> bool:
        return True

    def is_ready(self) -> bool:
        return self._started and not self._closing

    def model_ready(self, name: str, version: str = "") -> bool:
        try:
            return self._version(name, version, need_ready=False).ready
        except FnserveError:
            return False

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        """Metadata of a ready version: like inference, Triton 2.51 answers an unloaded or
        loading model's metadata and config with 404 / 503, not with the stale document."""
        model = self._version(name, version, need_ready=True)
        if version:
            versions = [model.version]
        else:
            versions = [v.version for v in self._sorted(name) if v.ready] or [model.version]
        return model.config.metadata(versions)

    def model_config(self, name: str, version: str = "") -> ModelConfig:
        """Configuration of a ready version (errors as for `model_metadata`)."""
        return self._version(name, version, need_ready=True).config

    def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        """Triton's statistics document for one model (or every model when `name` is "")."""
        if not name:
            stats = [v.stats.to_json() for n in sorted(self._models) for v in self._sorted(n)]
            return {"model_stats": stats}
        versions = [v for v in self._sorted(name) if v.ready] if name in self._models else []
        if not versions:  # unknown, or no version loaded: Triton 2.51 answers 400 for both
            raise InvalidInputError(f"requested model '{name}' is not available")
        if version:
            versions = [v for v in versions if v.version == version]
            if not versions:
                raise InvalidInputError(
                    f"requested model '{name}' version {version} is not available"
                )
        return {"model_stats": [v.stats.to_json() for v in versions]}

    def repository_index(self, ready: bool = False) -> list[IndexEntry]:
        entries = [
            IndexEntry(name, v.version, v.state, v.reason)
            for name in sorted(self._models)
            for v in self._sorted(name)
        ]
        entries += [e for name, rows in self._failed.items() if name not in self._models
                    for e in rows]  # fmt: skip
        entries.sort(key=lambda e: (e.name, int(e.version)))
        return [e for e in entries if e.state == "READY"] if ready else entries

    def version_stats(self) -> list[Any]:
        """Every version's live statistics record (for the metrics exporter)."""
        return [v.stats for vs in self._models.values() for v in vs.values()]

    # -- lifecycle -----------------------------------------------------------------------

    async def load_model(self, name: str) -> None:
        """Load (or reload) every version of `name`.

        With a source, files changed since they were imported are imported again first; when
        `name`'s definitions changed, its old versions are unloaded (drained) and the new ones
        loaded, so the code served after this returns is the code on disk. When its file now
        fails to import, this fails with the reason and the old versions keep serving.

        Raises:
            RepositoryError: unknown model, its file fails to import, or a version failed to
                load.
        """
        if self._source is not None:
            await self._refresh(name)
        if name not in self._models:
            raise RepositoryError(f"failed to load '{name}', no version is available")
        errors = []
        for model in self._sorted(name):
            try:
                await model.load(self._defaults)
            except RepositoryError as exc:
                errors.append(exc.message)
        if errors:
            raise RepositoryError("; ".join(errors))

    async def _refresh(self, name: str) -> None:
        """Re-import changed files and swap in `name`'s new definitions, if any."""
        assert self._source is not None
        found = await asyncio.to_thread(self._source.scan)  # user code: not on the loop
        self._set_failures(found.failures)
        broken = [f for f in found.failures if name in (n for n, _ in f.models)]
        if broken:
            raise RepositoryError(f"failed to load '{name}': {broken[0].reason}")
        new = {str(d.config.version): d for d in found.definitions if d.config.name == name}
        old = {v.version: v.definition for v in self._sorted(name)}
        if new.keys() == old.keys() and all(new[k] is old[k] for k in new):
            return
        for version in self._sorted(name):
            await version.unload()
        self._models.pop(name, None)
        self._ordered.pop(name, None)
        for definition in sorted(new.values(), key=lambda d: d.config.version):
            self.add(definition)
        log.info("model '%s': re-imported changed source, loading its new code", name)

    def _set_failures(self, failures: Iterable[ImportFailure]) -> None:
        self._failed = {}
        for failure in failures:
            for name, version in failure.models or ((failure.file.name, 1),):
                row = IndexEntry(name, str(version), "UNAVAILABLE", failure.reason)
                self._failed.setdefault(name, []).append(row)

    async def unload_model(
        self, name: str, unload_dependents: bool = False, drain_timeout_s: float | None = None
    ) -> None:
        """Unload every version of `name`; an unknown name is not an error (as in Triton).

        Requests still running after `drain_timeout_s` (default: the server's
        `--shutdown-timeout`) fail with UnavailableError; a stuck instance is abandoned.
        """
        del unload_dependents  # fnserve has no ensembles yet, so nothing depends on a model
        for model in self._sorted(name):
            await model.unload(drain_timeout_s)

    # -- inference -----------------------------------------------------------------------

    async def infer(self, request: InferRequest) -> InferResponse:
        """Run one request through the model's scheduler.

        Raises:
            ModelNotFoundError, ModelNotReadyError, InvalidInputError, UnavailableError,
            DeadlineExceededError, ModelExecutionError: see `fnserve.errors`.
        """
        if self._closing:
            raise UnavailableError("the server is shutting down")
        model = self._version(request.model_name, request.model_version, need_ready=True)
        start_ns = time.perf_counter_ns()
        stats = model.stats
        self._inflight += 1
        try:
            entry = prepare(model.config, request)
            model.submit_nowait(entry)
            stats.pending += 1
            try:
                outputs = await entry.future
            finally:
                stats.pending -= 1
        except BaseException as exc:
            stats.record_failure(_failure_reason(exc), time.perf_counter_ns() - start_ns)
            raise
        finally:
            self._inflight -= 1
            if not self._inflight and self._idle is not None:
                self._idle.set()
        stats.record_success(time.perf_counter_ns() - start_ns)
        return _response(model, request, outputs)

    # -- helpers -------------------------------------------------------------------------

    def _sorted(self, name: str) -> list[ModelVersion]:
        return self._ordered.get(name, [])

    def _version(self, name: str, version: str, need_ready: bool) -> ModelVersion:
        versions = self._models.get(name)
        if not versions:
            failed = self._failed.get(name)
            if failed:  # its file failed to import
                raise ModelNotFoundError(
                    f"model '{name}' has no available versions "
                    f"(version {failed[-1].version} is UNAVAILABLE: {failed[-1].reason})"
                )
            raise ModelNotFoundError(f"unknown model '{name}'")
        if version:
            model = versions.get(version)
            if model is None:
                raise ModelNotFoundError(f"unknown version {version} of model '{name}'")
        else:  # the highest ready version, else the highest (whose state explains the error)
            ordered = self._sorted(name)
            model = next((v for v in reversed(ordered) if v.ready), ordered[-1])
            if need_ready and not model.ready:
                # Triton 2.51: 404 / NOT_FOUND "... has no available versions" when no version
                # is named and none is ready (unloaded, failed, loading); a named version that
                # is not ready is 503 / UNAVAILABLE (below).
                raise ModelNotFoundError(
                    f"model '{name}' has no available versions "
                    f"(version {model.version} is {model.state}{_because(model)})"
                )
        if need_ready and not model.ready:
            raise ModelNotReadyError(
                f"model '{name}' version {model.version} is not ready "
                f"({model.state}{_because(model)})"
            )
        return model


def _because(model: ModelVersion) -> str:
    return f": {model.reason}" if model.reason else ""


def _failure_reason(exc: BaseException) -> str:
    if isinstance(exc, UnavailableError):
        return "REJECTED"
    if isinstance(exc, asyncio.CancelledError | CancelledError):
        return "CANCELED"
    if isinstance(exc, ModelExecutionError | DeadlineExceededError):
        return "BACKEND"  # Triton's reasons; timeouts also count in execution_timeouts
    return "OTHER"


def _response(model: ModelVersion, request: InferRequest, outputs: dict[str, Any]) -> InferResponse:
    config = model.config
    datatypes = config.output_datatypes
    names = datatypes if request.outputs is None else request.outputs
    return InferResponse(
        model_name=config.name,
        model_version=model.version,
        id=request.id,
        outputs=tuple(InferOutput(n, datatypes[n], outputs[n]) for n in names),
    )
