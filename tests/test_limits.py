"""Input limits shared by both codecs: quoting client values, names, shapes, BYTES counts and
JSON nesting (fnserve.limits and the checks in fnserve.tensors)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from fnserve.errors import InvalidInputError, PayloadTooLargeError
from fnserve.limits import InputLimits, check_model, format_shape, quote
from fnserve.tensors import check_dims, check_shape, from_json, from_raw


class TestQuote:
    def test_short_string_is_quoted_whole(self) -> None:
        assert quote("abc") == "'abc'"

    def test_long_string_is_cut_and_counted(self) -> None:
        text = quote("m" * 1_000_000)
        assert text == "'" + "m" * 64 + "...' (1000000 characters)"

    @pytest.mark.parametrize("value", [list(range(10**6)), {str(i): i for i in range(10**5)}])
    def test_big_containers_are_bounded(self, value: object) -> None:
        assert len(quote(value)) < 200

    def test_int_past_the_str_limit(self) -> None:
        assert quote(10**5000) == "<int>"


class TestNames:
    def test_long_model_name(self) -> None:
        with pytest.raises(InvalidInputError, match=r"model name 'm{64}\.\.\.' \(300 characters\)"):
            check_model("m" * 300, "")

    def test_long_version(self) -> None:
        with pytest.raises(InvalidInputError, match="model version .* longer than the limit of 8"):
            check_model("m", "1" * 9, InputLimits(max_name_length=8))

    def test_names_within_the_limit(self) -> None:
        check_model("m" * 256, "1" * 256)


class TestDims:
    def test_sixty_four_dims_are_allowed(self) -> None:
        assert check_dims("X", "FP32", [1] * 64) == (1,) * 64

    def test_sixty_five_are_not(self) -> None:
        with pytest.raises(InvalidInputError, match="65 dims, more than the 64 allowed"):
            check_dims("X", "FP32", [1] * 65)

    @pytest.mark.parametrize("dim", [-1, 2**63, True, 1.0, "1", None])
    def test_bad_dim(self, dim: object) -> None:
        with pytest.raises(InvalidInputError, match="non-negative integers below 2"):
            check_shape("X", "FP32", [0, dim])

    def test_byte_size_past_int64_even_when_empty(self) -> None:
        with pytest.raises(InvalidInputError, match=r"\[0, 4611686018427387904, 2\] of 'FP32'"):
            check_dims("X", "FP32", [0, 2**62, 2])

    def test_largest_empty_tensor_numpy_can_hold(self) -> None:
        shape = check_dims("X", "UINT8", [0, 2**63 - 1])
        assert from_raw("X", "UINT8", shape, b"").shape == (0, 2**63 - 1)

    def test_shape_not_a_list(self) -> None:
        with pytest.raises(InvalidInputError, match="shape must be a list"):
            check_shape("X", "FP32", "1,2")

    def test_format_shape_is_bounded(self) -> None:
        assert format_shape((2,) * 100_000) == "[2, 2, 2, 2, 2, 2, 2, 2, ...] (100000 dims)"


def _bytes_raw(count: int) -> bytes:
    return (struct.pack("<I", 1) + b"a") * count


class TestBytesElements:
    def test_count_over_the_cap_is_refused_before_parsing(self) -> None:
        with pytest.raises(PayloadTooLargeError, match="5 BYTES elements are more than the 4"):
            from_raw("X", "BYTES", (5,), b"", max_bytes_elements=4)

    def test_count_within_the_cap(self) -> None:
        array = from_raw("X", "BYTES", (2, 2), _bytes_raw(4), max_bytes_elements=4)
        assert array.tolist() == [[b"a", b"a"], [b"a", b"a"]]

    def test_extra_elements_stop_the_parse_at_the_shape(self) -> None:
        with pytest.raises(InvalidInputError, match="holds 50 bytes more"):
            from_raw("X", "BYTES", (1,), _bytes_raw(11))

    def test_too_few_bytes_for_the_count(self) -> None:
        with pytest.raises(InvalidInputError, match="cannot hold 3 BYTES elements"):
            from_raw("X", "BYTES", (3,), _bytes_raw(2))

    def test_json_strings_count_too(self) -> None:
        with pytest.raises(PayloadTooLargeError):
            from_json("X", "BYTES", (3,), ["a", "b", "c"], max_bytes_elements=2)


class TestJsonNesting:
    @pytest.mark.parametrize(
        ("datatype", "data"),
        [
            ("FP32", [[1, 2], [3]]),
            ("FP32", [[1, 2], 3]),
            ("INT32", [[[1], [2]], [[3], 4]]),
            ("BYTES", [["a", "b"], ["c"]]),
            ("BYTES", [["a"], "b"]),
            ("BOOL", [[True], [True, False]]),
        ],
    )
    def test_jagged_is_refused(self, datatype: str, data: object) -> None:
        with pytest.raises(InvalidInputError, match="jagged"):
            from_json("X", datatype, (1, 3), data)

    @pytest.mark.parametrize("datatype", ["FP32", "INT64", "BOOL", "BYTES"])
    def test_regular_nesting_and_flat_are_equal(self, datatype: str) -> None:
        value = {"BOOL": True, "BYTES": "s"}.get(datatype, 1)
        nested = from_json("X", datatype, (2, 3), [[value] * 3, [value] * 3])
        flat = from_json("X", datatype, (2, 3), [value] * 6)
        assert nested.shape == flat.shape == (2, 3)
        assert np.array_equal(nested, flat)

    def test_count_mismatch(self) -> None:
        with pytest.raises(InvalidInputError, match="expected 6 elements for shape"):
            from_json("X", "FP32", (2, 3), [[1, 2], [3, 4]])
