"""One built model version: its instances, scheduler and statistics, immutable once built.

`build_model` places the instances (CPU, or the GPUs of a KIND_GPU group), has the backend
factory chosen from the spec build one backend per instance off the event loop, and wires the
instance pool and the scheduler the config asks for. A `LoadedModel` never changes after that:
a reload builds a second one beside it and the model handle swaps them (`handle.py`).

Its background work (the scheduler loop, batch executions, instance rebuilds) runs under the
runtime's supervisor; when one of those tasks dies, `on_crash(loaded, error)` tells the handle.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import logging
from collections.abc import Callable

from fnserve.backends.base import Backend, BackendFactory, ModelSpec
from fnserve.backends.devices import cuda_device_count
from fnserve.backends.registry import factory_for
from fnserve.calls import ModelClient
from fnserve.config.model_config import InstanceGroup, Isolation, ModelConfig
from fnserve.config.server import ModelDefaults
from fnserve.errors import RepositoryError, UnavailableError
from fnserve.model import InstanceContext
from fnserve.scheduling.autoscale import InstanceScaler, ScalePolicy
from fnserve.scheduling.direct import DirectLane
from fnserve.scheduling.ensemble import EnsembleScheduler
from fnserve.scheduling.inline import InlinePolicy, inline_limit_ns
from fnserve.scheduling.instance import Instance, ThreadInstance
from fnserve.scheduling.pool import InstancePool
from fnserve.scheduling.runner import BatchRunner
from fnserve.scheduling.scheduler import QueueScheduler, Scheduler, scheduler_for
from fnserve.scheduling.supervisor import Supervisor
from fnserve.scheduling.threads import run_in_daemon_thread
from fnserve.stats import ModelStats
from fnserve.types import ModelCaller

log = logging.getLogger(__name__)
Placement = tuple[InstanceContext, Isolation]


class InstanceMaker:
    """The pool's instance factory: builds instance `index` of one model (blocking user code)."""

    def __init__(
        self,
        factory: BackendFactory,
        placements: list[Placement],
        debug_errors: bool,
        client: ModelClient | None = None,
        inline_ns: int = 0,
    ) -> None:
        self.factory = factory
        self.placements = placements
        self._debug_errors = debug_errors
        self._client = client  # lets the model's code call other models
        # One policy for all the model's CPU instances: they run the same code.
        self._inline = InlinePolicy(inline_ns) if inline_ns > 0 else None

    def __len__(self) -> int:
        return len(self.placements)

    @property
    def inline(self) -> bool:
        """Whether the model's batches may run inline (see scheduling/inline.py)."""
        return self._inline is not None

    def placement(self, index: int) -> Placement:
        """Where instance `index` goes; instances added past the configured ones (`max_instances`)
        take the groups' places in turn."""
        context, isolation = self.placements[index % len(self.placements)]
        return dataclasses.replace(context, instance_index=index), isolation

    def __call__(self, index: int) -> Instance:
        context, isolation = self.placement(index)
        config = self.factory.spec.config
        if isolation == "process":
            return _process_instance(self.factory, context, self._debug_errors)
        runner = BatchRunner(config, self.factory.create(context), self._debug_errors)
        runner.client = self._client
        inline = self._inline if context.kind == "KIND_CPU" else None
        return ThreadInstance(index, runner, f"{config.name}-{index}", inline)


