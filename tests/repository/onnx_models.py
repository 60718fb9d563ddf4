"""Tiny ONNX models made in the tests (numpy-checkable maths), and a Triton repository of them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")  # installed by the project's test set-up
helper = onnx.helper
TensorProto = onnx.TensorProto


def _save(model: object, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def add_one(path: Path) -> Path:
    """Y = X + 1 over FP32 [N, 4] (a dynamic batch dimension)."""
    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "one"], ["Y"])],
        "add_one",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 4])],
        [one],
    )
    return _save(_model(graph), path)


def scale(path: Path, factor: float) -> Path:
    """Y = X @ (factor * I) over FP32 [2, 3] x [3, 3] (fixed shapes, no batch dimension)."""
    weight = helper.make_tensor(
        "W", TensorProto.FLOAT, [3, 3], (factor * np.eye(3, dtype=np.float32)).ravel().tolist()
    )
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"])],
        "scale",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3])],
        [weight],
    )
    return _save(_model(graph), path)


def channel_sums(path: Path) -> Path:
    """Y[1, C, 1, 1] = the sums of X[1, C, H, W] over H and W: a fixed leading 1, as in
    Triton's densenet example (FP32, C = 3, H = W = 4)."""
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["X", "axes"], ["Y"], keepdims=1)],
        "channel_sums",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 3, 1, 1])],
        [helper.make_tensor("axes", TensorProto.INT64, [2], [2, 3])],
    )
    return _save(_model(graph), path)


def row_double(path: Path) -> Path:
    """Y[N] = 2 X[N] over INT64: one value per batch row (the batch dimension alone)."""
    two = helper.make_tensor("two", TensorProto.INT64, [1], [2])
    graph = helper.make_graph(
        [helper.make_node("Mul", ["X", "two"], ["Y"])],
        "row_double",
        [helper.make_tensor_value_info("X", TensorProto.INT64, ["N"])],
        [helper.make_tensor_value_info("Y", TensorProto.INT64, ["N"])],
        [two],
    )
    return _save(_model(graph), path)


def _model(graph: object) -> object:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # readable by every onnxruntime the extra allows
    return model


SCALE_CONFIG = """
name: "scale"
platform: "onnxruntime_onnx"
max_batch_size: 0
version_policy { all { } }
input [ { name: "X" data_type: TYPE_FP32 dims: [ 2, 3 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2, 3 ] } ]
"""


def repository(root: Path) -> Path:
    """add_one (no config.pbtxt), scale (versions 1 and 2, policy all), and two broken ones."""
    add_one(root / "add_one" / "1" / "model.onnx")
    scale(root / "scale" / "1" / "model.onnx", 1.0)
    scale(root / "scale" / "2" / "model.onnx", 2.0)
    (root / "scale" / "config.pbtxt").write_text(SCALE_CONFIG)
    add_one(root / "sequenced" / "1" / "model.onnx")
    (root / "sequenced" / "config.pbtxt").write_text("sequence_batching { }\n")
    (root / "garbage" / "1").mkdir(parents=True)
    (root / "garbage" / "1" / "model.onnx").write_bytes(b"\x08\x01not a model")
    return root
