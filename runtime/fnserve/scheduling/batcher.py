"""Dynamic batching: a pure policy that picks the next batch, and the async loop that drives it.

The policy (`BatchPolicy.next_batch`) sees the queue and the clock and answers "run these now"
or "wait until t"; it never sleeps, so it is tested without timers. `DynamicBatcher` is the
thin loop around it (a `Scheduler`): it waits for a free instance, asks the policy, and hands
batches to the pool.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import NamedTuple

from fnserve.config.model_config import ModelConfig
from fnserve.scheduling.oom import BatchCap
from fnserve.scheduling.pool import InstancePool
from fnserve.scheduling.request import PendingRequest
from fnserve.scheduling.scheduler import QueueScheduler

_FAR_FUTURE_NS = 1 << 62


class Decision(NamedTuple):
    """What the policy wants: a batch to run now, or the time (ns) to look again."""

    batch: list[PendingRequest]
    wait_until_ns: int | None = None


class BatchPolicy:
    """Triton's dynamic-batching rules for one model.

    - a batch never exceeds `max_batch_size` rows, and only merges requests whose non-batch
      dimensions match (it stops at the first request that does not fit, keeping order);
    - it runs at once when full, when it reaches a preferred size, or when the oldest request
      has waited `max_queue_delay_microseconds`; otherwise it waits for more requests;
    - when it could form several preferred sizes it takes the largest, even if the queue holds
      enough for a bigger, non-preferred batch (Triton's rule);
    - without dynamic batching every request runs alone;
    - `cap_rows`, when given, lowers `max_batch_size` (after an out-of-memory); a single
      request larger than the cap still runs, alone.
    """

    def __init__(self, config: ModelConfig) -> None:
        batching = config.dynamic_batching
        self.max_rows = max(config.max_batch_size, 1)
        self.max_requests = 1 if batching is None else self.max_rows
        self.preferred = frozenset(batching.preferred_batch_size if batching else ())
        self.max_delay_ns = batching.max_queue_delay_microseconds * 1000 if batching else 0

    def next_batch(
        self, candidates: Iterable[PendingRequest], now_ns: int, cap_rows: int | None = None
    ) -> Decision:
        """Choose from `candidates` (live requests in priority order)."""
        max_rows = self.max_rows if cap_rows is None else min(cap_rows, self.max_rows)
        batch: list[PendingRequest] = []
        rows = 0
        best_preferred = 0  # length of the longest prefix whose rows are a preferred size
        for entry in candidates:
            if batch and (
                entry.shape_key != batch[0].shape_key
                or rows + entry.rows > max_rows
                or len(batch) >= self.max_requests
            ):
                # blocked: more waiting cannot grow this batch
                return Decision(batch[:best_preferred] or batch)
            batch.append(entry)
            rows += entry.rows
            if rows in self.preferred:
                best_preferred = len(batch)
            if rows >= max_rows or len(batch) >= self.max_requests:
                # Full. Triton sends the largest preferred size it can form, when there is
                # one, rather than the whole batch (a model may run best at a smaller size).
                return Decision(batch[:best_preferred] or batch)
        if not batch:
            return Decision([])
        if best_preferred:
            return Decision(batch[:best_preferred])
        deadline = batch[0].enqueued_ns + self.max_delay_ns
        if now_ns >= deadline:
            return Decision(batch)
        return Decision([], deadline)


class DynamicBatcher(QueueScheduler):
    """The loop that feeds one model's instances with batches from its queue."""

    def __init__(
        self, config: ModelConfig, pool: InstancePool, max_queue_size: int = 0, inline: bool = False
    ) -> None:
        policy = BatchPolicy(config)
        super().__init__(config, pool, max_queue_size, inline, not policy.max_delay_ns)
        self._policy = policy
        self._cap = pool.batch_cap = BatchCap(config.name)  # the pool lowers it on OOM

    async def run(self) -> None:
        while True:
            if not len(self.queue):
                await self._until_queued()
                continue
            instance = await self._pool.acquire()
            # One turn of the event loop first: requests whose bytes already arrived get
            # parsed and queued, so the batch takes them too. On one busy core this fills
            # batches (mlp at c=64: from ~30 to ~60 rows) for the price of a loop turn.
            await asyncio.sleep(0)
            now_ns = time.perf_counter_ns()
            cap_rows = self._cap.limit(now_ns)
            if self._flushing:
                now_ns = _FAR_FUTURE_NS
            decision = self._policy.next_batch(self.queue.ordered(), now_ns, cap_rows)
            if decision.batch:
                self.queue.remove(decision.batch)
                self._pool.launch(instance, decision.batch)
                continue
            self._pool.release(instance)
            await self._wait(decision.wait_until_ns)

    async def _wait(self, until_ns: int | None) -> None:
        """Sleep until a new request arrives or the policy's deadline passes."""
        self._wakeup.clear()
        if until_ns is None:
            await self._wakeup.wait()
            return
        timeout_s = max(until_ns - time.perf_counter_ns(), 0) / 1e9
        try:
            await asyncio.wait_for(self._wakeup.wait(), timeout_s)
        except TimeoutError:
            pass
