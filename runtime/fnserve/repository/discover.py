"""Find `@model` definitions in Python files and folders given on the command line."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fnserve.errors import RepositoryError
from fnserve.model import ModelDefinition


def discover(paths: Iterable[str | Path]) -> list[ModelDefinition[Any, Any]]:
    """Import every `.py` file under `paths` and collect the models they define.

    Raises:
        RepositoryError: a path does not exist, or a file fails to import.
    """
    found: dict[int, ModelDefinition[Any, Any]] = {}
    for path in paths:
        for file in _python_files(Path(path)):
            for value in vars(_import(file)).values():
                if isinstance(value, ModelDefinition):
                    found[id(value)] = value
    return list(found.values())


def _python_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if path.is_dir():
        return sorted(p for p in path.rglob("*.py") if not p.name.startswith("_"))
    raise RepositoryError(f"model path '{path}' does not exist")


def _import(file: Path) -> Any:
    # A stable, unique module name per file, so two folders may both hold `models.py`.
    digest = hashlib.sha1(str(file.resolve()).encode()).hexdigest()[:8]
    name = f"fnserve_user.{file.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise RepositoryError(f"cannot import '{file}'")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise RepositoryError(f"importing '{file}' failed: {type(exc).__name__}: {exc}") from exc
    return module
