"""The scheduler seam: what a model handle needs from whatever decides which request runs when.

A scheduler owns the model's queue and feeds its instance pool. `run()` is its long-lived loop,
started by the model's owner under the runtime's supervisor; if it dies the model fails (see
`supervisor.py`). Today: `DirectScheduler` (every request alone, in arrival order: Triton's
default scheduler) and `DynamicBatcher` (`batcher.py`); ensemble and sequence schedulers fit the
same protocol.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, Protocol

from fnserve.config.model_config import ModelConfig
from fnserve.scheduling.instance import ThreadInstance
from fnserve.scheduling.pool import InstancePool
from fnserve.scheduling.queue import RequestQueue
from fnserve.scheduling.request import PendingRequest
from fnserve.types import Array


class Scheduler(Protocol):
    """Queues validated requests and dispatches them to the instance pool."""

    def execute(self, entry: PendingRequest) -> Awaitable[dict[str, Array]]:
        """Run a request; await its outputs. Raises QueueFullError (at once) when the queue
        policy says so, and the request's own error."""
        ...

    def queued(self) -> int:
        """Requests waiting (not yet dispatched)."""
        ...

    def flush(self) -> None:
        """From now on dispatch at once, without waiting for batches to fill (draining)."""
        ...

    def fail_queued(self, error: Exception) -> None:
        """Fail every waiting request with `error` now."""
        ...

    async def run(self) -> None:
        """Dispatch until cancelled."""
        ...


class QueueScheduler:
    """What both schedulers share: the request queue and the wake-up when it changes.

    A request that finds the queue empty and an idle instance that runs inline (a model whose
    batches take microseconds, see inline.py) is launched at once, without the queue and the
    scheduler's loop: when nothing waits, no batch could take it along, and the two turns of
    the event loop the dispatch takes would cost more than the model itself. Only for a model
    that may run inline (`inline`, known at load time) and that the scheduler would dispatch at
    once anyway (`dispatch_at_once`: no batching delay).
    """

    def __init__(
        self,
        config: ModelConfig,
        pool: InstancePool,
        max_queue_size: int = 0,
        inline: bool = False,
        dispatch_at_once: bool = True,
    ) -> None:
        self._pool = pool
        self._wakeup = asyncio.Event()
        self.queue = RequestQueue(
            config.name, config.dynamic_batching, self._wakeup.set, max_queue_size
        )
        self._flushing = False
        self._at_once = inline and dispatch_at_once
        # The task whose request ran at once in this turn of the loop, if any (see below).
        self._burst: asyncio.Task[Any] | None = None

    def execute(self, entry: PendingRequest) -> asyncio.Future[dict[str, Array]]:
        self.submit_nowait(entry)
        return entry.future

    def submit_nowait(self, entry: PendingRequest) -> None:
        """Queue a request (or run it at once, see the class doc)."""
        instance = self.take_inline_turn()
        if instance is None:
            self.queue.put_nowait(entry)
        else:
            self._pool.run_now(instance, [entry])

    def take_inline_turn(self) -> ThreadInstance | None:
        """An idle instance to run one request inline at once, if the class doc's conditions
        hold now; the caller runs the request on it before it lets the loop turn."""
        if not self._at_once or len(self.queue):
            return None
        task = asyncio.current_task()
        if self._burst is not None and self._burst is not task:
            return None
        instance = self._pool.take_inline()
        if instance is None:
            return None
        # An inline batch is answered before the loop turns, so the instance is idle again for
        # the next request: requests of other tasks arriving in the same turn of the loop (a
        # burst, e.g. the rows of a batch another step just finished) queue instead and batch
        # together. The same task's next request is no burst: it waited for this answer.
        if self._burst is None:
            self._burst = task
            asyncio.get_running_loop().call_soon(self._end_burst)
        return instance

    @property
    def at_once(self) -> bool:
        """Whether a request may run at once (see the class doc), when the model is idle."""
        return self._at_once

    def _end_burst(self) -> None:
        self._burst = None

    def queued(self) -> int:
        return len(self.queue)

    def flush(self) -> None:
        self._flushing = True
        self._wakeup.set()

    def fail_queued(self, error: Exception) -> None:
        self.queue.fail_all(error)

    async def _until_queued(self) -> None:
        """Sleep until a request arrives."""
        self._wakeup.clear()
        await self._wakeup.wait()


class DirectScheduler(QueueScheduler):
    """Each request runs alone, as soon as an instance is free (no dynamic batching)."""

    async def run(self) -> None:
        queue, pool = self.queue, self._pool
        while True:
            if not len(queue):
                await self._until_queued()
                continue
            instance = await pool.acquire()
            entry = queue.pop_next()  # taken after the wait: skips requests cancelled meanwhile
            if entry is None:
                pool.release(instance)
                continue
            pool.launch(instance, [entry])


def scheduler_for(
    config: ModelConfig, pool: InstancePool, max_queue_size: int = 0, inline: bool = False
) -> Scheduler:
    """The scheduler a model's config asks for (`inline`: its batches may run inline)."""
    if config.dynamic_batching is not None:
        from fnserve.scheduling.batcher import DynamicBatcher  # it builds on this module

        return DynamicBatcher(config, pool, max_queue_size, inline)
    return DirectScheduler(config, pool, max_queue_size, inline)
