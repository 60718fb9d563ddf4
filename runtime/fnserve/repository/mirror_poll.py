"""Poll remote model repositories and reload the models whose objects changed.

A bucket sends no change events, so in poll mode (and with `--watch`) each mirror is synced
every `--repository-poll-secs`; when a sync changed files, their paths go to the same reload
callback the file watcher uses (the runtime's `reload_changed`), once the whole sync is done:
a reload never sees a repository half copied. The old versions keep serving while the new
ones load and warm up. A failed sync (the bucket unreachable, credentials expired) is logged
and retried at the next poll; the models already loaded keep serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

from fnserve.errors import FnserveError
from fnserve.repository.mirror import RepositoryMirror
from fnserve.repository.watch import OnChange

log = logging.getLogger(__name__)


class MirrorPoller:
    """Syncs `mirrors` every `interval_s` and hands changed paths to `on_change`.

    Args:
        mirrors: the remote repositories served.
        on_change: applies a batch of changed paths (the runtime's `reload_changed`).
        interval_s: seconds between the end of one poll and the start of the next.
    """

    def __init__(
        self, mirrors: Sequence[RepositoryMirror], on_change: OnChange, interval_s: float
    ) -> None:
        self._mirrors = list(mirrors)
        self._on_change = on_change
        self._interval_s = interval_s
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def describe(self) -> str:
        urls = ", ".join(str(m.url) for m in self._mirrors)
        return f"polling {urls} every {self._interval_s:g} s"

    def start(self) -> None:
        """Start polling (the first poll comes one interval from now: the mirrors were
        synced before the server started)."""
        self._task = asyncio.create_task(self._run())
        log.info("%s", self.describe())

    async def aclose(self) -> None:
        """Stop polling; a sync in progress finishes in its thread, unreported."""
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def poll(self) -> None:
        """Sync every mirror once and reload what changed."""
        for mirror in self._mirrors:
            try:
                report = await asyncio.to_thread(mirror.sync)
            except FnserveError as exc:
                log.error("polling %s failed (the loaded models keep serving): %s",
                          mirror.url, exc.message)  # fmt: skip
                continue
            if not report.changed:
                continue
            log.info("%s", report.describe())
            try:
                await self._on_change(report.changed)
            except FnserveError as exc:
                log.error("applying the changes of %s failed: %s", mirror.url, exc.message)
            except Exception:
                log.exception("applying the changes of %s failed", mirror.url)

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self._interval_s)
                return
            await self.poll()
