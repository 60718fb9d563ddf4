"""Imports point down: nothing below the server layer may import a frontend library."""

from __future__ import annotations

import ast
import gc
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "runtime" / "fnserve"
FORBIDDEN = ("starlette", "hypercorn", "uvicorn", "grpclib", "fnserve.server", "fnserve.cli")
CORE = [
    "scheduling",
    "repository",
    "backends",
    "config",
    "types.py",
    "errors.py",
    "tensors.py",
    "model.py",
    "stats.py",
    "runtime.py",
]


def _imports(path: Path) -> set[str]:
    # Earlier tests may leave garbage whose finalizer warns (an unclosed server transport);
    # CPython 3.11 fails ast.parse with "AST constructor recursion depth mismatch" when the
    # collector runs such a finalizer in the middle of it, so collect it first.
    gc.collect()
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("part", CORE)
def test_core_does_not_import_frontends(part: str) -> None:
    target = PACKAGE / part
    files = [target] if target.is_file() else sorted(target.rglob("*.py"))
    assert files
    for file in files:
        bad = {n for n in _imports(file) if n.startswith(FORBIDDEN)}
        assert not bad, f"{file.relative_to(PACKAGE)} imports {sorted(bad)}"