class LoadedModel:
    """A model version ready to serve: config, instance pool, scheduler, statistics.

    Args:
        spec: what was built.
        instances: its instances, built by `maker`.
        maker: rebuilds an instance that broke.
        defaults: server-wide settings for what the config leaves unset.
        supervisor: runs its background tasks.
        on_crash: called with (this model, error) when one of those tasks dies.
    """

    def __init__(
        self,
        spec: ModelSpec,
        instances: list[Instance],
        maker: InstanceMaker,
        defaults: ModelDefaults,
        supervisor: Supervisor,
        on_crash: Callable[[LoadedModel, BaseException], None],
        caller: ModelCaller | None = None,
    ) -> None:
        self.spec = spec
        self.config: ModelConfig = spec.config
        self.version = str(self.config.version)
        self.stats = ModelStats(self.config.name, self.version)
        self.defaults = defaults
        batching = self.config.dynamic_batching
        timeout_s = self.config.execution_timeout_s
        if timeout_s is None:
            timeout_s = defaults.execution_timeout_s
        self._supervisor = supervisor
        self._on_crash = on_crash
        self.pool = InstancePool(
            self.config.name,
            instances,
            self.stats,
            bool(batching and batching.preserve_ordering),
            maker,
            timeout_s,
            supervisor,
            self._crashed,
        )
        self.scheduler: Scheduler
        # Requests that may skip the scheduler (an idle model that runs inline), if any.
        self.direct: DirectLane | None = None
        self.ensemble: EnsembleScheduler | None = None  # the scheduler, for an ensemble
        if self.config.ensemble:  # no instances: the steps' models do the work
            if caller is None:
                raise RepositoryError(f"ensemble '{self.config.name}' needs a runtime to call")
            self.scheduler = self.ensemble = EnsembleScheduler(
                self.config, caller, defaults.max_queue_size, self.stats
            )
        else:
            scheduler = scheduler_for(self.config, self.pool, defaults.max_queue_size, maker.inline)
            if maker.inline and isinstance(scheduler, QueueScheduler) and scheduler.at_once:
                self.direct = DirectLane(self.config, scheduler, self.pool)
            self.scheduler = scheduler
        self._task: asyncio.Task[None] | None = None
        self._scaler_task: asyncio.Task[None] | None = None
        self._scaler = None
        if self.config.max_instances is not None:
            self._scaler = InstanceScaler(
                self.config.name,
                ScalePolicy.of(self.config),
                self.pool,
                maker,
                lambda: (self.stats.queue.count, self.stats.queue.ns),
            )
        self._released = False

    def _crashed(self, error: BaseException) -> None:
        self._on_crash(self, error)

    def start(self) -> None:
        """Start dispatching (the scheduler's loop, supervised), and the instance scaler when
        the config has `max_instances`."""
        name = f"{self.config.name}-v{self.version}"
        self._task = self._supervisor.spawn(self.scheduler.run(), f"{name}-scheduler",
                                            self._crashed)  # fmt: skip
        if self._scaler is not None:
            self._scaler_task = self._supervisor.spawn(self._scaler.run(), f"{name}-scaler",
                                                       self._crashed)  # fmt: skip

    @property
    def scheduler_task(self) -> asyncio.Task[None] | None:
        return self._task

    async def drain(self, timeout_s: float) -> bool:
        """Let queued and running requests finish; False if `timeout_s` passed first."""
        scheduler, pool = self.scheduler, self.pool
        scheduler.flush()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while scheduler.queued() or pool.busy:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            if scheduler.queued() and (self._task is None or self._task.done()):
                return False  # nothing dispatches the queue any more
            await pool.wait_progress(remaining)
        return True

    def abort(self, error: UnavailableError) -> None:
        """Fail every queued and running request with `error` now; stuck instances are
        abandoned and nothing is rebuilt."""
        waiting, running = self.scheduler.queued(), self.pool.busy
        if waiting or running:
            log.warning(
                "model '%s' version %s: failing %d queued and %d running batch(es): %s",
                self.config.name,
                self.version,
                waiting,
                running,
                error,
            )
        self.scheduler.fail_queued(error)
        self.pool.abort(error)

    async def release(self, timeout_s: float) -> None:
        """Stop the scheduler and release the instances (each backend unloads once, however
        often this is called). A release that hangs is left behind after `timeout_s`."""
        if self._released:
            return
        self._released = True
        self.abort(UnavailableError(f"model '{self.config.name}' is unloading"))
        if self._scaler_task is not None:
            await self._supervisor.stop_and_wait(self._scaler_task)
        if self._task is not None:
            await self._supervisor.stop_and_wait(self._task)
        try:
            await asyncio.wait_for(run_in_daemon_thread(self.pool.close), max(timeout_s, 1.0))
        except TimeoutError:
            log.warning(
                "model '%s': releasing its instances took over %.1f s; left",
                self.config.name,
                timeout_s,
            )
        except Exception:
            log.exception("model '%s': releasing its instances failed", self.config.name)


