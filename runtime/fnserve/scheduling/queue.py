"""The per-model request queue: priority levels, queue policies (size limits and timeouts).

Level 1 is the highest priority. Requests whose timeout expired under a DELAY policy move to a
last, lowest level; under REJECT they fail at once with `RequestTimeoutError`. Below even that
is the background lane (durable jobs): its requests are taken only when no online request is
waiting, so a batch is filled with online requests first and jobs fill what is left. The lane
has no size limit or timeout of its own: the job worker keeps only a bounded window in it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterator
from typing import NamedTuple

from fnserve.config.model_config import DynamicBatching, QueuePolicy
from fnserve.errors import QueueFullError, RequestTimeoutError
from fnserve.scheduling.request import PendingRequest

_NO_BATCHING = DynamicBatching()


class QueueStatistics(NamedTuple):
    """A snapshot of the queue."""

    waiting: int
    per_level: tuple[int, ...]
    delayed: int
    background: int = 0


class RequestQueue:
    """Holds pending requests by priority; `put_nowait` enforces the queue policy.

    Args:
        model: model name, for error messages.
        batching: the model's dynamic batching settings (None: one default level, no policy).
        on_change: called whenever a request is added or moved, to wake the batcher.
        default_max_queue_size: the bound of each level whose policy sets none (0: none), so
            a model without a queue policy cannot hold memory without limit.
    """

    def __init__(
        self,
        model: str,
        batching: DynamicBatching | None,
        on_change: Callable[[], None],
        default_max_queue_size: int = 0,
    ) -> None:
        self._model = model
        self._batching = batching or _NO_BATCHING
        levels = max(self._batching.priority_levels, 1)
        self._levels: list[deque[PendingRequest]] = [deque() for _ in range(levels)]
        self._delayed: deque[PendingRequest] = deque()
        self._background: deque[PendingRequest] = deque()
        # every lane, in the order requests are taken from them
        self._lanes = (*self._levels, self._delayed, self._background)
        self._policies = [self._batching.queue_policy(i + 1) for i in range(levels)]
        self._limits = [p.max_queue_size or default_max_queue_size for p in self._policies]
        self._on_change = on_change
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def level_of(self, priority: int) -> int:
        """Queue index (0-based) for a request priority; 0 or out of range means the default."""
        levels = self._batching.priority_levels
        if not levels:
            return 0
        if 1 <= priority <= levels:
            return priority - 1
        return self._batching.default_priority_level - 1

    def put_nowait(self, entry: PendingRequest) -> None:
        """Queue `entry`, or raise QueueFullError when its level is at `max_queue_size`."""
        if entry.background:
            self._background.append(entry)
            self._size += 1
            self._on_change()
            return
        entry.level = self.level_of(entry.priority)
        policy = self._policies[entry.level]
        queue = self._levels[entry.level]
        limit = self._limits[entry.level]
        if limit and len(queue) >= limit:
            self._compact(queue)
            if len(queue) >= limit:
                raise QueueFullError(
                    f"exceeds maximum queue size of {limit} for model '{self._model}'"
                )
        timeout_us = _effective_timeout_us(policy, entry.timeout_us)
        if timeout_us:
            loop = asyncio.get_running_loop()
            entry.timer = loop.call_later(timeout_us / 1e6, self._expire, entry, policy)
        queue.append(entry)
        self._size += 1
        self._on_change()

    def _compact(self, queue: deque[PendingRequest]) -> None:
        alive = [e for e in queue if e.alive]
        self._size -= len(queue) - len(alive)
        queue.clear()
        queue.extend(alive)

    def _expire(self, entry: PendingRequest, policy: QueuePolicy) -> None:
        entry.timer = None  # background requests never get a timer
        queue = self._levels[entry.level]
        if entry not in queue:
            return  # already taken for execution
        queue.remove(entry)
        if policy.timeout_action == "DELAY":
            self._delayed.append(entry)
            self._on_change()
            return
        self._size -= 1
        if entry.alive:
            entry.future.set_exception(RequestTimeoutError("request timeout expired"))

    def ordered(self) -> Iterator[PendingRequest]:
        """Live requests, highest priority first, then delayed ones, background ones last
        (dead ones are dropped)."""
        for queue in self._lanes:
            while queue and not queue[0].alive:
                queue.popleft()
                self._size -= 1
            yield from (e for e in queue if e.alive)

    def pop_next(self) -> PendingRequest | None:
        """Take the first live request (highest priority, then oldest), or None."""
        for queue in self._lanes:
            while queue:
                entry = queue.popleft()
                self._size -= 1
                if entry.timer is not None:
                    entry.timer.cancel()
                    entry.timer = None
                if entry.alive:
                    return entry
        return None

    def remove(self, entries: list[PendingRequest]) -> None:
        """Take `entries` (as chosen by the batch policy) out of the queue."""
        chosen = set(map(id, entries))
        for queue in self._lanes:
            if not queue:
                continue
            kept = [e for e in queue if id(e) not in chosen]
            if len(kept) != len(queue):
                self._size -= len(queue) - len(kept)
                queue.clear()
                queue.extend(kept)
        for entry in entries:
            if entry.timer is not None:
                entry.timer.cancel()
                entry.timer = None

    def fail_all(self, error: Exception) -> None:
        """Fail every waiting request (used when a model unloads with requests queued)."""
        for queue in self._lanes:
            while queue:
                entry = queue.popleft()
                if entry.timer is not None:
                    entry.timer.cancel()
                if entry.alive:
                    entry.future.set_exception(error)
        self._size = 0

    def statistics(self) -> QueueStatistics:
        return QueueStatistics(
            self._size,
            tuple(len(q) for q in self._levels),
            len(self._delayed),
            len(self._background),
        )


def _effective_timeout_us(policy: QueuePolicy, requested_us: int) -> int:
    default = policy.default_timeout_microseconds
    if policy.allow_timeout_override and requested_us:
        # A request may shorten the default timeout, never lengthen it (Triton's rule).
        return requested_us if not default else min(requested_us, default)
    return default
