"""Scale to zero: the loop that releases models nobody used for their idle timeout.

A model version with an idle timeout (its own `idle_timeout_s`, else the server's
`--idle-timeout`) whose last request came and went longer ago than that, with nothing queued
or running, is scaled to zero (`ModelHandle.scale_to_zero`): its instances are released and
their memory given back, and the next request cold-starts it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from fnserve.config.server import ModelDefaults
from fnserve.repository.handle import ModelHandle

log = logging.getLogger(__name__)
_MIN_TICK_S, _MAX_TICK_S = 0.05, 1.0


async def reap_idle(
    handles: Callable[[], Iterable[ModelHandle]], defaults: Callable[[], ModelDefaults]
) -> None:
    """Scale idle models to zero until cancelled; checks a few times per shortest timeout."""
    while True:
        timeouts = [(h, h.idle_timeout_s(defaults())) for h in handles()]
        timeouts = [(h, t) for h, t in timeouts if t > 0]
        shortest = min((t for _, t in timeouts), default=_MAX_TICK_S)
        await asyncio.sleep(min(max(shortest / 4, _MIN_TICK_S), _MAX_TICK_S))
        now_ns = time.perf_counter_ns()
        for handle, timeout_s in timeouts:
            idle_s = (now_ns - handle.last_used_ns) / 1e9
            if handle.loaded is not None and idle_s >= timeout_s and not handle.evictable():
                await handle.scale_to_zero(f"scaled to zero after {timeout_s:g} s idle", False)