async def build_model(
    spec: ModelSpec,
    defaults: ModelDefaults,
    supervisor: Supervisor,
    on_crash: Callable[[LoadedModel, BaseException], None],
    caller: ModelCaller | None = None,
) -> LoadedModel:
    """Build every instance of `spec` (off the event loop) and wire its pool and scheduler.

    Instances already built when a later one fails are released again.

    Raises:
        RepositoryError: no backend for it, an instance cannot be placed or fails to build.
    """
    config = spec.config
    if config.ensemble:
        maker = InstanceMaker(_NoBackend(spec), [], defaults.debug_errors)
        return LoadedModel(spec, [], maker, defaults, supervisor, on_crash, caller)
    client = None if caller is None else ModelClient(caller, asyncio.get_running_loop())
    timeout_s = config.execution_timeout_s
    if timeout_s is None:
        timeout_s = defaults.execution_timeout_s
    inline_ns = inline_limit_ns(config, defaults.inline_us, timeout_s)
    maker = InstanceMaker(
        factory_for(spec), placements(config), defaults.debug_errors, client, inline_ns
    )
    instances: list[Instance] = []
    try:
        for index in range(len(maker)):
            instances.append(await run_in_daemon_thread(maker, index))
    except BaseException:
        for instance in instances:
            await run_in_daemon_thread(instance.close)
        raise
    return LoadedModel(spec, instances, maker, defaults, supervisor, on_crash, caller)


class _NoBackend:
    """The backend factory of an ensemble, which has no instances to build."""

    name = "ensemble"
    process_isolation = False

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec

    def create(self, context: InstanceContext) -> Backend:
        raise RepositoryError(f"ensemble '{self.spec.config.name}' has no instances")


def _process_instance(
    factory: BackendFactory, context: InstanceContext, debug_errors: bool
) -> Instance:
    config = factory.spec.config
    if not factory.process_isolation:
        raise RepositoryError(
            f"model '{config.name}': backend '{factory.name}' does not run in worker processes; "
            f"use isolation 'thread'"
        )
    try:  # lazy: only models with process isolation pay for the worker machinery
        process = importlib.import_module("fnserve.scheduling.process")
    except ImportError as exc:
        raise RepositoryError(
            f"model '{config.name}': instance isolation 'process' is not available in this "
            f"build ({exc})"
        ) from exc
    instance: Instance = process.ProcessInstance(factory.spec, context, config, debug_errors)
    return instance


def placements(config: ModelConfig) -> list[Placement]:
    """Each instance's context (with its device) and isolation, in instance-index order.

    Raises:
        RepositoryError: a GPU instance group cannot be placed.
    """
    result: list[Placement] = []
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


def placed_groups(config: ModelConfig) -> tuple[InstanceGroup, ...]:
    """The instance groups as their instances are placed, as Triton's config API reports them:
    KIND_AUTO as the kind it resolved to, and a GPU group with the GPUs it runs on."""
    placed = []
    for group in config.instance_group:
        try:
            devices = _group_devices(config.name, group)
        except RepositoryError:  # not placeable (then not loaded either): as configured
            placed.append(group)
            continue
        kind = devices[0][0]
        gpus = (
            [int(device.partition(":")[2]) for _, device in devices] if kind == "KIND_GPU" else []
        )
        placed.append(dataclasses.replace(group, kind=kind, gpus=gpus))  # type: ignore[arg-type]
    return tuple(placed)


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
