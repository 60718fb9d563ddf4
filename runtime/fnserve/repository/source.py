"""The files a server was started from, re-imported when their content changes.

`scan()` imports every Python file under the model paths once and, on later calls (a repository
`load`), imports again only the files whose bytes changed (Triton model directories likewise:
read again only when their files changed), so a `load` after an edit serves the
edited code. A file that fails to import is reported, never fatal here: the caller decides
(`--strict`, or the repository load of one of its models).

It also remembers which models each file and model directory held at the last scan, so a
watcher can tell which models a changed path touches (`rescan`), also those a file no longer
defines. Scans run one at a time (each on a worker thread).

Paths may be the local copies of remote repositories (`s3://...`, see `mirror.py`). When no
poller keeps them up to date, `scan()` syncs them first, so a repository `load` reads the
bucket again, as Triton's does.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fnserve.errors import RepositoryError
from fnserve.repository.discover import (
    Definition,
    Discovery,
    ImportFailure,
    ModelImportError,
    definitions_in,
    import_file,
    model_paths,
)
from fnserve.repository.mirror import RepositoryMirror
from fnserve.repository.model_dirs import ModelDirs

log = logging.getLogger(__name__)
_WRITER_GRACE_S = 1.0  # how long an emptied file that held models may take to be written


@dataclass(frozen=True)
class _Imported:
    digest: str
    definitions: tuple[Definition, ...]
    failure: ImportFailure | None


class ModelSource:
    """Model paths (files and folders) and what each file held when last imported.

    Args:
        paths: what `fnserve serve` was given (remote repositories as their local copies).
        synced_on_scan: copies of remote repositories to sync before each scan (none when a
            poller syncs them: in poll mode and with `--watch`).
    """

    def __init__(
        self, paths: Iterable[str | Path], synced_on_scan: Sequence[RepositoryMirror] = ()
    ) -> None:
        self.paths = [Path(p) for p in paths]
        self._synced_on_scan = list(synced_on_scan)
        self._files: dict[Path, _Imported] = {}
        self._model_dirs = ModelDirs()
        self._origins: dict[Path, frozenset[str]] = {}  # file or model dir: its model names
        self._lock = threading.Lock()

    def replace_path(self, old: Path | None, new: Path | None) -> None:
        """Serve `new` in place of `old` from the next scan on (None: add, or remove)."""
        with self._lock:
            if old is not None and old in self.paths:
                self.paths.remove(old)
            if new is not None and new not in self.paths:
                self.paths.append(new)

    def scan(self) -> Discovery:
        """Every file's definitions, importing new and changed files (blocking: runs user code).

        Raises:
            RepositoryError: a path no longer exists.
        """
        with self._lock:
            self._sync_remote()
            return self._scan()

    def _sync_remote(self) -> None:
        """Sync the remote repositories; one that cannot be read is served from its cache
        (a bucket out of reach must not fail the load of a deployment or a local model)."""
        for mirror in self._synced_on_scan:
            try:
                report = mirror.sync()
            except RepositoryError as exc:
                log.warning("%s; serving its cached copy", exc.message)
                continue
            if report.changed:
                log.info("%s", report.describe())

    def rescan(self, changed: Iterable[Path]) -> tuple[Discovery, set[str]]:
        """`scan()`, and the names of the models the files and model directories at or under
        `changed` held before the scan or hold after it (added, edited and removed ones).

        Raises:
            RepositoryError: a path no longer exists.
        """
        targets = [p.resolve() for p in changed]
        with self._lock:
            before = self._models_at(targets)
            self._wait_for_writers(targets)
            found = self._scan()
            return found, before | self._models_at(targets)

    def _wait_for_writers(self, targets: list[Path]) -> None:
        """Let a file that held models and is empty now be written to first, up to a second.

        Saving truncates a file before writing it; on a loaded machine the writer can be held
        between the two for longer than the watcher waits for changes to settle, and a scan in
        between would unload the file's models until the next change (requests get 404). A
        file emptied on purpose is read as empty after the second.
        """
        emptied = [t for t in targets if self._origins.get(t) and _empty(t)]
        deadline = time.monotonic() + _WRITER_GRACE_S
        while emptied and time.monotonic() < deadline:
            time.sleep(0.05)
            emptied = [t for t in emptied if _empty(t)]

    def _models_at(self, targets: list[Path]) -> set[str]:
        names: set[str] = set()
        for origin, held in self._origins.items():
            if any(_touches(t, origin) for t in targets):
                names |= held
        return names

    def _scan(self) -> Discovery:
        paths = model_paths(self.paths)
        found = Discovery(files=paths.files, ignored=paths.ignored, model_dirs=paths.model_dirs)
        origins: dict[Path, frozenset[str]] = {}
        for file in paths.files:
            imported = self._import(file)
            found.definitions += imported.definitions
            if imported.failure is not None:
                found.failures.append(imported.failure)
            origins[file.resolve()] = _names(imported.definitions, imported.failure)
        for directory in paths.model_dirs:
            scanned = self._model_dirs.scan(directory)
            found.definitions += scanned.specs
            if scanned.failure is not None:
                found.failures.append(scanned.failure)
            origins[directory.resolve()] = frozenset({directory.name})
        self._origins = origins
        self._files = {f: i for f, i in self._files.items() if f.resolve() in origins}
        return found

    def _import(self, file: Path) -> _Imported:
        source = file.read_bytes()
        digest = hashlib.sha1(source).hexdigest()
        known = self._files.get(file)
        if known is not None and known.digest == digest:
            return known
        try:
            module = import_file(file, source)
            imported = _Imported(digest, tuple(definitions_in(module)), None)
        except ModelImportError as exc:
            failure = exc.failure
            if not failure.models and known is not None:
                # The syntax names no model (it does not parse): the ones it held before.
                models = tuple((d.config.name, d.config.version) for d in known.definitions)
                failure = ImportFailure(failure.file, failure.reason, models)
            # The previous definitions stay what the file holds: they keep serving.
            old = known.definitions if known is not None else ()
            imported = _Imported(digest, old, failure)
        self._files[file] = imported
        return imported


def _names(definitions: Iterable[Definition], failure: ImportFailure | None) -> frozenset[str]:
    names = {d.config.name for d in definitions}
    if failure is not None:
        names.update(name for name, _ in failure.models)
    return frozenset(names)


def _touches(changed: Path, origin: Path) -> bool:
    """Whether a change at `changed` concerns `origin`: the file itself, a file in the model
    directory, or a folder holding it (created, moved or deleted as a whole)."""
    return changed == origin or changed.is_relative_to(origin) or origin.is_relative_to(changed)


def _empty(path: Path) -> bool:
    try:
        return path.is_file() and path.stat().st_size == 0
    except OSError:
        return False
