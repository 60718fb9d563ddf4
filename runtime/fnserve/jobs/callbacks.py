"""Completion callbacks: POST a finished job's JSON to the URL its client gave.

Delivery is at-least-once and bounded: a failed POST (no connection, a timeout, a 5xx or 429)
is retried with exponential backoff up to `attempts` times, then dropped with a warning; a 4xx
is the receiver refusing the call and is not retried. Deliveries run beside the worker, never
in the way of a job's own outcome.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx

log = logging.getLogger(__name__)

_FIRST_BACKOFF_S = 0.5
_MAX_BACKOFF_S = 30.0


class CallbackSender:
    """Posts job documents to callback URLs, each in its own task.

    Args:
        attempts: tries per callback.
        timeout_s: the limit of one try.
    """

    def __init__(self, attempts: int = 5, timeout_s: float = 10.0) -> None:
        self._attempts = max(attempts, 1)
        self._client = httpx.AsyncClient(timeout=timeout_s, follow_redirects=False)
        self._tasks: set[asyncio.Task[None]] = set()

    def send(self, url: str, document: dict[str, Any]) -> None:
        """Deliver `document` to `url` in the background."""
        task = asyncio.create_task(self._deliver(url, document))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver(self, url: str, document: dict[str, Any]) -> None:
        backoff_s = _FIRST_BACKOFF_S
        for attempt in range(1, self._attempts + 1):
            outcome = await self._post(url, document)
            if outcome is None:
                return
            if attempt == self._attempts or not outcome[1]:
                log.warning(
                    "job %s: callback to %s not delivered after %d attempt(s): %s",
                    document.get("id"), url, attempt, outcome[0],
                )  # fmt: skip
                return
            await asyncio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, _MAX_BACKOFF_S)

    async def _post(self, url: str, document: dict[str, Any]) -> tuple[str, bool] | None:
        """None when delivered; else why not, and whether another try may succeed."""
        try:
            response = await self._client.post(url, json=document)
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}", True
        if response.status_code < 300:
            return None
        retry = response.status_code >= 500 or response.status_code == 429
        return f"HTTP {response.status_code}", retry

    async def aclose(self, grace_s: float = 2.0) -> None:
        """Give deliveries in flight `grace_s` to finish, then stop them."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=grace_s)
        for task in set(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._client.aclose()
