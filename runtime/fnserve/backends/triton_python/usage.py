"""What a Triton `model.py` uses of pb_utils that fnserve does not provide, found at load.

A model written for Triton may use parts of its python_backend API that fnserve lacks
(decoupled response senders, custom metrics, model control from a model, response
parameters). Found only when `execute` reaches them, they would fail requests after the model
turned READY; read from the file's syntax instead, they fail the load, naming each use and its
line. Only what the syntax shows for certain is refused: `pb_utils.<name>` for a name the
module does not define, `from triton_python_backend_utils import <name>`, the request methods
fnserve lacks, `exec(decoupled=True)` and `InferenceResponse(parameters=...)`; a use inside a
`try` block is left alone (the model has a way around it).
"""

from __future__ import annotations

import ast
from pathlib import Path

from fnserve.backends.triton_python import pb_utils
from fnserve.errors import RepositoryError

MODULE = "triton_python_backend_utils"
# Methods of Triton's request objects that fnserve does not provide (or cannot honour).
_METHODS = {
    "get_response_sender": "decoupled response senders are not supported",
    "set_release_flags": "rescheduling requests is not supported",
}
_PROVIDED = frozenset(name for name in dir(pb_utils) if not name.startswith("_"))


def check_usage(where: str, path: Path, source: str) -> None:
    """Refuse a model.py that uses what fnserve's pb_utils does not provide (`where` names
    the model in the message).

    Raises:
        RepositoryError: naming each such use with its line (a file that does not parse is
            left to the import, which names the syntax error).
    """
    try:
        tree = ast.parse(source, str(path))
    except SyntaxError:
        return
    aliases = {MODULE}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases |= {a.asname or a.name for a in node.names if a.name == MODULE}
    guarded = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.Try)
        for statement in node.body
        for inner in ast.walk(statement)
    }
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        if id(node) not in guarded:
            for use in _uses(node, aliases):
                found.setdefault(use, getattr(node, "lineno", 0))
    if found:
        listed = "; ".join(f"{use} (line {line})" for use, line in sorted(found.items()))
        raise RepositoryError(
            f"{where}: {path.name} uses what fnserve's triton_python_backend_utils does not "
            f"provide: {listed}"
        )


def _uses(node: ast.AST, aliases: set[str]) -> list[str]:
    """The unprovided uses `node` itself makes."""
    if isinstance(node, ast.ImportFrom) and node.module == MODULE:
        return [f"pb_utils.{a.name}" for a in node.names if a.name not in _PROVIDED | {"*"}]
    if isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id in aliases:
            return [] if node.attr in _PROVIDED else [f"pb_utils.{node.attr}"]
        if node.attr in _METHODS:
            return [f"{node.attr}() ({_METHODS[node.attr]})"]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        keywords = {k.arg: k.value for k in node.keywords}
        decoupled = keywords.get("decoupled")
        if node.func.attr in ("exec", "async_exec") and _is_true(decoupled):
            return [f"{node.func.attr}(decoupled=True) (decoupled models are not supported)"]
        if node.func.attr == "InferenceResponse" and "parameters" in keywords:
            return ["InferenceResponse(parameters=...) (response parameters are not sent)"]
    return []


def _is_true(value: ast.expr | None) -> bool:
    return isinstance(value, ast.Constant) and value.value is True
