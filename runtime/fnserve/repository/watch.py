"""Watch the served files and folders and hand each batch of changes to a reload callback.

`fnserve serve --watch` waits for the operating system's change events; Triton's
`--model-control-mode poll` looks at the files every `--repository-poll-secs` instead. Both
use `watchfiles.awatch`, which groups the events of one save (or of a burst of saves) into one
batch: it yields once no new change arrived for `STEP_MS`, or after `DEBOUNCE_MS` at most.
Changes made while a batch is being applied are collected and make the next batch, so a reload
never misses an edit and never overlaps the previous one. When polling, a batch waits until the
second it arrived in is over: the poller compares file times to the second, so a second save
within that second goes unreported, but the reload, reading the files then, sees it.

Folders are watched recursively. A single served file is watched through its folder (not
recursively), so an editor that saves by writing a new file and renaming it over the old one
is still seen. Editor temp and swap files, bytecode, and `__pycache__`, `.cache` and VCS
folders are ignored, so a model that writes its own cache beside its file does not reload
itself.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable, Collection, Iterable
from pathlib import Path

from watchfiles import Change, awatch

from fnserve.config.server import WatchSettings
from fnserve.errors import FnserveError, StartupError

log = logging.getLogger(__name__)

OnChange = Callable[[frozenset[Path]], Awaitable[object]]
STEP_MS = 50  # a batch ends when no change arrived for this long...
DEBOUNCE_MS = 1600  # ...or when it has been collecting for this long
_FILE_CLOCK_LAG_S = 0.05  # file times come from a coarse clock, up to a tick behind
IGNORED_DIRS = frozenset(
    {"__pycache__", ".cache", ".git", ".hg", ".svn", ".mypy_cache", ".pytest_cache",
     ".ruff_cache", ".ipynb_checkpoints", ".idea", ".vscode", ".venv", "node_modules"}
)  # fmt: skip
# vim (.swp, .swx, 4913, name~), emacs (#name#, .#name), JetBrains (___jb_tmp___), kate,
# LibreOffice locks, generic .tmp/.bak, and Python bytecode.
_TEMP_FILE = re.compile(
    r"(~|\.sw[a-p]|\.swx|\.tmp|\.temp|\.bak|\.orig|\.kate-swp|\.py[cod]|___jb_\w+___)$"
    r"|^(\.#|#.*#$|4913$|\.~lock|\.DS_Store$)"
)


class ChangeFilter:
    """Which changed paths matter: the served files, and files under the served folders that
    are neither temporary nor inside an ignored folder.

    Args:
        served: the files and folders given to `fnserve serve` (resolved).
    """

    def __init__(self, served: Iterable[Path]) -> None:
        served = list(served)
        self._files = {p for p in served if not p.is_dir()}
        self._dirs = [p for p in served if p.is_dir()]

    def __call__(self, change: Change, path: str) -> bool:
        changed = Path(path)
        if changed in self._files:
            return True
        for folder in self._dirs:
            if changed.is_relative_to(folder):
                return _wanted(changed.relative_to(folder).parts)
        return False


def _wanted(parts: tuple[str, ...]) -> bool:
    if not parts:
        return True  # the served folder itself (deleted, or replaced)
    if any(part in IGNORED_DIRS for part in parts):
        return False
    return _TEMP_FILE.search(parts[-1]) is None


class RepositoryWatcher:
    """Watches `paths` and calls `on_change` with every batch of changed paths, one at a time.

    Args:
        paths: the files and folders to watch (those given to `fnserve serve`).
        on_change: applies a batch (the runtime's `reload_changed`); an error it raises is
            logged and the watching goes on.
        settings: native events, or polling and how often.
    """

    def __init__(self, paths: Iterable[Path], on_change: OnChange, settings: WatchSettings):
        self._served = [p.resolve() for p in paths]
        self._on_change = on_change
        self._settings = settings
        self._stop = asyncio.Event()
        self._pending: set[Path] = set()
        self._changed = asyncio.Event()
        self._arrived_s = 0.0  # wall-clock time of the latest change reported
        self._tasks: list[asyncio.Task[None]] = []  # one per group of watched roots
        self._applier: asyncio.Task[None] | None = None

    def describe(self) -> str:
        how = "native file events"
        if self._settings.polling:
            how = f"polling every {self._settings.poll_interval_s:g} s"
        return f"watching {len(self._served)} model path(s) for changes ({how})"

    async def start(self) -> None:
        """Start watching; returns once every watch is in place (a change made after this
        returns is seen).

        Raises:
            StartupError: a path cannot be watched (e.g. the system's limit on watches).
        """
        filter_ = ChangeFilter(self._served)
        for roots, recursive in _roots(self._served):
            self._tasks.append(asyncio.create_task(self._collect(roots, recursive, filter_)))
        # A task's first step runs up to its first real suspension: awatch sets its watches
        # up (synchronously) before it waits for events in a worker thread.
        await asyncio.sleep(0)
        for task in self._tasks:
            if task.done() and task.exception() is not None:
                await self.aclose()
                raise StartupError(f"cannot watch the model paths: {task.exception()}")
        self._applier = asyncio.create_task(self._apply())
        log.info("%s", self.describe())

    async def aclose(self) -> None:
        """Stop watching and cancel a batch being applied (the server is shutting down)."""
        self._stop.set()  # each awatch sees it within STEP_MS
        if self._applier is not None:
            self._applier.cancel()
        tasks = self._tasks if self._applier is None else [*self._tasks, self._applier]
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _collect(self, roots: list[Path], recursive: bool, filter_: ChangeFilter) -> None:
        settings = self._settings
        changes = awatch(
            *roots,
            watch_filter=filter_,
            debounce=DEBOUNCE_MS,
            step=STEP_MS,
            stop_event=self._stop,
            force_polling=settings.polling,
            poll_delay_ms=max(int(settings.poll_interval_s * 1000), 1),
            recursive=recursive,
        )
        try:
            async for batch in changes:
                self._pending.update(Path(path) for _, path in batch)
                self._arrived_s = time.time()
                self._changed.set()
        except Exception as exc:  # `start` or `aclose` collects it
            log.error("watching %s stopped: %s: %s", _names(roots), type(exc).__name__, exc)
            raise

    async def _apply(self) -> None:
        while True:
            await self._changed.wait()
            if self._settings.polling:
                await asyncio.sleep(_past_its_second(self._arrived_s))
            self._changed.clear()
            batch, self._pending = frozenset(self._pending), set()
            log.debug("changed: %s", _names(batch))
            try:
                await self._on_change(batch)
            except FnserveError as exc:  # e.g. a served path was deleted: said in one line
                log.error("applying the changes to %s failed: %s", _names(batch), exc.message)
            except Exception:
                log.exception("applying the changes to %s failed", _names(batch))


def _past_its_second(arrived_s: float) -> float:
    """Seconds until the wall-clock second of `arrived_s` is over (and the file clock's lag).

    watchfiles' poller compares file modification times to the second: a save made in the
    same second as the change it just reported is never reported. The reload reads the files
    afresh (by content), so reading them once that second is over sees such a save too.
    """
    return max(math.floor(arrived_s) + 1 + _FILE_CLOCK_LAG_S - time.time(), 0.0)


def _roots(served: list[Path]) -> list[tuple[list[Path], bool]]:
    """(paths, recursive) groups to watch: folders recursively; the folders of single files
    not under a served folder, each on its own."""
    folders = [p for p in served if p.is_dir()]
    parents = sorted({p.parent for p in served if not p.is_dir() and not _under(p, folders)})
    groups = [(folders, True)] if folders else []
    return groups + ([(parents, False)] if parents else [])


def _under(path: Path, folders: Collection[Path]) -> bool:
    return any(path.is_relative_to(folder) for folder in folders)


def _names(paths: Iterable[Path]) -> str:
    shown = sorted(str(p) for p in paths)
    return ", ".join(shown[:5]) + (f" and {len(shown) - 5} more" if len(shown) > 5 else "")
