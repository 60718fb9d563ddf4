"""A local copy of a model repository kept in object storage, served as a local folder.

`RepositoryMirror.sync()` lists the repository's prefix and makes the cache folder match it:
objects whose ETag and size the manifest already records are not downloaded again (a restart
downloads nothing that did not change), new and changed ones are downloaded to a temporary
name outside the served folder and renamed into place (a half-downloaded file is never
seen), and files whose objects were deleted go, with the folders left empty of them. It
returns the local paths that changed, which the change reloader turns into model reloads
(`MirrorPoller` does that every `--repository-poll-secs` in poll mode).

Cache layout, one folder per repository URL (named by its hash, so two URLs never share
files):

```
<cache>/<hash>/manifest.json    url, and key -> (etag, size) of every file in place
<cache>/<hash>/.partial/        downloads in progress
<cache>/<hash>/<name>/...       the served copy; <name> is the prefix's last part (a model
                                directory keeps its model's name) or the bucket's
```
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from fnserve.errors import RepositoryError
from fnserve.repository.objectstore import ObjectStore, RemoteObject, RemoteUrl, open_store

log = logging.getLogger(__name__)

_DOWNLOADERS = 8  # objects downloaded side by side
Manifest = dict[str, tuple[str, int]]  # path under the mirror's folder -> (etag, size)


@dataclass(frozen=True)
class SyncReport:
    """What one sync did.

    Args:
        url: the repository.
        objects: objects the repository holds now.
        changed: local paths written or deleted (absolute); empty when nothing changed.
        downloaded_bytes: bytes downloaded.
        duration_s: how long the sync took.
    """

    url: str
    objects: int
    changed: frozenset[Path]
    downloaded_bytes: int
    duration_s: float

    def describe(self) -> str:
        """One line for the log."""
        return (
            f"model repository {self.url}: {self.objects} object(s), {len(self.changed)} "
            f"changed ({self.downloaded_bytes / 1e6:.1f} MB downloaded) in "
            f"{self.duration_s:.2f} s"
        )


class RepositoryMirror:
    """The local cache of one remote repository.

    Args:
        url: the repository.
        store: read access to its bucket.
        cache_root: the folder that holds the caches (created when missing).
    """

    def __init__(self, url: RemoteUrl, store: ObjectStore, cache_root: Path) -> None:
        self.url = url
        self._store = store
        digest = hashlib.sha256(str(url).encode()).hexdigest()[:16]
        self.root = cache_root.resolve() / digest
        self.name = url.prefix.rsplit("/", 1)[-1] or url.bucket
        self.path = self.root / self.name  # what is served: a folder, or one @model file
        self._unreported: set[Path] = set()  # changed by a sync that then failed
        self._lock = threading.Lock()

    def sync(self) -> SyncReport:
        """Make the cache match the repository (blocking: network and file I/O).

        Raises:
            RepositoryError: listing or a download failed (what did download stays, and is
                reported by the next sync that succeeds); the cache cannot be written.
        """
        start = time.perf_counter()
        with self._lock, self._locked():
            listing = self._listing()
            before = self._read_manifest()
            stale = {rel: obj for rel, obj in listing.items() if not self._fresh(rel, obj, before)}
            fetched = self._download(stale, before)
            gone = before.keys() - listing.keys()
            self._remove(gone, listing.keys())
            after = {rel: before[rel] for rel in listing if rel in before} | fetched
            self._write_manifest(after)
            if not self.path.exists() and self.name not in listing:
                self.path.mkdir(parents=True)  # an empty repository is an empty folder
            changed = {self.root / rel for rel in (*fetched, *gone)} | self._unreported
            self._unreported = set()
        size = sum(obj.size for rel, obj in listing.items() if rel in fetched)
        return SyncReport(
            str(self.url), len(listing), frozenset(changed), size, time.perf_counter() - start
        )

    def _listing(self) -> dict[str, RemoteObject]:
        """The repository's objects by their path under `root`; keys that cannot be a
        local path (`..`, empty parts, folder markers) are skipped."""
        prefix = self.url.prefix
        objects = self._store.list_objects(prefix)
        inside = {o.key: o for o in objects if not prefix or o.key.startswith(prefix + "/")}
        if not inside and prefix:  # the URL names one object (an @model file)
            inside = {o.key: o for o in objects if o.key == prefix}
        listing: dict[str, RemoteObject] = {}
        for key, obj in inside.items():
            rel = self._relative(key)
            if rel is None:
                if not key.endswith("/"):
                    log.warning("%s: object '%s' cannot be a local file; skipped", self.url, key)
                continue
            listing[rel] = obj
        return listing

    def _relative(self, key: str) -> str | None:
        prefix = self.url.prefix
        rest = key if not prefix else key.removeprefix(prefix).removeprefix("/")
        parts = rest.split("/") if rest else []
        if any(part in ("", ".", "..") or "\0" in part for part in parts):
            return None
        return str(PurePosixPath(self.name, *parts))

    def _fresh(self, rel: str, obj: RemoteObject, manifest: Manifest) -> bool:
        if manifest.get(rel) != (obj.etag, obj.size):
            return False
        path = self.root / rel
        return path.is_file() and path.stat().st_size == obj.size

    def _download(self, stale: dict[str, RemoteObject], before: Manifest) -> Manifest:
        """Download every stale object; what was written. On a failure, records the ones
        in place (manifest and `_unreported`) and raises."""
        if not stale:
            return {}
        fetched: Manifest = {}
        errors: list[RepositoryError] = []
        with ThreadPoolExecutor(min(_DOWNLOADERS, len(stale))) as pool:
            futures = {rel: pool.submit(self._fetch, obj, rel) for rel, obj in stale.items()}
        for rel, future in futures.items():
            try:
                written = future.result()
                fetched[rel] = (written.etag, written.size)
            except RepositoryError as exc:
                errors.append(exc)
        if errors:
            self._unreported |= {self.root / rel for rel in fetched}
            self._write_manifest(before | fetched)
            raise errors[0]
        return fetched

    def _fetch(self, obj: RemoteObject, rel: str) -> RemoteObject:
        partial = self.root / ".partial" / uuid.uuid4().hex
        target = self.root / rel
        try:
            written = self._store.download(obj.key, partial)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(partial, target)
        except OSError as exc:
            raise RepositoryError(
                f"{self.url}: cannot write '{obj.key}' into the cache: {exc}"
            ) from exc
        finally:
            partial.unlink(missing_ok=True)
        return written

    def _remove(self, gone: Iterable[str], kept: Iterable[str]) -> None:
        """Delete the files of deleted objects, and the folders no object lives in any more
        (with what the server wrote there, such as `__pycache__`)."""
        kept_dirs = {parent for rel in kept for parent in PurePosixPath(rel).parents}
        for rel in sorted(gone, key=len, reverse=True):
            (self.root / rel).unlink(missing_ok=True)
            for parent in PurePosixPath(rel).parents:
                if parent in kept_dirs or parent in (PurePosixPath("."), PurePosixPath(self.name)):
                    break
                shutil.rmtree(self.root / parent, ignore_errors=True)

    def _read_manifest(self) -> Manifest:
        try:
            data = json.loads((self.root / "manifest.json").read_text())
            return {rel: (str(etag), int(size)) for rel, (etag, size) in data["objects"].items()}
        except (OSError, ValueError, KeyError, TypeError):
            return {}  # no cache yet, or a broken one: everything is downloaded again

    def _write_manifest(self, manifest: Manifest) -> None:
        partial = self.root / ".partial" / f"manifest-{uuid.uuid4().hex}"
        partial.write_text(json.dumps({"url": str(self.url), "objects": manifest}, indent=1))
        os.replace(partial, self.root / "manifest.json")

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the cache folder alone (other servers on this host may share the cache)."""
        try:
            (self.root / ".partial").mkdir(parents=True, exist_ok=True)
            lock = (self.root / "lock").open("w")
        except OSError as exc:
            raise RepositoryError(
                f"{self.url}: cannot create the cache in '{self.root}': {exc}"
            ) from exc
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            for leftover in (self.root / ".partial").iterdir():  # a crashed sync's
                leftover.unlink(missing_ok=True)
            yield


def open_mirrors(
    urls: Iterable[str], cache_root: Path, endpoint_url: str = ""
) -> list[RepositoryMirror]:
    """A synced mirror of each repository URL (blocking; call before serving).

    Raises:
        RepositoryError: a URL is not supported, its client library is missing, or its
            first sync failed (no such bucket, no credentials, the endpoint cannot be
            reached).
    """
    mirrors: list[RepositoryMirror] = []
    for raw in dict.fromkeys(urls):  # each URL once, in order
        url = RemoteUrl.parse(raw)
        mirror = RepositoryMirror(url, open_store(url, endpoint_url), cache_root)
        report = mirror.sync()
        log.info("%s, cached in %s", report.describe(), mirror.path)
        mirrors.append(mirror)
    return mirrors
