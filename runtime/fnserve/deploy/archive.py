"""Deployment archives: pack a path into a tar.gz, and read one back safely.

An archive holds regular files and folders only, all inside its root: a member whose name is
absolute or climbs out with `..`, a link, a device or a FIFO is refused, as are archives that
are corrupt or unpack to more than the allowed size. The content hash covers every file's
relative path and bytes (not the tar's own timestamps), so identical content packed twice has
the same hash.

Example:
    ```python
    data = pack(Path("functions/plus.py"))
    files = read_archive(data, max_unpacked_bytes=1 << 28)
    files.write_once(Path("state/plus") / files.digest[:16])
    ```
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from fnserve.errors import InvalidInputError, PayloadTooLargeError

MAX_MEMBERS = 10_000
_SKIPPED_DIRS = frozenset({"__pycache__", ".git", ".hg", ".svn", ".mypy_cache", ".venv"})


@dataclass(frozen=True)
class ArchiveFiles:
    """The files of a checked archive: relative POSIX paths and their bytes.

    Args:
        files: path -> content, every path inside the archive's root.
        digest: sha256 hex of the sorted paths and contents.
    """

    files: dict[str, bytes]
    digest: str

    def write_once(self, folder: Path) -> None:
        """Write every file under `folder`, unless it exists (the same content, by its name)."""
        if folder.is_dir():
            return
        partial = folder.with_name(folder.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)  # left by a crash
        partial.mkdir(parents=True)
        for name, content in self.files.items():
            target = partial.joinpath(*PurePosixPath(name).parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        os.replace(partial, folder)


def content_hash(files: dict[str, bytes]) -> str:
    """The sha256 of the files' sorted relative paths and bytes."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + len(files[name]).to_bytes(8, "big"))
        digest.update(files[name])
    return digest.hexdigest()


def pack(path: Path) -> bytes:
    """A tar.gz of `path`: a Python file (as itself), a Triton model directory (under its own
    name, so the archive's root holds the model directory), or a folder (its content).

    Raises:
        InvalidInputError: `path` does not exist or holds nothing to pack.
    """
    if path.is_file():
        members = {path.name: path}
    elif (path / "config.pbtxt").is_file() or _has_versions(path):
        members = {f"{path.name}/{p.relative_to(path).as_posix()}": p for p in _files(path)}
    elif path.is_dir():
        members = {p.relative_to(path).as_posix(): p for p in _files(path)}
    else:
        raise InvalidInputError(f"'{path}' does not exist")
    if not members:
        raise InvalidInputError(f"'{path}' holds no file to deploy")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name in sorted(members):
            content = members[name].read_bytes()
            info = tarfile.TarInfo(name)
            info.size = len(content)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def _has_versions(path: Path) -> bool:
    return path.is_dir() and any(c.is_dir() and c.name.isdigit() for c in path.iterdir())


def _files(folder: Path) -> list[Path]:
    return sorted(
        p
        for p in folder.rglob("*")
        if p.is_file()
        and not p.is_symlink()
        and not _SKIPPED_DIRS.intersection(p.relative_to(folder).parts)
        and p.suffix != ".pyc"
    )


def read_archive(data: bytes, max_unpacked_bytes: int) -> ArchiveFiles:
    """Check a tar.gz and read its files.

    Raises:
        InvalidInputError: corrupt, empty, or a member that is not a regular file or folder,
            or whose path leaves the archive's root (the reason names the member).
        PayloadTooLargeError: the files add up to more than `max_unpacked_bytes`.
    """
    files: dict[str, bytes] = {}
    total = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            for count, member in enumerate(tar, 1):
                if count > MAX_MEMBERS:
                    raise InvalidInputError(f"archive has more than {MAX_MEMBERS} members")
                name = _checked_name(member)
                if member.isdir():
                    continue
                total += member.size
                if total > max_unpacked_bytes:
                    raise PayloadTooLargeError(
                        f"archive unpacks to more than {max_unpacked_bytes} bytes "
                        f"(the server's --deploy-max-bytes allows 8 times the archive size)"
                    )
                extracted = tar.extractfile(member)
                assert extracted is not None  # a regular file always has content
                files[name] = extracted.read()
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise InvalidInputError(f"corrupt archive: {exc or exc.__class__.__name__}") from exc
    if not files:
        raise InvalidInputError("archive holds no file")
    return ArchiveFiles(files, content_hash(files))


def _checked_name(member: tarfile.TarInfo) -> str:
    raw = member.name
    if not (member.isfile() or member.isdir()):
        kind = "link" if member.issym() or member.islnk() else "device or special file"
        raise InvalidInputError(f"archive member '{raw}' is a {kind}: only files are deployed")
    path = PurePosixPath(raw)
    if path.is_absolute() or raw.startswith(("/", "\\")):
        raise InvalidInputError(f"archive member '{raw}' has an absolute path")
    parts = [p for p in path.parts if p != "."]
    if ".." in parts or "\\" in raw or "\0" in raw:
        raise InvalidInputError(f"archive member '{raw}' escapes the archive's folder")
    if not parts and not member.isdir():
        raise InvalidInputError(f"archive member '{raw}' has no name")
    return "/".join(parts)
