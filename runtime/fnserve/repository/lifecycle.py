"""One model version's lifecycle: UNAVAILABLE -> LOADING -> READY -> UNLOADING -> UNAVAILABLE.

Loading places the instances (CPU, or the GPUs of a KIND_GPU group), builds one backend per
instance on its own thread, and starts the batcher. A failed load leaves the version
UNAVAILABLE with the reason, visible in the repository index. Unloading turns not-ready at
once, lets queued and running requests finish within the drain deadline, fails what is left
with 503 / UNAVAILABLE (abandoning instances stuck in it), then releases the instances.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from typing import Any

from fnserve.backends.devices import cuda_device_count
from fnserve.backends.python import PythonBackend
from fnserve.config.model_config import InstanceGroup, Isolation, ModelConfig
from fnserve.config.server import ModelDefaults
from fnserve.errors import RepositoryError, UnavailableError
from fnserve.model import InstanceContext, ModelDefinition
from fnserve.scheduling.batcher import Batcher
from fnserve.scheduling.pool import Instance, InstancePool, ThreadInstance
from fnserve.scheduling.request import PendingRequest
from fnserve.scheduling.runner import BatchRunner
from fnserve.scheduling.threads import run_in_daemon_thread
from fnserve.stats import ModelStats

log = logging.getLogger(__name__)


class ModelVersion:
    """A served model version: its state, scheduler and statistics."""

    def __init__(self, definition: ModelDefinition[Any, Any]) -> None:
        self.definition = definition
        self.config: ModelConfig = definition.config
        self.version = str(self.config.version)
        self.state = "UNAVAILABLE"
        self.reason = "unloaded"
        self.stats = ModelStats(self.config.name, self.version)
        self._batcher: Batcher | None = None
        self._pool: InstancePool | None = None
        self._placements: list[tuple[InstanceContext, Isolation]] = []
        self._defaults = ModelDefaults()

    @property
    def ready(self) -> bool:
        return self.state == "READY"

    def submit_nowait(self, entry: PendingRequest) -> None:
        """Queue a validated request (the caller checked `ready`)."""
        if self._batcher is None:
            raise UnavailableError(f"model '{self.config.name}' is not loaded")
        self._batcher.submit_nowait(entry)

    async def load(self, defaults: ModelDefaults | None = None) -> None:
        """Build the instances and start serving; on failure record the reason and raise.

        Args:
            defaults: server-wide settings (execution timeout, queue bound, drain deadline)
                for what the model's own config leaves unset.
        """
        if self.state in ("READY", "LOADING"):
            return
        self._defaults = defaults or self._defaults
        self.state, self.reason = "LOADING", ""
        try:
            self._placements = placements(self.config)
            instances = [
                await run_in_daemon_thread(self.build_instance, i)
                for i in range(len(self._placements))
            ]
        except Exception as exc:
            self.state, self.reason = "UNAVAILABLE", str(exc)
            log.error(
                "model '%s' version %s failed to load: %s", self.config.name, self.version, exc
            )
            raise RepositoryError(
                f"failed to load '{self.config.name}' version {self.version}: {exc}"
            ) from exc
        self.stats = ModelStats(self.config.name, self.version)  # counters restart per load
        self._start(instances)
        log.info(
            "model '%s' version %s READY (%d instance(s))",
            self.config.name,
            self.version,
            len(instances),
        )

    def _start(self, instances: list[Instance]) -> None:
        batching = self.config.dynamic_batching
        ordered = bool(batching and batching.preserve_ordering)
        timeout_s = self.config.execution_timeout_s
        if timeout_s is None:
            timeout_s = self._defaults.execution_timeout_s
        self._pool = InstancePool(
            self.config.name, instances, self.stats, ordered, self.build_instance, timeout_s
        )
        self._batcher = Batcher(self.config, self._pool, self._defaults.max_queue_size)
        self._batcher.start()
        self.state, self.reason = "READY", ""

    def build_instance(self, index: int) -> Instance:
        """The pool's instance factory: build instance `index` (blocking user code)."""
        context, isolation = self._placements[index]
        if isolation == "process":
            return _process_instance(
                self.definition, context, self.config, self._defaults.debug_errors
            )
        backend = PythonBackend(self.definition, context)
        runner = BatchRunner(self.config, backend, self._defaults.debug_errors)
        return ThreadInstance(index, runner, f"{self.config.name}-{index}")

    async def unload(self, drain_timeout_s: float | None = None) -> None:
        """Stop taking requests, finish the queued and running ones, release the instances.

        Requests still queued or running after `drain_timeout_s` (default: the server's
        drain deadline) fail with UnavailableError, and instances stuck in them are abandoned.
        """
        if self.state != "READY" or self._batcher is None or self._pool is None:
            return
        self.state, self.reason = "UNLOADING", ""
        batcher, pool = self._batcher, self._pool
        if drain_timeout_s is None:
            drain_timeout_s = self._defaults.drain_timeout_s
        if not await _drain(batcher, pool, drain_timeout_s):
            self.abort(
                UnavailableError(
                    f"model '{self.config.name}' version {self.version} was unloaded before "
                    f"the request finished"
                )
            )
        pool.abort(UnavailableError(f"model '{self.config.name}' is unloading"))  # no rebuilds
        await batcher.aclose()
        self._batcher = self._pool = None
        self.state, self.reason = "UNAVAILABLE", "unloaded"
        await _close_pool(pool, self.config.name, drain_timeout_s)

    def abort(self, error: UnavailableError) -> None:
        """Fail every queued and running request with `error` now (past a drain deadline)."""
        if self._batcher is None or self._pool is None:
            return
        waiting, running = len(self._batcher.queue), self._pool.busy
        if waiting or running:
            log.warning(
                "model '%s' version %s: failing %d queued and %d running batch(es): %s",
                self.config.name,
                self.version,
                waiting,
                running,
                error,
            )
        self._batcher.queue.fail_all(error)
        self._pool.abort(error)


