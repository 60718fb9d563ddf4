"""What fnserve reads from PyTorch model files to complete a config (real files, built here)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fnserve.backends.pytorch import describe
from fnserve.config.model_config import Tensor
from fnserve.errors import RepositoryError


class Linear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(x)
        return out


class MatMul(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(5, 2, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight


class Conv(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 5)

    def forward(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        features = self.conv(image)
        return {"features": features, "best": features.argmax(1)}


class Embed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Embedding(10, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows: torch.Tensor = self.table(ids)
        return rows.mean(1)


class SumDiff(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a + b, (a - b).to(torch.int32)


class Offset(torch.nn.Module):
    def forward(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        return x if bias is None else x + bias


class Scaled(torch.nn.Module):
    def forward(self, x: torch.Tensor, factor: int) -> torch.Tensor:
        return x * factor


class Rows(torch.nn.Module):
    """Needs rows of exactly 6 values, which nothing in the graph says."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(-1, 2, 3).sum(1)


class Nested(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        return x, (x, x)


def _trace(module: torch.nn.Module, args: tuple[torch.Tensor, ...], path: Path) -> Path:
    torch.jit.trace(module, args).save(str(path))  # type: ignore[no-untyped-call]
    return path


def _script(module: torch.nn.Module, path: Path) -> Path:
    torch.jit.script(module).save(str(path))  # type: ignore[no-untyped-call]
    return path


def _export(
    module: torch.nn.Module, args: tuple[torch.Tensor, ...], path: Path, batch: int | None = 16
) -> Path:
    dim = torch.export.Dim("batch", min=1, max=batch) if batch else torch.export.Dim("batch")
    program = torch.export.export(module, args, dynamic_shapes=tuple({0: dim} for _ in args))
    torch.export.save(program, str(path))
    return path


# torch.export programs: everything is in the file


def test_an_exported_program_gives_names_dtypes_shapes_and_its_batch_bound(tmp_path: Path) -> None:
    path = _export(SumDiff(), (torch.ones(2, 3), torch.ones(2, 3)), tmp_path / "model.pt2")
    signature = describe(path)
    assert signature.inputs == (Tensor("a", "FP32", [-1, 3]), Tensor("b", "FP32", [-1, 3]))
    assert signature.outputs == (
        Tensor("OUTPUT__0", "FP32", [-1, 3]),
        Tensor("OUTPUT__1", "INT32", [-1, 3]),
    )
    assert signature.batchable()
    assert signature.max_batch_size == 16
    assert not signature.guessed


def test_an_unbounded_batch_leaves_the_limit_to_the_default(tmp_path: Path) -> None:
    path = _export(SumDiff(), (torch.ones(2, 3), torch.ones(2, 3)), tmp_path / "m.pt2", None)
    assert describe(path).max_batch_size is None


def test_a_returned_dict_names_the_outputs(tmp_path: Path) -> None:
    program = torch.export.export(Conv(), (torch.ones(1, 3, 8, 8),))
    torch.export.save(program, str(tmp_path / "model.pt2"))
    signature = describe(tmp_path / "model.pt2")
    assert signature.outputs == (
        Tensor("features", "FP32", [1, 4, 4, 4]),
        Tensor("best", "INT64", [1, 4, 4]),
    )
    assert not signature.batchable()  # exported with static shapes


def test_nested_outputs_ask_for_a_config(tmp_path: Path) -> None:
    path = _export(Nested(), (torch.ones(2, 3),), tmp_path / "model.pt2")
    with pytest.raises(RepositoryError, match="nested values.*declare output in config.pbtxt"):
        describe(path)


# TorchScript: names from forward, the rest from the layers that read the inputs


def test_a_linear_layer_gives_the_feature_size(tmp_path: Path) -> None:
    signature = describe(_trace(Linear(), (torch.ones(2, 3),), tmp_path / "model.pt"))
    assert signature.inputs == (Tensor("x", "FP32", [-1, 3]),)
    assert signature.outputs == (Tensor("OUTPUT__0", "FP32", [-1, -1]),)
    assert signature.guessed
    assert not signature.batchable()  # nothing marks a batch dimension


def test_a_matmul_by_a_parameter_gives_its_dtype_and_size(tmp_path: Path) -> None:
    signature = describe(_script(MatMul(), tmp_path / "model.pt"))
    assert signature.inputs == (Tensor("x", "FP64", [-1, 5]),)
    assert signature.outputs == (Tensor("OUTPUT__0", "FP64", [-1, -1]),)


def test_a_convolution_gives_rank_and_channels(tmp_path: Path) -> None:
    signature = describe(_script(Conv(), tmp_path / "model.pt"))
    assert signature.inputs == (Tensor("image", "FP32", [-1, 3, -1, -1]),)
    assert signature.outputs == (
        Tensor("features", "FP32", [-1, -1, -1, -1]),
        Tensor("best", "INT64", [-1, -1, -1]),
    )


def test_embedding_indices_are_int64(tmp_path: Path) -> None:
    path = _trace(Embed(), (torch.zeros(2, 5, dtype=torch.long),), tmp_path / "model.pt")
    assert describe(path).inputs == (Tensor("ids", "INT64", [-1, -1]),)


def test_other_inputs_are_floats_of_rank_two_and_tuples_are_numbered(tmp_path: Path) -> None:
    signature = describe(_trace(SumDiff(), (torch.ones(2, 3), torch.ones(2, 3)), tmp_path / "m.pt"))
    assert signature.inputs == (Tensor("a", "FP32", [-1, -1]), Tensor("b", "FP32", [-1, -1]))
    assert signature.outputs == (
        Tensor("OUTPUT__0", "FP32", [-1, -1]),
        Tensor("OUTPUT__1", "INT32", [-1, -1]),
    )


def test_declared_inputs_drive_the_trial_run(tmp_path: Path) -> None:
    path = _script(Rows(), tmp_path / "model.pt")
    with pytest.raises(RepositoryError) as info:
        describe(path)
    message = str(info.value)
    assert "TorchScript keeps no tensor shapes or dtypes" in message
    assert "x FP32 [1, 1]" in message
    assert "declare input and output in config.pbtxt" in message
    signature = describe(path, [Tensor("x", "FP32", [-1, 6])])
    assert signature.inputs == (Tensor("x", "FP32", [-1, 6]),)
    assert signature.outputs == (Tensor("OUTPUT__0", "FP32", [-1, -1]),)


def test_an_optional_tensor_argument_is_an_optional_input(tmp_path: Path) -> None:
    signature = describe(_script(Offset(), tmp_path / "model.pt"))
    assert signature.inputs == (
        Tensor("x", "FP32", [-1, -1]),
        Tensor("bias", "FP32", [-1, -1], optional=True),
    )


def test_an_argument_that_is_not_a_tensor_asks_for_a_config(tmp_path: Path) -> None:
    with pytest.raises(RepositoryError, match="argument 'factor' is int.*config.pbtxt"):
        describe(_script(Scaled(), tmp_path / "model.pt"))


@pytest.mark.parametrize("name", ["model.pt", "model.pt2"])
def test_an_unreadable_file_is_named(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_bytes(b"not a model")
    with pytest.raises(RepositoryError, match=f"model file .*{name}: torch cannot load it"):
        describe(tmp_path / name)
