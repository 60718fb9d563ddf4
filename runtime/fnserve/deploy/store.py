"""The state directory: every deployment's versions on disk, and which one serves.

```
STATE_DIR/deployments/NAME/deployment.json    versions (number, hash, when, models), current
STATE_DIR/deployments/NAME/HASH16/            one folder per deployed content
```

`deployment.json` is replaced atomically, so a crash leaves the previous record whole; the
server reads the records at start and serves each deployment's current folder again.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from fnserve.errors import InvalidInputError, ModelNotFoundError, RepositoryError

log = logging.getLogger(__name__)

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_RECORD = "deployment.json"


def check_name(name: str) -> str:
    """`name`, once it is a valid deployment name.

    Raises:
        InvalidInputError: not 1-64 letters, digits, '.', '_' or '-' (starting with one of the
            first two).
    """
    if not _NAME.fullmatch(name):
        raise InvalidInputError(
            f"deployment name {name[:80]!r} must be 1-64 letters, digits, '.', '_' or '-' "
            f"starting with a letter or digit"
        )
    return name


@dataclass(frozen=True)
class DeployedVersion:
    """One deployed content of a deployment.

    Args:
        version: 1, 2, ... in the order deployed.
        digest: the content hash (sha256 hex).
        deployed_at: seconds since the epoch.
        models: the (name, version) pairs its files define.
    """

    version: int
    digest: str
    deployed_at: float
    models: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Deployment:
    """A deployment's versions and the one that serves (0: none)."""

    name: str
    current: int = 0
    versions: tuple[DeployedVersion, ...] = field(default=())

    def get(self, version: int) -> DeployedVersion:
        """The deployed version numbered `version`.

        Raises:
            ModelNotFoundError: there is none.
        """
        for deployed in self.versions:
            if deployed.version == version:
                return deployed
        known = ", ".join(str(v.version) for v in self.versions) or "none"
        raise ModelNotFoundError(
            f"deployment '{self.name}' has no version {version}; versions: {known}"
        )

    @property
    def serving(self) -> DeployedVersion | None:
        """The current version (None before the first deployment succeeded)."""
        return self.get(self.current) if self.current else None


class DeploymentStore:
    """Deployments on disk under `state_dir` (blocking file I/O: call it from a thread).

    Args:
        state_dir: the server's `--state-dir`; created on the first deployment.
    """

    def __init__(self, state_dir: str | Path) -> None:
        self.root = Path(state_dir) / "deployments"

    def folder(self, name: str, digest: str) -> Path:
        """Where the content `digest` of deployment `name` is unpacked."""
        return self.root / name / digest[:16]

    def all(self) -> list[Deployment]:
        """Every deployment with a record, by name."""
        if not self.root.is_dir():
            return []
        found = []
        for folder in sorted(self.root.iterdir()):
            if not (folder / _RECORD).is_file():
                continue
            try:
                found.append(self.load(folder.name))
            except RepositoryError as exc:  # one broken record must not hide the others
                log.error("%s", exc)
        return found

    def serving_folders(self) -> list[Path]:
        """The folders of every deployment's current version (what a restarted server serves)."""
        folders = []
        for deployment in self.all():
            serving = deployment.serving
            if serving is not None and self.folder(deployment.name, serving.digest).is_dir():
                folders.append(self.folder(deployment.name, serving.digest))
        return folders

    def load(self, name: str) -> Deployment:
        """The record of `name` (an empty one when it was never deployed)."""
        path = self.root / name / _RECORD
        if not path.is_file():
            return Deployment(name)
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            versions = tuple(
                DeployedVersion(
                    int(v["version"]),
                    str(v["digest"]),
                    float(v["deployed_at"]),
                    tuple((str(m), str(n)) for m, n in v["models"]),
                )
                for v in doc["versions"]
            )
            return Deployment(name, int(doc["current"]), versions)
        except (OSError, UnicodeError, ValueError, KeyError, TypeError) as exc:
            # Written atomically by this store, so only a hand edit or a failing disk gets here.
            raise RepositoryError(
                f"the record of deployment '{name}' ({path}) cannot be read ({exc!r}); "
                f"restore it, or delete {path.parent} to drop the deployment"
            ) from exc

    def add(self, name: str, digest: str, models: tuple[tuple[str, str], ...]) -> Deployment:
        """Record a newly served content of `name` as its next, current version."""
        deployment = self.load(name)
        number = max((v.version for v in deployment.versions), default=0) + 1
        added = DeployedVersion(number, digest, time.time(), models)
        return self.save(
            replace(deployment, current=number, versions=(*deployment.versions, added))
        )

    def save(self, deployment: Deployment) -> Deployment:
        """Write the record of `deployment` atomically."""
        path = self.root / deployment.name / _RECORD
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps(asdict(deployment), indent=1), encoding="utf-8")
        os.replace(partial, path)
        return deployment

    def remove(self, name: str) -> None:
        """Delete every version of `name` from disk."""
        shutil.rmtree(self.root / name, ignore_errors=True)

    def discard(self, name: str, digest: str) -> None:
        """Delete an unpacked content that no recorded version uses."""
        if all(v.digest != digest for v in self.load(name).versions):
            shutil.rmtree(self.folder(name, digest), ignore_errors=True)
