"""Find `@model` definitions in Python files and folders given on the command line.

Files are imported by `fnserve.user_modules` (unique module names, import failures with the
file and line).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from fnserve.backends.base import ModelSpec
from fnserve.errors import RepositoryError
from fnserve.repository.model_dirs import is_model_dir
from fnserve.user_modules import (
    Definition,
    ImportFailure,
    ModelImportError,
    declared_models,
    definitions_in,
    import_file,
    module_name,
)

__all__ = [
    "Definition",
    "Discovery",
    "ModelPaths",
    "ImportFailure",
    "ModelImportError",
    "declared_models",
    "definitions_in",
    "discover",
    "import_file",
    "module_name",
    "model_paths",
]


@dataclass
class Discovery:
    """What a scan of the model paths found."""

    definitions: list[ModelSpec] = field(default_factory=list)  # @model and model directories
    failures: list[ImportFailure] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)  # Python files looked at
    ignored: list[Path] = field(default_factory=list)  # other files in the folders
    model_dirs: list[Path] = field(default_factory=list)  # Triton model directories


def discover(paths: Iterable[str | Path]) -> list[Definition]:
    """Import every `.py` file under `paths` and collect the `@model`s they define.

    Raises:
        RepositoryError: a path does not exist, or a file fails to import (naming the file
            and the line).
    """
    found: list[Definition] = []
    for file in model_paths(paths).files:
        found += definitions_in(import_file(file))
    return found


@dataclass
class ModelPaths:
    """What the paths given to `fnserve serve` hold."""

    files: list[Path] = field(default_factory=list)  # Python files that may hold @models
    model_dirs: list[Path] = field(default_factory=list)  # Triton model directories
    ignored: list[Path] = field(default_factory=list)  # everything else


def model_paths(paths: Iterable[str | Path]) -> ModelPaths:
    """Python files (files starting with `_`, and hidden files and folders such as `.git`,
    `.venv` or the deployments' `.fnserve-state`, skipped in folders) and Triton model
    directories under `paths`: a path may be a file, a model directory, or a folder holding
    both kinds (a Triton repository's model directories are its direct children). Files inside model
    directories belong to them (a Python backend's `model.py` is not an @model file)."""
    found = ModelPaths()
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            found.files.append(path)
        elif is_model_dir(path):
            found.model_dirs.append(path)
        elif path.is_dir():
            dirs = sorted(d for d in path.iterdir() if is_model_dir(d) and not _hidden(d, path))
            found.model_dirs += dirs
            everything = sorted(
                p
                for p in path.rglob("*")
                if p.is_file() and not _inside(p, dirs) and not _hidden(p, path)
            )
            found.files += [
                p for p in everything if p.suffix == ".py" and not p.name.startswith("_")
            ]
            found.ignored += [p for p in everything if p.suffix not in (".py", ".pyc")]
        else:
            raise RepositoryError(f"model path '{path}' does not exist")
    return found


def _inside(path: Path, dirs: list[Path]) -> bool:
    return any(path.is_relative_to(d) for d in dirs)


def _hidden(path: Path, folder: Path) -> bool:
    return any(part.startswith(".") for part in path.relative_to(folder).parts)
