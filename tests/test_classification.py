"""Triton's classification extension in the core: the top-k transform and its formatting (as
Triton's `TopkClassifications` writes them), and the runtime applying it to what a request asks."""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np
import pytest

from fnserve import Tensor, model
from fnserve.classification import MAX_CLASSES, top_k
from fnserve.errors import InvalidInputError, ModelConfigError
from fnserve.runtime import Runtime
from fnserve.types import InferInput, InferRequest


class TestTopK:
    def test_floats_are_written_with_six_decimals_largest_first(self) -> None:
        data = np.array([[0.1, 0.7, 0.2]], np.float32)
        assert top_k(data, 2, True, ("a", "b", "c")).tolist() == [
            [b"0.700000:1:b", b"0.200000:2:c"]
        ]

    def test_a_float32_is_written_as_its_double_form(self) -> None:
        # std::to_string(float) prints the float widened to double, as Python does here.
        assert top_k(np.array([1 / 3], np.float32), 1, False).tolist() == [b"0.333333:0"]
        assert top_k(np.array([1e-7, 123456.789], np.float64), 2, False).tolist() == [
            b"123456.789000:1",
            b"0.000000:0",
        ]

    @pytest.mark.parametrize(
        ("dtype", "values", "expected"),
        [
            (np.uint8, [7, 255, 0], [b"255:1", b"7:0", b"0:2"]),
            (np.int8, [-128, 5, -1], [b"5:1", b"-1:2", b"-128:0"]),
            (np.uint64, [2**64 - 1, 3, 2**63], [b"18446744073709551615:0", b"9223372036854775808:2",
                                               b"3:1"]),
            (np.int64, [-(2**63), 2**63 - 1, 0], [b"9223372036854775807:1", b"0:2",
                                                  b"-9223372036854775808:0"]),
        ],
    )  # fmt: skip
    def test_integers_are_written_in_full(
        self, dtype: type, values: list[int], expected: list[bytes]
    ) -> None:
        assert top_k(np.array(values, dtype), 3, False).tolist() == expected

    @pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint16])
    def test_ties_keep_the_lower_index_first(self, dtype: type) -> None:
        data: np.ndarray = np.array([[1, 3, 3, 1, 3]], dtype)
        indices = [s.split(b":")[1] for s in top_k(data, 5, True)[0]]
        assert indices == [b"1", b"2", b"4", b"0", b"3"]

    def test_nan_sorts_last(self) -> None:
        data = np.array([np.nan, 1.0, -np.inf, np.inf])
        assert top_k(data, 4, False).tolist() == [b"inf:3", b"1.000000:1", b"-inf:2", b"nan:0"]

    def test_k_is_clamped_to_the_classes_per_row(self) -> None:
        data = np.arange(6, dtype=np.float32).reshape(2, 3)
        classes = top_k(data, 100, True)
        assert classes.shape == (2, 3)
        assert classes[1].tolist() == [b"5.000000:2", b"4.000000:1", b"3.000000:0"]

    def test_a_row_of_several_dims_is_read_flat(self) -> None:
        data = np.array([[[1, 9], [8, 2]]], np.int32)  # batch 1 of [2, 2]
        assert top_k(data, 2, True).tolist() == [[b"9:1", b"8:2"]]

    def test_without_batching_the_whole_tensor_is_one_row(self) -> None:
        data = np.array([[1, 9], [8, 2]], np.int32)
        assert top_k(data, 2, False).tolist() == [b"9:1", b"8:2"]

    def test_missing_and_empty_labels_give_value_and_index(self) -> None:
        data = np.array([3, 2, 1], np.int16)
        assert top_k(data, 3, False, ("", "two")).tolist() == [b"3:0", b"2:1:two", b"1:2"]

    def test_label_bytes_that_are_not_utf8_come_back_unchanged(self) -> None:
        label = b"caf\xe9".decode("utf-8", "surrogateescape")  # as a label file holds them
        assert top_k(np.array([1], np.int32), 1, False, (label,)).tolist() == [b"1:0:caf\xe9"]

    def test_zero_rows_count_as_one_unbatched_row_as_in_triton(self) -> None:
        assert top_k(np.zeros((0, 4), np.float32), 2, True).shape == (0,)

    def test_a_row_past_a_million_classes_is_refused(self) -> None:
        data = np.zeros((1, MAX_CLASSES + 1), np.uint8)
        with pytest.raises(InvalidInputError, match="classification output tensor too large"):
            top_k(data, 1, True)


class TestLabelsDeclaration:
    def test_labels_are_kept_as_a_tuple(self) -> None:
        assert Tensor("Y", "FP32", [2], labels=["a", "b"]).labels == ("a", "b")

    def test_a_string_is_not_a_list_of_labels(self) -> None:
        with pytest.raises(ModelConfigError, match="labels must be a list of strings"):
            Tensor("Y", "FP32", [2], labels="ab")

    def test_inputs_take_no_labels(self) -> None:
        with pytest.raises(ModelConfigError, match="input 'X': only outputs can have labels"):

            @model(
                inputs=[Tensor("X", "FP32", [2], labels=["a"])], outputs=[Tensor("Y", "FP32", [2])]
            )
            def bad(X: np.ndarray) -> np.ndarray:
                return X


calls: list[int] = []


@model(
    inputs=[Tensor("X", "FP32", [3])],
    outputs=[Tensor("P", "FP32", [3], labels=["a", "b", "c"]), Tensor("N", "BYTES", [1])],
    max_batch_size=4,
)
def scores(X: np.ndarray) -> dict[str, np.ndarray]:
    calls.append(len(X))
    return {"P": X, "N": np.full((len(X), 1), b"n", dtype=object)}


@pytest.fixture
async def runtime() -> AsyncIterator[Runtime]:
    served = Runtime([scores])
    await served.start()
    yield served
    await served.aclose()


def _request(**classification: int) -> InferRequest:
    x = np.array([[0.2, 0.5, 0.3], [0.9, 0.0, 0.1]], np.float32)
    outputs = ("P", "N")
    return InferRequest(
        "scores", (InferInput("X", "FP32", x),), outputs=outputs, classification=classification
    )


async def test_the_runtime_classifies_only_what_was_asked(runtime: Runtime) -> None:
    response = await runtime.infer(_request(P=1))
    p, n = response.outputs
    assert (p.datatype, p.data.tolist()) == ("BYTES", [[b"0.500000:1:b"], [b"0.900000:0:a"]])
    assert (n.datatype, n.data.tolist()) == ("BYTES", [[b"n"], [b"n"]])


async def test_a_bytes_output_is_refused_before_the_model_runs(runtime: Runtime) -> None:
    calls.clear()
    with pytest.raises(InvalidInputError, match="unsupported type 'BYTES'"):
        await runtime.infer(_request(N=1))
    with pytest.raises(InvalidInputError, match="unsupported type 'BYTES'"):
        runtime.validate(_request(N=1))  # durable jobs are checked when submitted
    assert calls == []


async def test_large_outputs_are_classified_off_the_event_loop(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    inline = await runtime.infer(_request(P=2))
    monkeypatch.setattr("fnserve.runtime._INLINE_CLASSIFY_ELEMENTS", 0)
    threaded = await runtime.infer(_request(P=2))
    assert threaded.outputs[0].data.tolist() == inline.outputs[0].data.tolist()
