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
import dataclasses
import logging
import time
from collections.abc import Awaitable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from fnserve import __version__
from fnserve.backends.base import ModelSpec
from fnserve.classification import check_classification, classify
from fnserve.config.model_config import ModelConfig, Tensor, VersionPolicy
from fnserve.config.server import ModelDefaults
from fnserve.errors import (
    CancelledError,
    DeadlineExceededError,
    FnserveError,
    InvalidInputError,
    MemoryBudgetError,
    ModelExecutionError,
    ModelNotFoundError,
    RepositoryError,
    UnavailableError,
)
from fnserve.repository.changes import ReloadOutcome
from fnserve.repository.control import RepositoryControl
from fnserve.repository.discover import ImportFailure
from fnserve.repository.footprint import Footprint
from fnserve.repository.handle import ModelHandle
from fnserve.repository.idle import reap_idle
from fnserve.repository.loaded import LoadedModel, placed_groups
from fnserve.repository.registry import ModelRegistry
from fnserve.repository.source import ModelSource
from fnserve.scheduling.request import checked, prepare
from fnserve.scheduling.supervisor import Supervisor
from fnserve.stats import LifecycleStats, ModelStats
from fnserve.types import (
    Array,
    IndexEntry,
    InferOutput,
    InferRequest,
    InferResponse,
    ModelMetadata,
    ModelState,
    ServerMetadata,
    TensorMetadata,
)

log = logging.getLogger(__name__)
# Classification of outputs up to this many elements runs on the event loop (well under a
# millisecond); larger ones on a worker thread.
_INLINE_CLASSIFY_ELEMENTS = 4096


class LifecycleRecord(NamedTuple):
    """One version's lifecycle: counters, the memory it holds now, its instances now."""

    name: str
    version: str
    stats: LifecycleStats
    memory: Footprint
    instances: int


EXTENSIONS = (
    "classification",
    "model_configuration",
    "statistics",
    "model_repository",
    "model_repository(unload_dependents)",
    "binary_tensor_data",
    "parameters",
    "schedule_policy",
)


