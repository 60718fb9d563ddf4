"""Deployment archives: packing, the content hash, and every unsafe or broken archive refused
with its reason."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from fnserve.deploy.archive import pack, read_archive
from fnserve.errors import InvalidInputError, PayloadTooLargeError

LIMIT = 1 << 20


def _tar(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, content in members:
            info.size = len(content) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(content) if info.isfile() else None)
    return buffer.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


def test_pack_file_folder_and_model_dir(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("A = 1\n")
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / "b.py").write_text("B = 2\n")
    (tmp_path / "pkg" / "__pycache__" / "b.pyc").write_bytes(b"x")
    model_dir = tmp_path / "m"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text('name: "m"\n')
    assert read_archive(pack(tmp_path / "a.py"), LIMIT).files == {"a.py": b"A = 1\n"}
    assert read_archive(pack(tmp_path / "pkg"), LIMIT).files == {"b.py": b"B = 2\n"}
    assert set(read_archive(pack(model_dir), LIMIT).files) == {"m/config.pbtxt"}


def test_content_hash_ignores_archive_metadata(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("A = 1\n")
    first = read_archive(pack(tmp_path / "a.py"), LIMIT)
    (tmp_path / "a.py").touch()
    assert read_archive(pack(tmp_path / "a.py"), LIMIT).digest == first.digest
    (tmp_path / "a.py").write_text("A = 2\n")
    assert read_archive(pack(tmp_path / "a.py"), LIMIT).digest != first.digest


@pytest.mark.parametrize(
    ("member", "reason"),
    [
        (_member("../evil.py"), "escapes the archive's folder"),
        (_member("ok/../../evil.py"), "escapes the archive's folder"),
        (_member("/etc/evil.py"), "absolute path"),
        (_member("link.py", tarfile.SYMTYPE, "/etc/passwd"), "is a link"),
        (_member("hard.py", tarfile.LNKTYPE, "a.py"), "is a link"),
        (_member("dev", tarfile.CHRTYPE), "device or special file"),
        (_member("fifo", tarfile.FIFOTYPE), "device or special file"),
    ],
)
def test_unsafe_members_are_refused(member: tarfile.TarInfo, reason: str) -> None:
    data = _tar((_member("a.py"), b"A = 1\n"), (member, b"x"))
    with pytest.raises(InvalidInputError, match=reason):
        read_archive(data, LIMIT)


@pytest.mark.parametrize("data", [b"", b"not a tar at all", b"\x1f\x8b\x08\x00garbage"])
def test_corrupt_archives_are_refused(data: bytes) -> None:
    with pytest.raises(InvalidInputError, match="corrupt archive|holds no file"):
        read_archive(data, LIMIT)


def test_truncated_archive_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_bytes(bytes(range(256)) * 64)
    data = pack(tmp_path / "a.py")
    with pytest.raises(InvalidInputError, match="corrupt archive"):
        read_archive(data[: len(data) // 2], LIMIT)


def test_unpacked_size_is_bounded() -> None:
    data = _tar((_member("zeros.bin"), bytes(2 * LIMIT)))  # compresses to a few KiB
    assert len(data) < LIMIT
    with pytest.raises(PayloadTooLargeError, match="unpacks to more than"):
        read_archive(data, LIMIT)
