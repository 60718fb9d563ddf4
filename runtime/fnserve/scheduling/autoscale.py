"""Instances that follow the load: one more while requests wait, one fewer when not needed.

A model with `max_instances` gets an `InstanceScaler`. Every tick it reads two things: the
mean time the requests dispatched since the last tick waited in the queue, and the most
instances that were busy at once. One instance is added (on the instance group's devices,
built off the event loop) while that wait stays above `scale_up_queue_ms`; one idle instance
is released after `scale_down_idle_s` during which fewer instances than exist were ever busy;
always between max(min_instances, 1) and max_instances. The decision is `decide`, a pure
function.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
from collections.abc import Callable
from typing import NamedTuple

from fnserve.config.model_config import ModelConfig
from fnserve.errors import ModelConfigError
from fnserve.scheduling.instance import Instance
from fnserve.scheduling.pool import InstancePool
from fnserve.scheduling.threads import run_in_daemon_thread

log = logging.getLogger(__name__)
TICK_S = 0.25
_RETRY_AFTER_FAILURE_S = 5.0


class ScalePolicy(NamedTuple):
    """Bounds and thresholds of one model's instance count."""

    low: int
    high: int
    up_queue_ms: float = 5.0
    down_idle_s: float = 30.0

    @classmethod
    def of(cls, config: ModelConfig) -> ScalePolicy:
        """From `min_instances`, `max_instances` and the parameters `scale_up_queue_ms`,
        `scale_down_idle_s`.

        Raises:
            ModelConfigError: a parameter is not a number >= 0.
        """
        assert config.max_instances is not None
        values = {}
        for key, default in (("scale_up_queue_ms", 5.0), ("scale_down_idle_s", 30.0)):
            raw = config.parameters.get(key, default)
            try:
                values[key] = float(raw)
            except ValueError:
                values[key] = -1.0
            if not values[key] >= 0:
                raise ModelConfigError(
                    f"model '{config.name}': parameter {key} must be a number >= 0, got {raw!r}"
                )
        low = max(config.min_instances or 0, 1)
        return cls(low, config.max_instances, values["scale_up_queue_ms"],
                   values["scale_down_idle_s"])  # fmt: skip


def decide(policy: ScalePolicy, instances: int, queue_ms: float, peak_busy: int | None) -> int:
    """+1 to add an instance, -1 to release one, 0 to stay.

    Args:
        instances: how many exist now.
        queue_ms: mean queue time of the requests dispatched in the last tick.
        peak_busy: most instances busy at once over the last `down_idle_s` (None: that long
            has not passed since the last change).
    """
    if instances < policy.low:
        return 1
    if instances < policy.high and queue_ms > policy.up_queue_ms:
        return 1
    if instances > policy.low and peak_busy is not None and peak_busy < instances:
        return -1
    return 0


class InstanceScaler:
    """Drives one model's instance count by `decide` (run it as a supervised task).

    Args:
        name: the model's name, for the log.
        policy: its bounds and thresholds.
        pool: its instance pool.
        build: builds the instance for an index (blocking; run off the loop).
        queue_time: the model's cumulative (requests, queue ns) so far.
    """

    def __init__(
        self,
        name: str,
        policy: ScalePolicy,
        pool: InstancePool,
        build: Callable[[int], Instance],
        queue_time: Callable[[], tuple[int, int]],
    ) -> None:
        self.name = name
        self.policy = policy
        self._pool = pool
        self._build = build
        self._queue_time = queue_time

    async def run(self) -> None:
        window: collections.deque[int] = collections.deque(
            maxlen=max(math.ceil(self.policy.down_idle_s / TICK_S), 1)
        )
        last = self._queue_time()
        while True:
            await asyncio.sleep(TICK_S)
            now = self._queue_time()
            dispatched, waited_ns = now[0] - last[0], now[1] - last[1]
            last = now
            queue_ms = waited_ns / dispatched / 1e6 if dispatched else 0.0
            window.append(self._pool.take_peak_busy())
            peak = max(window) if len(window) == window.maxlen else None
            step = decide(self.policy, len(self._pool.instances), queue_ms, peak)
            if step > 0:
                await self._add(queue_ms)
                window.clear()
            elif step < 0 and await self._remove():
                window.clear()

    async def _add(self, queue_ms: float) -> None:
        used = {i.index for i in self._pool.instances}
        index = next(i for i in range(len(used) + 1) if i not in used)
        try:
            instance = await run_in_daemon_thread(self._build, index)
        except Exception:
            log.exception("model '%s': adding instance %d failed", self.name, index)
            await asyncio.sleep(_RETRY_AFTER_FAILURE_S)
            return
        self._pool.add(instance)
        log.info("model '%s': requests waited %.1f ms in the queue; instance %d added (%d now)",
                 self.name, queue_ms, index, len(self._pool.instances))  # fmt: skip

    async def _remove(self) -> bool:
        instance = self._pool.take_idle()
        if instance is None:
            return False
        await run_in_daemon_thread(instance.close)
        log.info("model '%s': instance %d idle for %g s, released (%d now)", self.name,
                 instance.index, self.policy.down_idle_s, len(self._pool.instances))  # fmt: skip
        return True
