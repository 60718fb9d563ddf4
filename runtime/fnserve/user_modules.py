"""Import user model files under names unique to their path and content.

Each file is imported as its own module, `fnserve_user.<stem>_<hash of its path>_<hash of its
bytes>`: two folders may both hold `models.py`, and an edited file imports under a new name, so
it can never come back as the module cached for its old content. A file that fails to import
is reported with its path and the line that failed, plus the models its source declares (read
from its syntax, so the index can name them even though they never ran).

Below the repository layer because worker processes import model files the same way.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from fnserve.ensemble import EnsembleDefinition
from fnserve.errors import RepositoryError
from fnserve.model import ModelDefinition

Definition = ModelDefinition[Any, Any] | EnsembleDefinition


@dataclass(frozen=True)
class ImportFailure:
    """A file that could not be imported.

    Args:
        file: the file.
        reason: one line: "importing 'FILE' failed at line N: ErrorType: message".
        models: (name, version) of the models its source declares, as far as they are known.
    """

    file: Path
    reason: str
    models: tuple[tuple[str, int], ...]


class ModelImportError(RepositoryError):
    """A file failed to import; `failure` says which, where and why."""

    def __init__(self, failure: ImportFailure) -> None:
        super().__init__(failure.reason)
        self.failure = failure


def definitions_in(module: ModuleType) -> list[Definition]:
    """The `@model` definitions and ensembles a module holds, each once (an ensemble's steps
    too, even when no module-level name holds them)."""
    found: dict[int, Definition] = {}
    for value in vars(module).values():
        if isinstance(value, EnsembleDefinition):
            for step in value.steps:
                found[id(step)] = step
        if isinstance(value, ModelDefinition | EnsembleDefinition):
            found[id(value)] = value
    return list(found.values())


def module_name(file: Path, source: bytes) -> str:
    """A module name unique to this file *and* this content.

    Two folders may both hold `models.py`, and an edited file imports under a new name: a
    changed file can never come back as the module cached for its old content.
    """
    where = hashlib.sha1(str(file.resolve()).encode()).hexdigest()[:8]
    what = hashlib.sha1(source).hexdigest()[:8]
    return f"fnserve_user.{file.stem}_{where}_{what}"


_current: dict[Path, str] = {}  # each file's module in sys.modules (the last good import)


def import_file(file: Path, source: bytes | None = None, *, package: bool = False) -> ModuleType:
    """Import `file` (whose bytes are `source`, when the caller read them already); the same
    content gives the same module, a changed one a new module.

    With `package`, the file's folder is its package (a package of its own, named as the
    module would be), so `from .helpers import x` finds `helpers.py` beside it.

    The module of the file's previous content leaves `sys.modules` once the new one imported
    (objects still using it, such as a model draining, keep it alive until they are done).

    Raises:
        ModelImportError: the file raised while importing (a syntax error, a declaration mistake).
    """
    if source is None:
        try:
            source = file.read_bytes()
        except OSError as exc:
            raise RepositoryError(f"cannot read '{file}': {exc}") from exc
    name = module_name(file, source)
    if package:
        parent = name.replace(".", "_")
        name = f"{parent}.{file.stem}"
    if name in sys.modules:
        return sys.modules[name]
    if package:
        folder = ModuleType(parent)
        folder.__path__ = [str(file.parent)]
        sys.modules[parent] = folder
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None:
        raise RepositoryError(f"cannot import '{file}'")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # during execution, as a normal import (dataclasses need it)
    try:
        # Compiled from the bytes that named the module, not read again (the file may have
        # changed since).
        exec(compile(source, str(file), "exec"), module.__dict__)
    except Exception as exc:
        _forget(name)
        reason = f"importing '{file}' failed{_where(file, exc)}: {type(exc).__name__}: {exc}"
        raise ModelImportError(ImportFailure(file, reason, declared_models(file))) from exc
    key = file.resolve()
    previous = _current.get(key)
    _current[key] = name
    if previous is not None and previous != name:
        _forget(previous)
    return module


def _forget(name: str) -> None:
    """Take module `name` out of `sys.modules`, with its package and the package's other
    modules when it was imported as a package's (`import_file(..., package=True)`)."""
    sys.modules.pop(name, None)
    parent, _, _ = name.rpartition(".")
    if parent and parent != "fnserve_user":
        for other in [n for n in sys.modules if n == parent or n.startswith(parent + ".")]:
            sys.modules.pop(other, None)


def _where(file: Path, exc: BaseException) -> str:
    """ " at line N": the last line of `file` the error went through (or the syntax error's)."""
    if isinstance(exc, SyntaxError) and exc.lineno is not None:
        return f" at line {exc.lineno}"
    target = str(file.resolve())
    lines = [
        frame.lineno
        for frame in traceback.extract_tb(exc.__traceback__)
        if frame.filename and Path(frame.filename).resolve() == Path(target)
    ]
    return f" at line {lines[-1]}" if lines else ""


def declared_models(file: Path) -> tuple[tuple[str, int], ...]:
    """(name, version) of every function or class decorated with `model(...)` in the source,
    read from its syntax without running it (literal `name=` and `version=` only)."""
    try:
        tree = ast.parse(file.read_bytes(), str(file))
    except (SyntaxError, ValueError, OSError):
        return ()
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for decorator in node.decorator_list:
            call = decorator if isinstance(decorator, ast.Call) else None
            target = call.func if call else decorator
            if _called(target) != "model":
                continue
            keywords = {k.arg: k.value for k in call.keywords} if call else {}
            name, version = keywords.get("name"), keywords.get("version")
            found.append(
                (
                    _literal(name, str) or node.name,
                    _literal(version, int) or 1,
                )
            )
    return tuple(found)


def _called(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _literal(node: ast.expr | None, kind: type[Any]) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, kind):
        return node.value
    return None
