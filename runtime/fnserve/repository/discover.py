"""Find `@model` definitions in Python files and folders given on the command line.

Files are imported by `fnserve.user_modules` (unique module names, import failures with the
file and line).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from fnserve.errors import RepositoryError
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
    "ImportFailure",
    "ModelImportError",
    "declared_models",
    "definitions_in",
    "discover",
    "import_file",
    "module_name",
    "python_files",
]


@dataclass
class Discovery:
    """What a scan of the model paths found."""

    definitions: list[Definition] = field(default_factory=list)
    failures: list[ImportFailure] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)  # Python files looked at
    ignored: list[Path] = field(default_factory=list)  # other files in the folders


def discover(paths: Iterable[str | Path]) -> list[Definition]:
    """Import every `.py` file under `paths` and collect the models they define.

    Raises:
        RepositoryError: a path does not exist, or a file fails to import (naming the file
            and the line).
    """
    found: list[Definition] = []
    for file in python_files(paths)[0]:
        found += definitions_in(import_file(file))
    return found


def python_files(paths: Iterable[str | Path]) -> tuple[list[Path], list[Path]]:
    """The Python files under `paths` (files starting with `_` skipped in folders), and the
    other files found in the folders (to say what was ignored when no model is found)."""
    files: list[Path] = []
    ignored: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            everything = sorted(p for p in path.rglob("*") if p.is_file())
            files += [p for p in everything if p.suffix == ".py" and not p.name.startswith("_")]
            ignored += [p for p in everything if p.suffix not in (".py", ".pyc")]
        else:
            raise RepositoryError(f"model path '{path}' does not exist")
    return files, ignored
