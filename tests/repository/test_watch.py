"""The watcher alone: which changes it reports, in which batches, and that none is lost."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from watchfiles import Change

from fnserve.config.server import WatchSettings
from fnserve.errors import StartupError
from fnserve.repository.watch import ChangeFilter, RepositoryWatcher

NATIVE = WatchSettings(polling=False, poll_interval_s=15.0)
DEADLINE_S = 20.0


class Batches:
    """Records every batch the watcher hands over; a test waits for the one it expects."""

    def __init__(self) -> None:
        self.batches: list[frozenset[Path]] = []
        self.hold: asyncio.Event | None = None  # set: the callback waits for it
        self._arrived = asyncio.Event()

    async def __call__(self, batch: frozenset[Path]) -> None:
        self.batches.append(batch)
        self._arrived.set()
        if self.hold is not None:
            await self.hold.wait()

    def seen(self) -> set[Path]:
        return set().union(*self.batches)

    async def wait_for(self, path: Path) -> None:
        """Until a batch holds `path` (absolute, as the watcher reports it)."""
        async with asyncio.timeout(DEADLINE_S):
            while path not in self.seen():
                self._arrived.clear()
                await self._arrived.wait()


async def _watching(
    paths: list[Path], settings: WatchSettings = NATIVE
) -> tuple[RepositoryWatcher, Batches]:
    batches = Batches()
    watcher = RepositoryWatcher(paths, batches, settings)
    await watcher.start()
    return watcher, batches


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder to watch, by its absolute path (as the watcher reports changes)."""
    return tmp_path.resolve()


class TestChangeFilter:
    def test_served_files_and_files_in_served_folders_pass(self, tmp_path: Path) -> None:
        single = tmp_path / "single.py"
        single.write_text("")
        folder = tmp_path / "models"
        folder.mkdir()
        check = ChangeFilter([single, folder])
        assert check(Change.modified, str(single))
        assert check(Change.added, str(folder / "new.py"))
        assert check(Change.added, str(folder / "scale" / "2" / "model.onnx"))
        assert check(Change.deleted, str(folder))
        assert not check(Change.modified, str(tmp_path / "sibling.py"))

    @pytest.mark.parametrize(
        "name",
        [".plus.py.swp", ".plus.py.swx", "plus.py~", "4913", "#plus.py#", ".#plus.py",
         "plus.py.tmp", "plus.cpython-311.pyc", "model.py___jb_tmp___", ".~lock.x#",
         "__pycache__/plus.cpython-311.pyc", ".cache/encoder.onnx", ".git/index",
         "sub/.cache/deep/file.py"],
    )  # fmt: skip
    def test_editor_files_and_caches_are_ignored(self, name: str, tmp_path: Path) -> None:
        assert not ChangeFilter([tmp_path])(Change.added, str(tmp_path / name))

    def test_ignored_names_count_only_below_the_served_folder(self, tmp_path: Path) -> None:
        served = tmp_path / ".cache" / "models"  # a repository kept under a cache folder
        served.mkdir(parents=True)
        assert ChangeFilter([served])(Change.modified, str(served / "plus.py"))


async def test_a_change_right_after_start_is_seen(folder: Path) -> None:
    watcher, batches = await _watching([folder])
    (folder / "plus.py").write_text("x = 1")
    await batches.wait_for(folder / "plus.py")
    await watcher.aclose()


async def test_ignored_files_never_make_a_batch(folder: Path) -> None:
    (folder / "__pycache__").mkdir()
    watcher, batches = await _watching([folder])
    (folder / ".plus.py.swp").write_text("swap")
    (folder / "plus.py~").write_text("backup")
    (folder / "__pycache__" / "plus.cpython-311.pyc").write_bytes(b"\0")
    (folder / "plus.py").write_text("x = 1")  # after them: they would be seen by now
    await batches.wait_for(folder / "plus.py")
    await watcher.aclose()
    assert batches.seen() == {folder / "plus.py"}


