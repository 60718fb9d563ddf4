"""A model handle: one model version's state machine, and the loaded model it currently serves.

```
UNLOADED -> LOADING -> (WARMING) -> READY -> DRAINING -> UNLOADED
                |                    |  ^
                |     idle timeout,  v  |  cold start: the first request loads and warms it
                |     eviction      IDLE    (its requests wait; one cold start for all)
                |                     |
                +-----> FAILED <------+  (load error; a supervised task died)
```
Transitions run one at a time under the handle's lock, in the order they were asked for, so a
load that arrives during an unload waits for it and then loads (the final state is always the
last one asked for), and a second load waits for the first and finds the model READY. A
*reload* (new code for a READY version) builds the new `LoadedModel` beside the serving one,
swaps them atomically and drains the old one: requests never see a gap. Every loaded model is
released exactly once, whichever path retires it. Each transition is logged.

WARMING: the config's warmup samples run (`warmup.py`) before the model is READY; a model
without warmup samples goes from LOADING straight to READY. A reload warms the new code while
the old keeps serving; when the new code fails, the version stays READY (as in Triton) with the
failure as its reason, until a reload succeeds.

IDLE (scaled to zero): the instances are released and their memory given back, the version
stays listed and ready to clients; the next request cold-starts it (LOADING, WARMING, READY)
while the requests that arrive meanwhile wait for it, at most the cold-start timeout. Under a
memory budget (`budget.py`) every load and cold start first makes room, evicting the least
recently used idle models to IDLE.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from fnserve.backends.base import ModelSpec
from fnserve.config.model_config import ModelConfig
from fnserve.config.server import ModelDefaults
from fnserve.errors import MemoryBudgetError, ModelNotReadyError, RepositoryError, UnavailableError
from fnserve.repository import footprint
from fnserve.repository.budget import MemoryBudget
from fnserve.repository.loaded import LoadedModel, build_model
from fnserve.repository.warmup import run_warmup
from fnserve.scheduling.supervisor import Supervisor
from fnserve.stats import LifecycleStats, ModelStats
from fnserve.types import ModelCaller, ModelState

log = logging.getLogger(__name__)
# The reason a READY version shows while a change to it fails to load.
RELOAD_FAILED = "the last change failed to load, the previous version keeps serving"


class ModelHandle:
    """One name/version: its spec, its state (with the reason) and what it serves.

    Args:
        spec: the model's definition.
        supervisor: runs the background tasks of whatever this handle loads.
        caller: what an ensemble calls its steps through (the runtime).
        budget: the memory budget every load and cold start must fit (None: no budget).
    """

    def __init__(
        self,
        spec: ModelSpec,
        supervisor: Supervisor,
        caller: ModelCaller | None = None,
        budget: MemoryBudget | None = None,
    ) -> None:
        self.spec = spec
        self.name = spec.config.name
        self.version = str(spec.config.version)
        self.state = ModelState.UNLOADED
        self.reason = "unloaded"
        self.loaded: LoadedModel | None = None  # set exactly when READY (or DRAINING)
        self._stats = ModelStats(self.name, self.version)  # the last loaded model's, once gone
        self._supervisor = supervisor
        self._caller = caller
        self._lock = asyncio.Lock()
        self._budget = budget
        self.footprint = footprint.estimate(spec)  # measured again at every load
        self.last_used_ns = time.perf_counter_ns()  # a request came or went (the runtime sets it)
        self.lifecycle = LifecycleStats()
        self._served_config: ModelConfig = spec.config  # what metadata shows while IDLE
        self._waking: asyncio.Future[LoadedModel] | None = None  # the cold start under way
        self._building = False

    def __repr__(self) -> str:
        return f"<ModelHandle {self.name!r} v{self.version} {self.state.value}>"

    @property
    def ready(self) -> bool:
        """Whether it serves requests: READY, or IDLE / cold-starting (they wait for it)."""
        return (
            self.state is ModelState.READY
            or self.state is ModelState.IDLE
            or self._waking is not None
        )

    @property
    def config(self) -> ModelConfig:
        """The config it serves (or served last, while scaled to zero)."""
        return self.loaded.config if self.loaded is not None else self._served_config

    @property
    def holds_memory(self) -> bool:
        """Whether instances of it exist (or are being built) in this process."""
        return (self.loaded is not None or self._building) and not self.spec.config.ensemble

    def idle_timeout_s(self, defaults: ModelDefaults) -> float:
        """How long it may go unused before it scales to zero (0: never)."""
        config = self.spec.config
        if config.ensemble or (config.min_instances or 0) > 0:
            return 0.0
        own = config.idle_timeout_s
        return defaults.idle_timeout_s if own is None else own

    def evictable(self) -> str:
        """ "" when it may be scaled to zero now, else why not."""
        loaded = self.loaded
        if loaded is None or self.spec.config.ensemble:
            return "holds no instances"
        if (self.spec.config.min_instances or 0) > 0:
            return f"min_instances={self.spec.config.min_instances}"
        if self._lock.locked():
            return "loading or unloading"
        if _in_use(loaded):
            return "in use"
        return ""

    @property
    def stats(self) -> ModelStats:
        """The statistics of what this handle serves (or served last)."""
        return self.loaded.stats if self.loaded is not None else self._stats

    def _enter(self, state: ModelState, reason: str = "") -> None:
        if state is not self.state or reason != self.reason:
            log_at = logging.WARNING if state is ModelState.FAILED else logging.INFO
            log.log(
                log_at,
                "model '%s' version %s: %s -> %s%s",
                self.name,
                self.version,
                self.state.value,
                state.value,
                f" ({reason})" if reason else "",
            )
        self.state, self.reason = state, reason

    # -- transitions ---------------------------------------------------------------------

    async def load(
        self,
        defaults: ModelDefaults,
        spec: ModelSpec | None = None,
        check: Callable[[ModelSpec], None] | None = None,
    ) -> None:
        """Serve `spec` (default: the current one). Nothing to do when it is already served.

        A new spec for a READY version is a reload: built and warmed beside the serving one,
        then swapped in; if it fails to build, the old one keeps serving. `check` runs first
        (an ensemble's checks against its steps): what it raises fails the load the same way.

        Raises:
            RepositoryError: the model (or its new spec) failed to load; the reason is kept.
        """
        async with self._lock:
            if spec is not None and spec is not self.spec:
                if self.loaded is not None:
                    await self._reload(defaults, spec, check)
                    return
                self.spec = spec
            if self.state is ModelState.READY:
                return
            self._enter(ModelState.LOADING)
            try:
                if check is not None:
                    check(self.spec)
                loaded = await self._admit(self.spec, defaults, announce=True)
            except asyncio.CancelledError:
                self._enter(ModelState.UNLOADED, "the load was cancelled")
                raise
            except MemoryBudgetError as exc:
                self._enter(ModelState.UNLOADED, exc.message)
                raise
            except Exception as exc:
                self._enter(ModelState.FAILED, _load_reason(exc))
                raise _load_error(self, exc) from exc
            self._serve(loaded)
            self._enter(ModelState.READY)

    def _serve(self, loaded: LoadedModel) -> None:
        self.loaded, self._served_config = loaded, loaded.config
        self.last_used_ns = time.perf_counter_ns()  # just loaded: not the least recently used

    async def _admit(self, spec: ModelSpec, defaults: ModelDefaults, announce: bool) -> LoadedModel:
        """`_build` within the memory budget: room is made first (evicting idle models), the
        footprint is measured, and a model that turns out not to fit is released again.

        Raises:
            MemoryBudgetError: it does not fit even with every evictable model scaled to zero.
        """
        budget = self._budget if self._budget is not None and self._budget.enabled else None
        evicted: list[str] = []
        if budget is not None:
            await budget.make_room(self, self.footprint, evicted)
        self._building = True
        try:
            before = footprint.current()
            loaded = await self._build(spec, defaults, announce)
            self.footprint = footprint.delta(before, footprint.current())
        finally:
            self._building = False
        if budget is not None:
            try:
                await budget.make_room(self, self.footprint, evicted)  # as measured
            except MemoryBudgetError:
                await self._retire(loaded, defaults.drain_timeout_s, "did not fit the budget")
                del loaded  # the last reference: give_back() can collect it
                await footprint.give_back()
                raise
        if evicted:
            log.info("model '%s' version %s: made room by scaling %s to zero", self.name,
                     self.version, ", ".join(evicted))  # fmt: skip
        return loaded

    async def _build(self, spec: ModelSpec, defaults: ModelDefaults, announce: bool) -> LoadedModel:
        """Build, start and warm a model (timed: the statistics keep both durations); what was
        built is released again if warmup fails. `announce`: enter WARMING while it warms."""
        start_ns = time.perf_counter_ns()
        loaded = await build_model(spec, defaults, self._supervisor, self._crashed, self._caller)
        loaded.start()
        warm_ns = time.perf_counter_ns()
        if loaded.config.warmup:
            if announce:
                self._enter(ModelState.WARMING)
            try:
                await run_warmup(loaded)
            except BaseException:
                await self._retire(loaded, defaults.drain_timeout_s, "failed its warmup")
                raise
        done_ns = time.perf_counter_ns()
        loaded.stats.load_ns, loaded.stats.warmup_ns = warm_ns - start_ns, done_ns - warm_ns
        loaded.stats.reset_counters()  # warmup requests are not clients' requests
        log.info(
            "model '%s' version %s built in %.3f s, warmed in %.3f s",
            self.name,
            self.version,
            (warm_ns - start_ns) / 1e9,
            (done_ns - warm_ns) / 1e9,
        )
        return loaded

    async def _reload(
        self, defaults: ModelDefaults, spec: ModelSpec, check: Callable[[ModelSpec], None] | None
    ) -> None:
        old = self.loaded
        assert old is not None
        try:
            if check is not None:
                check(spec)
            new = await self._admit(spec, defaults, announce=False)  # the old one serves
        except Exception as exc:
            reason = _load_reason(exc)
            log.error(
                "model '%s' version %s: the new code failed to load, the old keeps serving: %s",
                self.name,
                self.version,
                reason,
            )
            self.reason = f"{RELOAD_FAILED}: {reason}"  # still READY, as in Triton
            raise _load_error(self, exc) from exc
        self.spec = spec
        self._serve(new)  # the swap: new requests go to `new` from here on
        self.reason = ""
        self.lifecycle.reloads += 1
        log.info(
            "model '%s' version %s: new code serving, draining the old", self.name, self.version
        )
        await self._retire(old, defaults.drain_timeout_s, "was reloaded")

    async def unload(self, drain_timeout_s: float | None = None) -> None:
        """Stop taking requests, let queued and running ones finish, release the instances.

        Requests still queued or running after `drain_timeout_s` (default: the server's drain
        deadline) fail with UnavailableError; instances stuck in them are abandoned.
        """
        async with self._lock:
            loaded = self.loaded
            if loaded is None:
                if self.state is not ModelState.UNLOADED:
                    self._enter(ModelState.UNLOADED, "unloaded")
                return
            self._enter(ModelState.DRAINING)
            if drain_timeout_s is None:
                drain_timeout_s = loaded.defaults.drain_timeout_s
            await self._retire(loaded, drain_timeout_s, "was unloaded")
            if self.loaded is loaded:
                self.loaded = None
            self._stats = loaded.stats
            del loaded  # the last reference: give_back() can collect it
            await footprint.give_back()
            self._enter(ModelState.UNLOADED, "unloaded")

    # -- scale to zero and cold start -------------------------------------------------------

    async def scale_to_zero(self, why: str, evicted: bool = True) -> bool:
        """Release the instances and give their memory back; the version stays listed, ready,
        and the next request cold-starts it. False (nothing done) when it is in use by then.
        """
        if self.evictable():
            return False
        async with self._lock:
            loaded = self.loaded
            if loaded is None or _in_use(loaded):  # requests came while the lock was awaited
                return False
            self.loaded, self._stats = None, loaded.stats
            self._enter(ModelState.IDLE, why)
            await self._retire(loaded, loaded.defaults.drain_timeout_s, "was scaled to zero")
            del loaded  # the last reference: give_back() can collect it
            await footprint.give_back()
            if evicted:
                self.lifecycle.evictions += 1
            else:
                self.lifecycle.idle_unloads += 1
            return True

    async def wake(self, defaults: ModelDefaults) -> LoadedModel:
        """What serves this version, cold-starting it first when it is scaled to zero; every
        request that arrives meanwhile waits for the same cold start.

        Raises:
            UnavailableError: the cold start took longer than the cold-start timeout, or failed.
            MemoryBudgetError: it does not fit the memory budget now.
        """
        loaded = self.loaded
        if loaded is not None:
            return loaded
        if self._waking is None:
            self._waking = asyncio.ensure_future(self._cold_start(defaults))
            self._waking.add_done_callback(self._woken)
        try:
            return await asyncio.wait_for(
                asyncio.shield(self._waking), defaults.cold_start_timeout_s
            )
        except TimeoutError:
            raise UnavailableError(
                f"model '{self.name}' version {self.version} is cold-starting and was not ready "
                f"within the cold-start timeout of {defaults.cold_start_timeout_s:g} s"
            ) from None

    def _woken(self, future: asyncio.Future[LoadedModel]) -> None:
        self._waking = None
        if not future.cancelled():
            future.exception()  # retrieved here: every waiter may have timed out

    async def _cold_start(self, defaults: ModelDefaults) -> LoadedModel:
        async with self._lock:
            if self.loaded is not None:
                return self.loaded
            if self.state is not ModelState.IDLE:  # unloaded or failed meanwhile
                raise ModelNotReadyError(
                    f"model '{self.name}' version {self.version} is not ready "
                    f"({self.state.value}: {self.reason})"
                )
            start_ns = time.perf_counter_ns()
            self._enter(ModelState.LOADING, "cold start")
            try:
                loaded = await self._admit(self.spec, defaults, announce=True)
            except MemoryBudgetError as exc:
                self._enter(ModelState.IDLE, f"cold start refused: {exc.message}")
                raise
            except Exception as exc:
                self._enter(ModelState.FAILED, f"cold start failed: {_load_reason(exc)}")
                raise UnavailableError(
                    f"model '{self.name}' version {self.version} failed to cold-start: "
                    f"{_load_reason(exc)}"
                ) from exc
            loaded.stats.carry_from(self._stats)
            self._serve(loaded)
            self.lifecycle.record_cold_start(time.perf_counter_ns() - start_ns)
            self._enter(ModelState.READY)
            log.info(
                "model '%s' version %s: cold start took %.3f s",
                self.name,
                self.version,
                (time.perf_counter_ns() - start_ns) / 1e9,
            )
            return loaded

    async def _retire(self, loaded: LoadedModel, drain_timeout_s: float, why: str) -> None:
        if not await loaded.drain(drain_timeout_s):
            loaded.abort(
                UnavailableError(
                    f"model '{self.name}' version {self.version} {why} before the request finished"
                )
            )
        await loaded.release(drain_timeout_s)

    def abort(self, error: UnavailableError) -> None:
        """Fail every queued and running request with `error` now (past a drain deadline)."""
        if self.loaded is not None:
            self.loaded.abort(error)

    def _crashed(self, loaded: LoadedModel, error: BaseException) -> None:
        """A background task of `loaded` died: fail the model and its queued requests now;
        batches already running finish (their instances are sound), then it is released."""
        reason = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        failure = UnavailableError(
            f"model '{self.name}' version {self.version} failed: a background task died ({reason})"
        )
        loaded.scheduler.fail_queued(failure)
        if loaded is not self.loaded:
            return  # an old model being drained: it just ends sooner
        self.loaded = None
        self._stats = loaded.stats
        self._enter(ModelState.FAILED, f"a background task died ({reason}); load it again")
        # Released under the lock: a load asked for meanwhile waits for it.
        self._supervisor.spawn(self._release_failed(loaded), f"{self.name}-release")

    async def _release_failed(self, loaded: LoadedModel) -> None:
        async with self._lock:
            await self._retire(loaded, loaded.defaults.drain_timeout_s, "failed")


def _in_use(loaded: LoadedModel) -> bool:
    return bool(loaded.stats.pending or loaded.scheduler.queued() or loaded.pool.busy)


def _load_reason(exc: BaseException) -> str:
    if isinstance(exc, RepositoryError):
        return exc.message
    return f"{type(exc).__name__}: {exc}"


def _load_error(handle: ModelHandle, exc: BaseException) -> RepositoryError:
    return RepositoryError(
        f"failed to load '{handle.name}' version {handle.version}: {_load_reason(exc)}"
    )
