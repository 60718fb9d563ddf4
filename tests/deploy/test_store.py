"""The state directory's records: versions numbered in order, the current one, atomic writes,
unrecorded content discarded, and what a restart serves."""

from __future__ import annotations

from pathlib import Path

import pytest

from fnserve.deploy.store import Deployment, DeploymentStore, check_name
from fnserve.errors import InvalidInputError, ModelNotFoundError, RepositoryError

MODELS = (("plus", "1"),)


def test_versions_are_numbered_and_the_last_serves(tmp_path: Path) -> None:
    store = DeploymentStore(tmp_path)
    assert store.load("plus") == Deployment("plus")
    store.add("plus", "a" * 64, MODELS)
    deployment = store.add("plus", "b" * 64, MODELS)
    assert [v.version for v in deployment.versions] == [1, 2]
    assert deployment.current == 2
    assert store.load("plus") == deployment  # read back from disk
    assert not list(tmp_path.rglob("*.partial"))


def test_serving_folders_follow_the_current_version(tmp_path: Path) -> None:
    store = DeploymentStore(tmp_path)
    first = store.add("plus", "a" * 64, MODELS)
    store.folder("plus", "a" * 64).mkdir(parents=True)
    store.add("other", "c" * 64, (("other", "1"),))  # its folder is gone: not served
    assert store.serving_folders() == [store.folder("plus", "a" * 64)]
    store.save(Deployment("plus", 0, first.versions))
    assert store.serving_folders() == []


def test_discard_keeps_recorded_content(tmp_path: Path) -> None:
    store = DeploymentStore(tmp_path)
    store.add("plus", "a" * 64, MODELS)
    for digest in ("a" * 64, "b" * 64):
        store.folder("plus", digest).mkdir(parents=True)
        store.discard("plus", digest)
    assert store.folder("plus", "a" * 64).is_dir()
    assert not store.folder("plus", "b" * 64).exists()
    store.remove("plus")
    assert store.all() == []


def test_unknown_version_names_the_known_ones(tmp_path: Path) -> None:
    deployment = DeploymentStore(tmp_path).add("plus", "a" * 64, MODELS)
    with pytest.raises(ModelNotFoundError, match="no version 7; versions: 1"):
        deployment.get(7)


@pytest.mark.parametrize("name", ["", "../x", "a/b", ".hidden", "x" * 65, "sp ace"])
def test_bad_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidInputError, match="deployment name"):
        check_name(name)


@pytest.mark.parametrize("text", ["{not json", '{"current": 1}', '{"current": 1, "versions": 3}'])
def test_an_unreadable_record_names_itself_and_hides_no_other(tmp_path: Path, text: str) -> None:
    store = DeploymentStore(tmp_path)
    store.add("good", "a" * 64, MODELS)
    store.folder("good", "a" * 64).mkdir(parents=True)
    (store.root / "edited").mkdir()
    (store.root / "edited" / "deployment.json").write_text(text)
    with pytest.raises(RepositoryError, match=r"deployment 'edited' .*deployment\.json"):
        store.load("edited")
    assert [d.name for d in store.all()] == ["good"]
    assert store.serving_folders() == [store.folder("good", "a" * 64)]