async def test_a_burst_of_saves_is_grouped(folder: Path) -> None:
    watcher, batches = await _watching([folder])
    for n in range(5):
        (folder / f"m{n}.py").write_text(f"x = {n}")
    await batches.wait_for(folder / "m4.py")
    await watcher.aclose()
    assert len(batches.seen()) == 5
    assert len(batches.batches) < 5  # one, unless this thread stalled past STEP_MS mid-burst


async def test_changes_during_a_reload_make_the_next_batch(folder: Path) -> None:
    watcher, batches = await _watching([folder])
    batches.hold = asyncio.Event()
    (folder / "first.py").write_text("x = 1")
    await batches.wait_for(folder / "first.py")  # the callback now holds
    (folder / "second.py").write_text("x = 2")
    await asyncio.sleep(0.3)  # give the change time to arrive while the first batch applies
    assert len(batches.batches) == 1
    batches.hold.set()
    await batches.wait_for(folder / "second.py")
    await watcher.aclose()
    assert [sorted(p.name for p in b) for b in batches.batches] == [["first.py"], ["second.py"]]


async def test_a_failing_callback_does_not_stop_the_watching(
    folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[frozenset[Path]] = []
    first, second = asyncio.Event(), asyncio.Event()

    async def flaky(batch: frozenset[Path]) -> None:
        calls.append(batch)
        if len(calls) == 1:
            first.set()
            raise RuntimeError("the first reload broke")
        second.set()

    watcher = RepositoryWatcher([folder], flaky, NATIVE)
    await watcher.start()
    (folder / "a.py").write_text("x = 1")
    async with asyncio.timeout(DEADLINE_S):
        await first.wait()
        (folder / "b.py").write_text("x = 2")
        await second.wait()
    await watcher.aclose()
    assert "the first reload broke" in caplog.text


async def test_a_single_file_is_watched_through_its_folder(folder: Path) -> None:
    served = folder / "plus.py"
    served.write_text("x = 1")
    watcher, batches = await _watching([served])
    (folder / "sibling.py").write_text("not served")
    staged = folder / "staged"
    staged.write_text("x = 2")
    staged.replace(served)  # an atomic save: the watched file is a new one now
    await batches.wait_for(served)
    batches.batches.clear()
    served.write_text("x = 3")  # still watched after the rename
    await batches.wait_for(served)
    await watcher.aclose()
    assert batches.seen() == {served}


async def test_polling_sees_changes(folder: Path) -> None:
    watcher, batches = await _watching([folder], WatchSettings(True, 0.1))
    assert "polling every 0.1 s" in watcher.describe()
    (folder / "plus.py").write_text("x = 1")
    await batches.wait_for(folder / "plus.py")
    await watcher.aclose()


async def test_polling_sees_a_second_save_within_the_same_second(folder: Path) -> None:
    """The poller compares file times to the second; the batch waits for that second to end,
    so the files it leads to reading hold the later save too."""
    file = folder / "plus.py"
    file.write_text("x = 0")
    read: list[str] = []
    saw_last = asyncio.Event()

    async def on_change(batch: frozenset[Path]) -> None:
        read.append(await asyncio.to_thread(file.read_text))
        if read[-1] == "x = 2":
            saw_last.set()

    await asyncio.sleep(1.05 - time.time() % 1)  # a fresh second, later than the first write
    watcher = RepositoryWatcher([folder], on_change, WatchSettings(True, 0.05))
    await watcher.start()
    await asyncio.to_thread(file.write_text, "x = 1")
    await asyncio.sleep(0.3)  # polled by now: the poller holds this second as the file's time
    await asyncio.to_thread(file.write_text, "x = 2")  # the same second: never reported
    async with asyncio.timeout(DEADLINE_S):
        await saw_last.wait()
    await watcher.aclose()
    assert read[0] == "x = 2"  # the batch of the first save already read the second


async def test_a_path_that_cannot_be_watched_is_a_startup_error(folder: Path) -> None:
    watcher = RepositoryWatcher([folder / "gone" / "plus.py"], Batches(), NATIVE)
    with pytest.raises(StartupError, match="cannot watch the model paths"):
        await watcher.start()