class Runtime:
    """Serves a set of model specs in this process.

    It composes the core: a registry of model handles (each a locked state machine), a
    supervisor that owns every background task, and the source files models came from.
    Frontends get typed records (`ServerMetadata`, `ModelMetadata`, `ModelConfig`,
    `ModelStats`, `IndexEntry`) and render them in their own wire format.

    Args:
        definitions: `@model` definitions (any `ModelSpec`); several versions of one name are
            allowed.
        source: the files they came from; a repository `load` then re-imports changed files
            and serves their new code.
        failures: files that failed to import: their models are listed FAILED with the
            reason (file and line) until a `load` imports them.

    Raises:
        RepositoryError: two definitions share a name and version (naming both places).
    """

    def __init__(
        self,
        definitions: Iterable[ModelSpec] = (),
        source: ModelSource | None = None,
        failures: Iterable[ImportFailure] = (),
    ) -> None:
        self.supervisor = Supervisor()
        self.registry = ModelRegistry(self.supervisor, self)
        self._source = source
        self._control = RepositoryControl(self.registry, source, lambda: self._defaults)
        self._started = False
        self._closing = False
        self._inflight = 0
        self._background_inflight = 0
        self._online_seen_ns = 0  # when an online request last left (perf_counter_ns)
        self._idle: asyncio.Event | None = None
        self._defaults = ModelDefaults()
        for definition in definitions:
            self.add(definition)
        self.registry.set_failures(failures)

    def add(self, spec: ModelSpec) -> ModelHandle:
        """Register a model (loaded by `start` or `load_model`)."""
        return self.registry.add(spec)

    async def start(
        self, defaults: ModelDefaults | None = None, names: Iterable[str] | None = None
    ) -> None:
        """Load the registered models; one failing model does not stop the others.

        Args:
            defaults: server-wide model settings (`ServerConfig.model_defaults()`), kept for
                later loads too.
            names: the models to load (None: all of them); the others stay UNLOADED until a
                repository load.
        """
        self._defaults = defaults or self._defaults
        for name in self.registry.names() if names is None else names:
            try:
                await self.load_model(name)
            except (RepositoryError, MemoryBudgetError):
                pass  # the reason is in the repository index and the log
        self.supervisor.spawn(
            reap_idle(self.registry.handles, lambda: self._defaults), "idle-reaper"
        )
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

    def online_idle_s(self) -> float:
        """Seconds since the last online (not background) request was in flight; 0 while one
        is. Durable jobs hold back while online traffic is recent."""
        if self._inflight > self._background_inflight:
            return 0.0
        return (time.perf_counter_ns() - self._online_seen_ns) / 1e9

    def abort(self, error: UnavailableError) -> None:
        """Fail every queued and running request with `error` (past the shutdown deadline);
        instances stuck in them are abandoned, so nothing is left to wait for."""
        for handle in self.registry.handles():
            handle.abort(error)

    async def aclose(self, drain_timeout_s: float | None = None) -> None:
        """Unload everything, letting queued and running requests finish first, then stop
        every background task.

        Args:
            drain_timeout_s: how long they may take (default: the server's drain deadline);
                past it they fail with UnavailableError.
        """
        self._closing = True
        await asyncio.gather(*(h.unload(drain_timeout_s) for h in self.registry.handles()))
        await self.supervisor.aclose()

    # -- health and metadata -------------------------------------------------------------

    def server_metadata(self) -> ServerMetadata:
        return ServerMetadata("fnserve", __version__, EXTENSIONS)

    def is_live(self) -> bool:
        return True

    def is_ready(self) -> bool:
        return self._started and not self._closing

    def model_ready(self, name: str, version: str = "") -> bool:
        try:
            return self.registry.resolve(name, version, need_ready=False).ready
        except ModelNotFoundError:
            return False

    def model_metadata(self, name: str, version: str = "") -> ModelMetadata:
        """Metadata of a ready version: like inference, Triton 2.51 answers an unloaded or
        loading model's metadata and config with 404 / 503, not with the stale document."""
        handle = self.registry.resolve(name, version, need_ready=True)
        versions: tuple[str, ...] = (handle.version,)
        if not version:
            versions = tuple(h.version for h in self.registry.versions(name) if h.ready)
        config = handle.config
        return ModelMetadata(
            config.name,
            versions,
            config.platform or config.backend,
            tuple(_tensor(config, t) for t in config.inputs),
            tuple(_tensor(config, t) for t in config.outputs),
        )

    def model_config(self, name: str, version: str = "") -> ModelConfig:
        """Configuration of a ready version (errors as for `model_metadata`)."""
        return self.registry.resolve(name, version, need_ready=True).config

    def reported_config(self, name: str, version: str = "") -> ModelConfig:
        """`model_config` as the config API reports it, the way Triton does: each instance
        group as placed (KIND_AUTO resolved to KIND_CPU or KIND_GPU with its GPUs), and a
        version policy also for an @model (which has none): `all` when its code defines
        several versions of the name (all of them are served), else the latest one."""
        config = self.model_config(name, version)
        policy = config.version_policy
        if policy is None:
            several = len(self.registry.versions(name)) > 1
            policy = VersionPolicy("all") if several else VersionPolicy()
        return dataclasses.replace(
            config, version_policy=policy, instance_group=placed_groups(config)
        )

    def statistics(self, name: str = "", version: str = "") -> list[ModelStats]:
        """Statistics of one model's ready versions (or of every model version when `name`
        is ""). The records are live: render them before awaiting anything.

        Raises:
            InvalidInputError: the model, or that version, is unknown or not loaded (Triton
                2.51 answers 400 for both).
        """
        if not name:
            return [h.stats for h in self.registry.handles()]
        handles = [h for h in self.registry.versions(name) if h.ready]
        if not handles:
            raise InvalidInputError(f"requested model '{name}' is not available")
        if version:
            handles = [h for h in handles if h.version == version]
            if not handles:
                raise InvalidInputError(
                    f"requested model '{name}' version {version} is not available"
                )
        return [h.stats for h in handles]

    def repository_index(self, ready: bool = False) -> list[IndexEntry]:
        """Every model version, or (`ready`) those that serve requests: READY, and IDLE ones
        (scaled to zero: the next request cold-starts them)."""
        entries = self.registry.index()
        if not ready:
            return entries
        return [e for e in entries if e.state in (ModelState.READY, ModelState.IDLE)]

    def version_stats(self) -> list[ModelStats]:
        """Every version's live statistics record (for the metrics exporter)."""
        return [h.stats for h in self.registry.handles()]

    def lifecycles(self) -> list[LifecycleRecord]:
        """Every version's lifecycle counters, memory and instances (for the metrics)."""
        return [
            LifecycleRecord(
                h.name,
                h.version,
                h.lifecycle,
                h.footprint if h.holds_memory else Footprint(),
                len(h.loaded.pool.instances) if h.loaded is not None else 0,
            )
            for h in self.registry.handles()
        ]

    # -- lifecycle -----------------------------------------------------------------------

    async def load_model(self, name: str) -> None:
        """Load (or reload) every version of `name`; returns once they serve.

        With a source, files changed since they were imported are imported again first; a
        version whose code changed is rebuilt beside the serving one and swapped in (no
        request fails), new versions are loaded, then versions no longer defined unloaded
        (kept when no defined version could be served). When its file now fails to import,
        this fails with the reason and the old code keeps serving.
        Loads and unloads of one name run one after the other, in the order asked.

        An ensemble's step models that are not serving are loaded first, as Triton loads the
        models composing an ensemble with it; one that fails fails the ensemble's load.

        Raises:
            RepositoryError: unknown model, its file fails to import, or a version (or a step
                model of an ensemble) failed to load.
        """
        await self._control.load(name)

    async def reload_changed(self, changed: Collection[Path]) -> list[ReloadOutcome]:
        """Reload every model the changed files touch (new ones load, deleted ones unload),
        each as `load_model` does, and log each outcome (what a file watcher calls).

        Raises:
            RepositoryError: a model path given at start no longer exists.
        """
        return await self._control.reload_changed(changed)

    @property
    def source(self) -> ModelSource | None:
        """The files the models come from (None when they were given as definitions)."""
        return self._source

    @property
    def model_paths(self) -> list[Path]:
        """The files and folders the models are served from (none without a source)."""
        return [] if self._source is None else list(self._source.paths)

    async def unload_model(
        self, name: str, unload_dependents: bool = False, drain_timeout_s: float | None = None
    ) -> None:
        """Unload every version of `name`; an unknown name is not an error (as in Triton).
        With `unload_dependents`, an ensemble's step models go too (and theirs), except those
        another serving ensemble still uses, as Triton's `unload_dependents` does.

        Requests still running after `drain_timeout_s` (default: the server's
        `--shutdown-timeout`) fail with UnavailableError; a stuck instance is abandoned.
        """
        await self._control.unload(name, unload_dependents, drain_timeout_s)

    # -- inference -----------------------------------------------------------------------

    def validate(self, request: InferRequest) -> None:
        """The checks `infer` makes before queueing (model, version, inputs, outputs,
        parameters), without running anything: durable jobs are checked when submitted.

        Raises:
            ModelNotFoundError, ModelNotReadyError, InvalidInputError, UnsupportedError.
        """
        handle = self.registry.resolve(request.model_name, request.model_version, True)
        prepare(handle.config, request).future.cancel()
        if request.classification:
            check_classification(handle.config, request.classification)

    def call_now(
        self,
        model_name: str,
        model_version: str,
        inputs: Sequence[tuple[str, str, Any]],
        outputs: Sequence[str],
        call_chain: tuple[str, ...],
    ) -> tuple[Mapping[str, Any], Mapping[str, str]] | None:
        """See `ModelCaller.call_now`: the direct lane (scheduling/direct.py) without the
        request and response objects, for ensemble steps. Counted as `infer` counts."""
        if self._closing or model_name in call_chain:
            return None  # `infer` says why
        try:
            handle = self.registry.resolve(model_name, model_version, True)
        except FnserveError:
            return None
        loaded = handle.loaded
        if loaded is None or loaded.direct is None or not loaded.config.plan.knows_outputs(outputs):
            return None
        start_ns = time.perf_counter_ns()
        try:
            answer = loaded.direct.try_run(inputs)
        except BaseException as exc:
            loaded.stats.record_failure(_failure_reason(exc), time.perf_counter_ns() - start_ns)
            raise
        if answer is None:
            return None
        end_ns = handle.last_used_ns = self._online_seen_ns = time.perf_counter_ns()
        loaded.stats.record_success(end_ns - start_ns)
        return answer, loaded.config.output_datatypes

    async def infer(self, request: InferRequest, *, background: bool = False) -> InferResponse:
        """Run one request through the model's scheduler.

        Args:
            request: the request.
            background: run it in the background lane, below every online request (durable
                jobs use it).

        Raises:
            ModelNotFoundError, ModelNotReadyError, InvalidInputError, UnavailableError,
            DeadlineExceededError, ModelExecutionError: see `fnserve.errors`.
        """
        loaded, outputs = await self._run(request, background)
        if request.classification:
            return await _classified(loaded, request, outputs)
        return _response(loaded, request, outputs)

    async def infer_outputs(
        self, request: InferRequest
    ) -> tuple[Mapping[str, Array], Mapping[str, str]]:
        """See `ModelCaller.infer_outputs`: `infer` without the response objects."""
        loaded, outputs = await self._run(request, False)
        return outputs, loaded.config.output_datatypes

    async def _run(
        self, request: InferRequest, background: bool
    ) -> tuple[LoadedModel, dict[str, Array]]:
        """`infer`'s work: the model that ran and every output it gave."""
        if self._closing:
            raise UnavailableError("the server is shutting down")
        if request.call_chain and request.model_name in request.call_chain:
            cycle = " -> ".join((*request.call_chain, request.model_name))
            raise ModelExecutionError(f"model call cycle: {cycle}")
        handle = self.registry.resolve(request.model_name, request.model_version, True)
        start_ns = handle.last_used_ns = time.perf_counter_ns()
        loaded = handle.loaded or await handle.wake(self._defaults)  # None: scaled to zero
        stats = loaded.stats
        self._inflight += 1
        self._background_inflight += background
        try:
            if request.classification:
                check_classification(loaded.config, request.classification)
            outputs = None
            direct = loaded.direct
            if (
                direct is not None
                and not (background or request.parameters)
                and (request.outputs is None or loaded.config.plan.knows_outputs(request.outputs))
            ):
                outputs = direct.try_run(request.inputs)
            if outputs is None:
                ensemble = loaded.ensemble
                running: Awaitable[dict[str, Array]]
                if ensemble is not None and not (background or request.parameters):
                    # No queue entry to build: an ensemble has no queue.
                    inputs = checked(loaded.config, request)[0]
                    running = ensemble.run_inputs(inputs, request.call_chain)
                else:
                    running = loaded.scheduler.execute(prepare(loaded.config, request, background))
                stats.pending += 1
                try:
                    outputs = await running
                finally:
                    stats.pending -= 1
        except BaseException as exc:
            stats.record_failure(_failure_reason(exc), time.perf_counter_ns() - start_ns)
            raise
        finally:
            self._inflight -= 1
            self._background_inflight -= background
            if not background:
                self._online_seen_ns = time.perf_counter_ns()
            if not self._inflight and self._idle is not None:
                self._idle.set()
        end_ns = handle.last_used_ns = time.perf_counter_ns()
        stats.record_success(end_ns - start_ns)
        return loaded, outputs


