"""The local copy of a repository in S3 (moto in server mode on loopback), and its poller:
what a sync downloads, keeps, deletes and refuses, and what it reports."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from fnserve.errors import RepositoryError
from fnserve.repository.mirror import RepositoryMirror
from fnserve.repository.mirror_poll import MirrorPoller
from fnserve.repository.objectstore import RemoteObject, RemoteUrl, is_remote
from fnserve.repository.s3 import S3Store
from fnserve.repository.source import ModelSource
from tests.repository.s3server import LoopbackS3

pytestmark = pytest.mark.e2e  # against moto's S3 server on loopback


@pytest.fixture(scope="module")
def s3() -> Iterator[LoopbackS3]:
    with LoopbackS3() as server:
        yield server


@pytest.fixture
def store(
    s3: LoopbackS3, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> S3Store:
    """A fresh bucket holding `repo/m/config.pbtxt` and `repo/m/1/model.py`."""
    for name, value in s3.env().items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value)
    bucket = s3.bucket(request.node.name.replace("_", "-")[:60])
    s3.put(bucket, "repo/m/config.pbtxt", 'backend: "python"')
    s3.put(bucket, "repo/m/1/model.py", "v1")
    return S3Store(bucket)


def _mirror(store: S3Store, tmp_path: Path, prefix: str = "repo") -> RepositoryMirror:
    return RepositoryMirror(RemoteUrl("s3", store.bucket, prefix), store, tmp_path / "cache")


def _files(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): p.read_text() for p in folder.rglob("*") if p.is_file()
    }


class TestSync:
    def test_a_first_sync_copies_every_object(self, store: S3Store, tmp_path: Path) -> None:
        mirror = _mirror(store, tmp_path)
        report = mirror.sync()
        assert mirror.path.name == "repo"
        assert _files(mirror.path) == {"m/config.pbtxt": 'backend: "python"', "m/1/model.py": "v1"}
        assert report.objects == 2
        assert report.changed == {mirror.path / "m/config.pbtxt", mirror.path / "m/1/model.py"}
        assert report.downloaded_bytes == len('backend: "python"') + 2

    def test_unchanged_objects_are_not_downloaded_again(
        self, s3: LoopbackS3, store: S3Store, tmp_path: Path
    ) -> None:
        _mirror(store, tmp_path).sync()
        again = _mirror(store, tmp_path)  # a restart: a new mirror on the same cache
        assert again.sync().changed == frozenset()
        s3.put(store.bucket, "repo/m/1/model.py", "v1 edited")
        report = again.sync()
        assert report.changed == {again.path / "m/1/model.py"}
        assert report.downloaded_bytes == len("v1 edited")
        assert (again.path / "m/1/model.py").read_text() == "v1 edited"

    def test_a_multipart_upload_is_copied_whole_and_kept(
        self, s3: LoopbackS3, store: S3Store, tmp_path: Path
    ) -> None:
        weights = tmp_path / "model.onnx"
        weights.write_bytes(bytes(range(256)) * (9 * 4096))  # 9 MiB: boto3 sends it in parts
        s3.client.upload_file(str(weights), store.bucket, "repo/m/1/model.onnx")
        listed = store.list_objects("repo/m/1/model.onnx")
        assert "-" in listed[0].etag  # a multipart ETag: not the content's MD5
        mirror = _mirror(store, tmp_path)
        assert mirror.sync().downloaded_bytes > weights.stat().st_size
        assert (mirror.path / "m/1/model.onnx").read_bytes() == weights.read_bytes()
        assert mirror.sync().changed == frozenset()

    def test_a_crashed_syncs_partial_downloads_are_cleared(
        self, store: S3Store, tmp_path: Path
    ) -> None:
        mirror = _mirror(store, tmp_path)
        mirror.sync()
        (mirror.root / ".partial" / "0123abcd").write_bytes(b"half a model")
        assert mirror.sync().changed == frozenset()
        assert list((mirror.root / ".partial").iterdir()) == []

    def test_a_file_changed_in_the_cache_is_downloaded_again(
        self, store: S3Store, tmp_path: Path
    ) -> None:
        mirror = _mirror(store, tmp_path)
        mirror.sync()
        (mirror.path / "m/1/model.py").write_text("truncated by hand, longer")
        (mirror.path / "m/config.pbtxt").unlink()
        assert mirror.sync().changed == {
            mirror.path / "m/1/model.py",
            mirror.path / "m/config.pbtxt",
        }
        assert (mirror.path / "m/1/model.py").read_text() == "v1"

    def test_deleted_objects_take_their_folders_along(
        self, s3: LoopbackS3, store: S3Store, tmp_path: Path
    ) -> None:
        s3.put(store.bucket, "repo/m/2/model.py", "v2")
        mirror = _mirror(store, tmp_path)
        mirror.sync()
        (mirror.path / "m/2/__pycache__").mkdir()
        (mirror.path / "m/2/__pycache__/model.cpython-311.pyc").write_bytes(b"\0")
        s3.client.delete_object(Bucket=store.bucket, Key="repo/m/2/model.py")
        report = mirror.sync()
        assert report.changed == {mirror.path / "m/2/model.py"}
        assert not (mirror.path / "m/2").exists()  # else it would still look like a version
        assert (mirror.path / "m/1/model.py").is_file()
        manifest = json.loads((mirror.root / "manifest.json").read_text())
        assert sorted(manifest["objects"]) == ["repo/m/1/model.py", "repo/m/config.pbtxt"]

    def test_an_emptied_repository_stays_an_empty_folder(
        self, s3: LoopbackS3, store: S3Store, tmp_path: Path
    ) -> None:
        mirror = _mirror(store, tmp_path)
        mirror.sync()
        for key in ("repo/m/config.pbtxt", "repo/m/1/model.py"):
            s3.client.delete_object(Bucket=store.bucket, Key=key)
        assert len(mirror.sync().changed) == 2
        assert mirror.path.is_dir()
        assert list(mirror.path.iterdir()) == []

    def test_keys_that_cannot_be_local_paths_are_skipped(
        self, s3: LoopbackS3, store: S3Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        s3.put(store.bucket, "repo/../escape.py", "x")
        s3.put(store.bucket, "repo/a//b.py", "x")
        s3.put(store.bucket, "repo/folder/", "")  # a console's folder marker: silently skipped
        mirror = _mirror(store, tmp_path)
        with caplog.at_level(logging.WARNING):
            report = mirror.sync()
        assert report.objects == 2
        assert sorted(_files(mirror.root)) == ["lock", "manifest.json", "repo/m/1/model.py",
                                               "repo/m/config.pbtxt"]  # fmt: skip
        assert not (tmp_path / "cache" / "escape.py").exists()
        warned = [r.getMessage() for r in caplog.records if r.name.startswith("fnserve")]
        assert len(warned) == 2
        assert "object 'repo/../escape.py' cannot be a local file; skipped" in warned[0]

    def test_a_sibling_prefix_is_not_part_of_the_repository(
        self, s3: LoopbackS3, store: S3Store, tmp_path: Path
    ) -> None:
        s3.put(store.bucket, "repository-old/m/config.pbtxt", "other")
        mirror = _mirror(store, tmp_path, "repo")
        assert mirror.sync().objects == 2

    def test_a_url_naming_one_object_copies_that_file(
        self, s3: LoopbackS3, store: S3Store, tmp_path: Path
    ) -> None:
        s3.put(store.bucket, "functions/double.py", "def double(): ...")
        mirror = _mirror(store, tmp_path, "functions/double.py")
        mirror.sync()
        assert mirror.path.is_file()
        assert mirror.path.name == "double.py"

    def test_the_bucket_root_is_named_after_the_bucket(
        self, store: S3Store, tmp_path: Path
    ) -> None:
        mirror = _mirror(store, tmp_path, "")
        mirror.sync()
        assert mirror.path.name == store.bucket
        assert (mirror.path / "repo/m/1/model.py").read_text() == "v1"


class _FailingStore:
    """The real store, but downloads of `failing` keys fail (as a dropped connection would)."""

    def __init__(self, store: S3Store) -> None:
        self.store = store
        self.failing: set[str] = set()

    def list_objects(self, prefix: str) -> list[RemoteObject]:
        return self.store.list_objects(prefix)

    def download(self, key: str, target: Path) -> RemoteObject:
        if key in self.failing:
            target.write_bytes(b"half")
            raise RepositoryError(f"downloading '{key}': connection reset")
        return self.store.download(key, target)


def test_a_failed_sync_reports_what_it_wrote_next_time(
    s3: LoopbackS3, store: S3Store, tmp_path: Path
) -> None:
    flaky = _FailingStore(store)
    mirror = RepositoryMirror(RemoteUrl("s3", store.bucket, "repo"), flaky, tmp_path / "cache")
    mirror.sync()
    s3.put(store.bucket, "repo/m/2/model.py", "v2")
    s3.put(store.bucket, "repo/m/config.pbtxt", "edited")
    flaky.failing = {"repo/m/2/model.py"}
    with pytest.raises(RepositoryError, match="connection reset"):
        mirror.sync()
    assert not (mirror.path / "m/2/model.py").exists()  # never half there
    assert list((mirror.root / ".partial").iterdir()) == []
    flaky.failing = set()
    report = mirror.sync()
    assert report.changed == {mirror.path / "m/2/model.py", mirror.path / "m/config.pbtxt"}
    assert report.downloaded_bytes == 2  # the config landed the first time


class TestStoreErrors:
    def test_a_missing_bucket(self, store: S3Store) -> None:
        with pytest.raises(RepositoryError, match="the bucket 'nope' does not exist"):
            S3Store("nope").list_objects("")

    def test_an_explicit_endpoint_wins_over_the_environment(
        self, s3: LoopbackS3, store: S3Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
        assert [o.key for o in S3Store(store.bucket, s3.endpoint).list_objects("repo/m/1")] == [
            "repo/m/1/model.py"
        ]
        with pytest.raises(RepositoryError, match="cannot reach http://127.0.0.1:9"):
            S3Store(store.bucket).list_objects("")

    def test_the_credentials_come_from_the_environment(
        self, s3: LoopbackS3, store: S3Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIANOTAKEY")
        s3.enforce_auth(True)
        try:
            with pytest.raises(RepositoryError, match=r"access denied \(InvalidAccessKeyId\)"):
                S3Store(store.bucket).list_objects("")
        finally:
            s3.enforce_auth(False)


class TestUrls:
    def test_parse(self) -> None:
        assert RemoteUrl.parse("s3://bucket/a/b/") == RemoteUrl("s3", "bucket", "a/b")
        assert RemoteUrl.parse("S3://bucket") == RemoteUrl("s3", "bucket", "")
        assert str(RemoteUrl.parse("s3://bucket/a/")) == "s3://bucket/a"

    @pytest.mark.parametrize(
        ("url", "error"),
        [("gs://bucket/x", "is not supported; expected s3://bucket/prefix"),
         ("s3:///x", "names no bucket")],
    )  # fmt: skip
    def test_parse_refuses(self, url: str, error: str) -> None:
        with pytest.raises(RepositoryError, match=error):
            RemoteUrl.parse(url)

    def test_is_remote(self) -> None:
        assert is_remote("s3://b/p")
        assert not is_remote("models/s3:/x")
        assert not is_remote(Path("s3://b"))


class TestPoller:
    async def test_a_poll_hands_over_what_changed(
        self, s3: LoopbackS3, store: S3Store, tmp_path: Path
    ) -> None:
        mirror = _mirror(store, tmp_path)
        await asyncio.to_thread(mirror.sync)
        batches: list[frozenset[Path]] = []

        async def record(batch: frozenset[Path]) -> None:
            batches.append(batch)

        poller = MirrorPoller([mirror], record, interval_s=60)
        await poller.poll()
        assert batches == []  # nothing changed: no reload
        await asyncio.to_thread(s3.put, store.bucket, "repo/m/2/model.py", "v2")
        await poller.poll()
        assert batches == [frozenset({mirror.path / "m/2/model.py"})]

    async def test_a_failed_poll_is_logged_and_the_next_one_catches_up(
        self, s3: LoopbackS3, store: S3Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        flaky = _FailingStore(store)
        mirror = RepositoryMirror(RemoteUrl("s3", store.bucket, "repo"), flaky, tmp_path / "c")
        await asyncio.to_thread(mirror.sync)
        batches: list[frozenset[Path]] = []

        async def record(batch: frozenset[Path]) -> None:
            batches.append(batch)

        poller = MirrorPoller([mirror], record, interval_s=60)
        await asyncio.to_thread(s3.put, store.bucket, "repo/m/2/model.py", "v2")
        flaky.failing = {"repo/m/2/model.py"}
        await poller.poll()
        assert batches == []
        assert "failed (the loaded models keep serving)" in caplog.text
        assert "connection reset" in caplog.text
        flaky.failing = set()
        await poller.poll()
        assert batches == [frozenset({mirror.path / "m/2/model.py"})]

    async def test_it_polls_until_closed(
        self, s3: LoopbackS3, store: S3Store, tmp_path: Path
    ) -> None:
        mirror = _mirror(store, tmp_path)
        await asyncio.to_thread(mirror.sync)
        arrived = asyncio.Event()

        async def record(batch: frozenset[Path]) -> None:
            arrived.set()

        poller = MirrorPoller([mirror], record, interval_s=0.05)
        poller.start()
        try:
            await asyncio.to_thread(s3.put, store.bucket, "repo/m/2/model.py", "v2")
            async with asyncio.timeout(20):
                await arrived.wait()
        finally:
            await poller.aclose()
        assert (mirror.path / "m/2/model.py").read_text() == "v2"


def test_a_scan_serves_the_cached_copy_when_the_bucket_is_out_of_reach(
    s3: LoopbackS3, store: S3Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = RemoteUrl("s3", store.bucket, "repo")
    RepositoryMirror(url, store, tmp_path / "cache").sync()
    unreachable = RepositoryMirror(
        url, S3Store(store.bucket, "http://127.0.0.1:9"), tmp_path / "cache"
    )
    s3.put(store.bucket, "repo/m/config.pbtxt", "not read: the bucket is out of reach")
    found = ModelSource([unreachable.path], synced_on_scan=[unreachable]).scan()
    assert found.model_dirs == [unreachable.path / "m"]
    assert (unreachable.path / "m/config.pbtxt").read_text() == 'backend: "python"'
    assert "cannot reach http://127.0.0.1:9" in caplog.text
    assert "serving its cached copy" in caplog.text