async def _drain(batcher: Batcher, pool: InstancePool, timeout_s: float) -> bool:
    """Let queued and running requests finish; False if `timeout_s` passed first."""
    batcher.flush()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while len(batcher.queue) or pool.busy:
        remaining = deadline - loop.time()
        if remaining <= 0:
            return False
        await pool.wait_progress(remaining)
    return True


async def _close_pool(pool: InstancePool, model: str, timeout_s: float) -> None:
    """Release the instances off the loop; a release that hangs is left behind after the
    deadline (on a daemon thread, so it cannot hold the process)."""
    try:
        await asyncio.wait_for(run_in_daemon_thread(pool.close), max(timeout_s, 1.0))
    except TimeoutError:
        log.warning("model '%s': releasing its instances took over %.1f s; left", model, timeout_s)
    except Exception:
        log.exception("model '%s': releasing its instances failed", model)


def _process_instance(
    definition: ModelDefinition[Any, Any],
    context: InstanceContext,
    config: ModelConfig,
    debug_errors: bool,
) -> Instance:
    try:  # lazy: only models with process isolation pay for the worker machinery
        process = importlib.import_module("fnserve.scheduling.process")
    except ImportError as exc:
        raise RepositoryError(
            f"model '{config.name}': instance isolation 'process' is not available in this "
            f"build ({exc})"
        ) from exc
    instance: Instance = process.ProcessInstance(definition, context, config, debug_errors)
    return instance


def placements(config: ModelConfig) -> list[tuple[InstanceContext, Isolation]]:
    """Each instance's context (with its device) and isolation, in instance-index order.

    Raises:
        RepositoryError: a GPU instance group cannot be placed.
    """
    result: list[tuple[InstanceContext, Isolation]] = []
    for group in config.instance_group:
        for kind, device in _group_devices(config.name, group):
            for _ in range(group.count):
                context = InstanceContext(
                    model_name=config.name,
                    model_version=config.version,
                    instance_index=len(result),
                    kind=kind,
                    device=device,
                    parameters=config.parameters,
                )
                result.append((context, group.isolation))
    return result


def place_instances(config: ModelConfig) -> list[InstanceContext]:
    """One context per instance, with its device; KIND_GPU without CUDA raises.

    Raises:
        RepositoryError: a GPU instance group cannot be placed.
    """
    return [context for context, _ in placements(config)]


def _group_devices(model: str, group: InstanceGroup) -> list[tuple[str, str]]:
    gpus = cuda_device_count()
    if group.kind == "KIND_CPU" or (group.kind == "KIND_AUTO" and not gpus):
        return [("KIND_CPU", "cpu")]
    if not gpus:
        raise RepositoryError(
            f"instance group of model '{model}' asks for KIND_GPU but no CUDA device is "
            f"available; use KIND_CPU or KIND_AUTO"
        )
    wanted = list(group.gpus) or list(range(gpus))
    missing = [i for i in wanted if i >= gpus]
    if missing:
        raise RepositoryError(
            f"instance group of model '{model}' asks for GPU(s) {missing} but only "
            f"{gpus} CUDA device(s) exist"
        )
    return [("KIND_GPU", f"cuda:{i}") for i in wanted]
