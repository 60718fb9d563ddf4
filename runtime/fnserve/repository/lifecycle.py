"""One model version's lifecycle: UNAVAILABLE -> LOADING -> READY -> UNLOADING -> UNAVAILABLE.

Loading places the instances (CPU, or the GPUs of a KIND_GPU group), builds one backend per
instance on its own thread, and starts the batcher. A failed load leaves the version
UNAVAILABLE with the reason, visible in the repository index. Unloading turns not-ready at
once, lets queued and running requests finish, then releases the instances.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fnserve.backends.devices import cuda_device_count
from fnserve.backends.python import PythonBackend
from fnserve.config.model_config import InstanceGroup, ModelConfig
from fnserve.errors import RepositoryError, UnavailableError
from fnserve.model import InstanceContext, ModelDefinition
from fnserve.scheduling.batcher import Batcher
from fnserve.scheduling.pool import Instance, InstancePool
from fnserve.scheduling.request import PendingRequest
from fnserve.scheduling.runner import BatchRunner
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

    @property
    def ready(self) -> bool:
        return self.state == "READY"

    def submit_nowait(self, entry: PendingRequest) -> None:
        """Queue a validated request (the caller checked `ready`)."""
        if self._batcher is None:
            raise UnavailableError(f"model '{self.config.name}' is not loaded")
        self._batcher.submit_nowait(entry)

    async def load(self) -> None:
        """Build the instances and start serving; on failure record the reason and raise."""
        if self.state in ("READY", "LOADING"):
            return
        self.state, self.reason = "LOADING", ""
        try:
            contexts = place_instances(self.config)
            loop = asyncio.get_running_loop()
            instances = [
                await loop.run_in_executor(None, self._build_instance, ctx) for ctx in contexts
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
        batching = self.config.dynamic_batching
        ordered = bool(batching and batching.preserve_ordering)
        self._pool = InstancePool(self.config.name, instances, self.stats, ordered)
        self._batcher = Batcher(self.config, self._pool)
        self._batcher.start()
        self.state, self.reason = "READY", ""
        log.info(
            "model '%s' version %s READY (%d instance(s))",
            self.config.name,
            self.version,
            len(instances),
        )

    def _build_instance(self, context: InstanceContext) -> Instance:
        backend = PythonBackend(self.definition, context)
        runner = BatchRunner(self.config, backend)
        return Instance(
            context.instance_index, runner, f"{self.config.name}-{context.instance_index}"
        )

    async def unload(self) -> None:
        """Stop taking requests, finish the queued and running ones, release the instances."""
        if self.state != "READY" or self._batcher is None or self._pool is None:
            return
        self.state, self.reason = "UNLOADING", ""
        batcher, pool = self._batcher, self._pool
        batcher.flush()
        while len(batcher.queue) or pool.busy:
            await pool.drain()
            await asyncio.sleep(0)  # let the batcher dispatch what is left
        await batcher.aclose()
        await asyncio.get_running_loop().run_in_executor(None, _close_pool, pool)
        self._batcher = self._pool = None
        self.state, self.reason = "UNAVAILABLE", "unloaded"


def _close_pool(pool: InstancePool) -> None:
    for instance in pool.instances:
        instance.runner.backend.unload()
    pool.close()


def place_instances(config: ModelConfig) -> list[InstanceContext]:
    """One context per instance, with its device; KIND_GPU without CUDA raises.

    Raises:
        RepositoryError: a GPU instance group cannot be placed.
    """
    contexts: list[InstanceContext] = []
    for group in config.instance_group:
        for kind, device in _group_devices(config.name, group):
            for _ in range(group.count):
                contexts.append(
                    InstanceContext(
                        model_name=config.name,
                        model_version=config.version,
                        instance_index=len(contexts),
                        kind=kind,
                        device=device,
                        parameters=config.parameters,
                    )
                )
    return contexts


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
