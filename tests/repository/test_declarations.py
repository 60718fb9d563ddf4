"""Declaration mistakes give one clear line naming the user's file and line (and, for outputs,
what the model returned and what it declares)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fnserve import Tensor, model
from fnserve.errors import ModelExecutionError
from fnserve.repository.discover import ModelImportError, discover
from fnserve.runtime import Runtime
from fnserve.types import InferInput, InferRequest

HEADER = "import numpy as np\nfrom fnserve import Tensor, model\n\n"


def _import_error(tmp_path: Path, source: str) -> str:
    file = tmp_path / "mistake.py"
    file.write_text(HEADER + source)
    with pytest.raises(ModelImportError) as caught:
        discover([file])
    message = caught.value.message
    assert "\n" not in message
    assert message.startswith(f"importing '{file}' failed at line ")
    return message


def test_bare_model_decorator(tmp_path: Path) -> None:
    message = _import_error(tmp_path, "@model\ndef f(X):\n    return X\n")
    assert "failed at line 4" in message
    assert "@model needs its declaration in parentheses above 'f'" in message
    assert "positional" not in message


def test_dims_given_as_an_int(tmp_path: Path) -> None:
    source = (
        '@model(inputs=[Tensor("X", "FP32", 4)], outputs=[Tensor("Y", "FP32", [4])])\n'
        "def f(X):\n    return X\n"
    )
    message = _import_error(tmp_path, source)
    assert "failed at line 4" in message
    assert "tensor 'X': dims must be a list of ints such as [4] or [-1], got 4" in message
    assert "not iterable" not in message


def test_model_without_inputs(tmp_path: Path) -> None:
    source = '@model(outputs=[Tensor("Y", "FP32", [4])])\ndef f(X):\n    return X\n'
    assert "@model(...) needs inputs=" in _import_error(tmp_path, source)


def test_a_syntax_error_names_its_line(tmp_path: Path) -> None:
    assert "failed at line 5: SyntaxError" in _import_error(tmp_path, "x = 1\ndef (:\n")


@model(
    inputs=[Tensor("X", "FP32", [1])],
    outputs=[Tensor("Y", "FP32", [1])],
)
def returns_none(X: np.ndarray) -> None:
    return None


@model(inputs=[Tensor("X", "FP32", [1])], outputs=[Tensor("Y", "FP32", [1])])
def wrong_key(X: np.ndarray) -> dict[str, np.ndarray]:
    return {"OUT": X}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "returns_none",
            "model 'returns_none' returned None; it declares Y FP32 [1], so it must return "
            "one array or a dict of output name to array",
        ),
        (
            "wrong_key",
            "model 'wrong_key' returned output(s) 'OUT' but not Y; it declares Y FP32 [1]",
        ),
    ],
)
async def test_wrong_outputs_say_what_was_returned_and_declared(name: str, expected: str) -> None:
    runtime = Runtime([returns_none, wrong_key])
    await runtime.start()
    try:
        x = InferInput("X", "FP32", np.array([1.0], np.float32))
        with pytest.raises(ModelExecutionError) as caught:
            await runtime.infer(InferRequest(name, (x,)))
        assert caught.value.message == expected
    finally:
        await runtime.aclose()
