"""Imports point down only (DESIGN.md's layering), checked on the source of every module.

    cli, bench, client the command line; bench and client (the jobs client) talk to servers
                       over the wire
    server/            the frontends
    deploy/            deployments: archives, the state directory, validation, the service
    runtime.py         the in-process facade
    repository/        model handles, loaded models, discovery
    scheduling/        schedulers, instance pools, supervision
    backends/          what runs one batch
    everything else    config, protocol (generated messages), types, errors, tensors, ...

Nothing below `server/` may import a frontend library; `bench/` and `client/` may not import
the core.
"""

from __future__ import annotations

import ast
import gc
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "runtime" / "fnserve"
FRONTEND_LIBRARIES = ("starlette", "hypercorn", "uvicorn", "grpclib")
RANK = {"cli": 0, "bench": 0, "client": 0, "server": 1, "deploy": 2, "jobs": 2, "runtime": 3,
        "repository": 4, "scheduling": 5, "backends": 6}  # fmt: skip
BOTTOM = 7  # config, protocol, types, errors, tensors, model, stats, limits, user_modules ...
ENTRY_POINTS = {"__main__.py"}  # `python -m fnserve` runs the cli
# bench is a load generator and client a library for remote callers: they may use the wire
# vocabulary (tensors, protocol, the job records), never the server's insides.
BENCH_MAY_NOT_IMPORT = ("fnserve.server", "fnserve.runtime", "fnserve.repository",
                        "fnserve.scheduling", "fnserve.backends", "fnserve.cli")  # fmt: skip
CLIENT_MAY_NOT_IMPORT = (*BENCH_MAY_NOT_IMPORT, "fnserve.deploy", "fnserve.jobs.service",
                         "fnserve.jobs.worker", "fnserve.jobs.store")  # fmt: skip


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


def _within(name: str, modules: tuple[str, ...]) -> bool:
    """Whether module `name` is one of `modules` or inside one ("fnserve.client" is not in
    "fnserve.cli")."""
    return any(name == m or name.startswith(m + ".") for m in modules)


def _part(path: Path) -> str:
    """The top-level part of the package a file belongs to ("server", "runtime", "types")."""
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def _rank(part: str) -> int:
    return RANK.get(part, BOTTOM)


SOURCES = sorted(
    p for p in PACKAGE.rglob("*.py") if p.name not in ENTRY_POINTS or p.parent != PACKAGE
)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down(path: Path) -> None:
    own = _rank(_part(path))
    upward = []
    for name in _imports(path):
        parts = name.split(".")
        if parts[0] != "fnserve" or len(parts) < 2 or parts[1] == _part(path):
            continue
        if _rank(parts[1]) < own:
            upward.append(name)
    assert not upward, f"{path.relative_to(PACKAGE)} imports upward: {sorted(upward)}"


@pytest.mark.parametrize(
    "path",
    [p for p in SOURCES if _rank(_part(p)) > RANK["server"]],
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_core_does_not_import_frontend_libraries(path: Path) -> None:
    bad = {n for n in _imports(path) if n.split(".")[0] in FRONTEND_LIBRARIES}
    assert not bad, f"{path.relative_to(PACKAGE)} imports {sorted(bad)}"


@pytest.mark.parametrize("path", sorted((PACKAGE / "bench").rglob("*.py")), ids=lambda p: p.name)
def test_bench_is_a_client_of_the_wire_only(path: Path) -> None:
    bad = {n for n in _imports(path) if _within(n, BENCH_MAY_NOT_IMPORT)}
    assert not bad, f"bench/{path.name} imports {sorted(bad)}"


@pytest.mark.parametrize("path", sorted((PACKAGE / "client").rglob("*.py")), ids=lambda p: p.name)
def test_client_is_a_client_of_the_wire_only(path: Path) -> None:
    bad = {n for n in _imports(path) if _within(n, CLIENT_MAY_NOT_IMPORT)}
    assert not bad, f"client/{path.name} imports {sorted(bad)}"


def test_the_rules_see_every_layer() -> None:
    parts = {_part(p) for p in SOURCES}
    assert set(RANK) <= parts  # a renamed layer must not silently escape the check
    assert {"config", "protocol", "types"} <= parts
