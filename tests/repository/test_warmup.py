"""Warmup: samples run through the model before it is READY; a failing one fails the load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fnserve import DynamicBatching, Tensor, Warmup, WarmupInput, model
from fnserve.errors import ModelConfigError, RepositoryError
from fnserve.runtime import Runtime
from fnserve.types import InferInput, InferRequest, ModelState
from tests.repository.counting import Counted
from tests.repository.onnx_models import add_one

X = Tensor("X", "FP32", [4])
Y = Tensor("Y", "FP32", [4])


async def test_samples_run_before_ready_and_are_not_counted() -> None:
    seen: list[tuple[tuple[int, ...], float]] = []
    sample = Warmup("rand", {"X": WarmupInput("FP32", [4], "random")}, batch_size=2, count=3)

    @model(inputs=[X], outputs=[Y], max_batch_size=8, dynamic_batching=DynamicBatching(),
           warmup=[sample, Warmup("zeros", {"X": WarmupInput("FP32", [4])})])  # fmt: skip
    def warmed(X: np.ndarray) -> np.ndarray:
        seen.append((X.shape, float(X.sum())))
        return X

    runtime = Runtime([warmed])
    await runtime.start()
    assert runtime.repository_index()[0].state is ModelState.READY
    assert [s for s, _ in seen] == [(2, 4)] * 3 + [(1, 4)]
    assert seen[0][1] == seen[1][1] != 0  # random, with a fixed seed
    assert seen[3][1] == 0.0
    (stats,) = runtime.statistics("warmed")
    assert (stats.inference_count, stats.execution_count, stats.success.count) == (0, 0, 0)
    assert stats.load_ns > 0
    assert stats.warmup_ns > 0
    request = InferRequest("warmed", (InferInput("X", "FP32", np.ones((1, 4), np.float32)),))
    await runtime.infer(request)
    assert runtime.statistics("warmed")[0].inference_count == 1
    await runtime.aclose()


async def test_a_failing_sample_fails_the_load_and_releases_the_instances() -> None:
    class Picky(Counted):
        def infer(self, X: np.ndarray) -> np.ndarray:
            raise ValueError("cannot take zeros")

    sample = Warmup("zeros", {"X": WarmupInput("FP32", [1])})
    picky = model(
        name="picky",
        inputs=[Tensor("X", "FP32", [1])],
        outputs=[Tensor("Y", "FP32", [1])],
        warmup=[sample],
    )(Picky)
    runtime = Runtime([picky])
    with pytest.raises(RepositoryError, match="warmup sample 'zeros' failed: .*cannot take zeros"):
        await runtime.load_model("picky")
    entry = runtime.repository_index()[0]
    assert entry.state is ModelState.FAILED
    assert "warmup sample 'zeros' failed" in entry.reason
    assert Counted.built["picky"] == Counted.closed["picky"] == 1
    await runtime.aclose()


def test_samples_are_checked_against_the_declaration() -> None:
    with pytest.raises(ModelConfigError, match="missing input"):
        model(inputs=[X], outputs=[Y], warmup=[Warmup("w", {})])(lambda X: X)
    with pytest.raises(ModelConfigError, match="batch_size must be between 0 and 1"):
        model(inputs=[X], outputs=[Y], warmup=[Warmup("w", {"X": WarmupInput("FP32", [4])}, 2)])(
            lambda X: X
        )
    with pytest.raises(ModelConfigError, match="datatype INT32"):
        model(inputs=[X], outputs=[Y], warmup=[Warmup("w", {"X": WarmupInput("INT32", [4])})])(
            lambda X: X
        )


async def test_config_pbtxt_warmup_from_a_data_file(tmp_path: Path) -> None:
    from fnserve.repository.source import ModelSource

    add_one(tmp_path / "add_one" / "1" / "model.onnx")
    (tmp_path / "add_one" / "warmup").mkdir()
    (tmp_path / "add_one" / "warmup" / "x.bin").write_bytes(np.arange(4, dtype="<f4").tobytes())
    (tmp_path / "add_one" / "config.pbtxt").write_text(
        "max_batch_size: 4\n"
        'model_warmup [ { name: "file" batch_size: 3 count: 2\n'
        '  inputs { key: "X" value: { data_type: TYPE_FP32 dims: [ 4 ]\n'
        '                             input_data_file: "x.bin" } }\n'
        "} ]\n"
    )
    found = ModelSource([tmp_path]).scan()
    assert not found.failures
    (spec,) = found.definitions
    (sample,) = spec.config.warmup
    assert sample.inputs["X"].data == str(tmp_path / "add_one" / "warmup" / "x.bin")
    assert spec.config.to_json()["model_warmup"][0]["inputs"]["X"]["input_data_file"]
    runtime = Runtime(found.definitions)
    await runtime.start()
    assert runtime.repository_index()[0].state is ModelState.READY
    assert runtime.statistics("add_one")[0].warmup_ns > 0
    await runtime.aclose()