def _tensor(config: ModelConfig, tensor: Tensor) -> TensorMetadata:
    return TensorMetadata(tensor.name, tensor.datatype, tuple(config.full_shape(tensor)))


def _failure_reason(exc: BaseException) -> str:
    if isinstance(exc, UnavailableError):
        return "REJECTED"
    if isinstance(exc, asyncio.CancelledError | CancelledError):
        return "CANCELED"
    if isinstance(exc, ModelExecutionError | DeadlineExceededError):
        return "BACKEND"  # Triton's reasons; timeouts also count in execution_timeouts
    return "OTHER"


async def _classified(
    loaded: LoadedModel, request: InferRequest, outputs: dict[str, Any]
) -> InferResponse:
    """The response with the outputs asked for as classes replaced by them; large ones are
    sorted and formatted on a worker thread, to keep the event loop free."""
    response = _response(loaded, request, outputs)
    counts = request.classification
    size = sum(o.data.size for o in response.outputs if o.name in counts)
    if size <= _INLINE_CLASSIFY_ELEMENTS:
        return classify(loaded.config, response, counts)
    return await asyncio.to_thread(classify, loaded.config, response, counts)


def _response(loaded: LoadedModel, request: InferRequest, outputs: dict[str, Any]) -> InferResponse:
    config = loaded.config
    datatypes = config.output_datatypes
    tensors = []  # a loop, not a generator: one function less on every request's path
    for name in datatypes if request.outputs is None else request.outputs:
        tensors.append(InferOutput(name, datatypes[name], outputs[name]))
    return InferResponse(config.name, loaded.version, tuple(tensors), request.id)
