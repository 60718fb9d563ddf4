"""fnserve's `triton_python_backend_utils` (pb_utils) on its own: tensors, types, lookups and
the pure helpers, as model.py files use them."""

from __future__ import annotations

import numpy as np
import pytest

from fnserve.backends.triton_python import pb_utils


def test_pb_utils_tensors_and_types() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = pb_utils.Tensor("X", x)
    assert (tensor.name(), tensor.shape(), tensor.triton_dtype()) == ("X", [2, 3], 11)
    copy = pb_utils.Tensor.from_dlpack("Y", tensor.to_dlpack())
    assert copy.name() == "Y"
    np.testing.assert_array_equal(copy.as_numpy(), x)
    np.testing.assert_array_equal(pb_utils.Tensor.from_dlpack("Z", tensor).as_numpy(), x)
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb_utils.triton_string_to_numpy("TYPE_BOOL") is np.bool_
    assert pb_utils.triton_to_numpy_type(13) is np.object_
    assert pb_utils.numpy_to_triton_type(np.int64) == 9
    assert pb_utils.numpy_to_triton_type(np.bytes_) == 13
    with pytest.raises(pb_utils.TritonModelException, match="TYPE_NOPE"):
        pb_utils.triton_string_to_numpy("TYPE_NOPE")


def test_pb_utils_lookups() -> None:
    config = {"input": [{"name": "A", "data_type": "TYPE_FP32"}], "output": []}
    assert pb_utils.get_input_config_by_name(config, "A") == config["input"][0]
    assert pb_utils.get_output_config_by_name(config, "A") is None
    response = pb_utils.InferenceResponse([pb_utils.Tensor("B", np.zeros(1))])
    assert pb_utils.get_output_tensor_by_name(response, "B") is not None
    assert pb_utils.get_output_tensor_by_name(response, "C") is None
    assert not response.has_error()
    with pytest.raises(pb_utils.TritonModelException, match="must be a list"):
        pb_utils.InferenceResponse(output_tensors=(1,))  # type: ignore[arg-type]


def test_a_read_only_request_tensor_is_writable_and_exports_dlpack() -> None:
    """Request tensors may be the read-only buffers they arrived in; models write into
    `as_numpy()` and hand `to_dlpack()` to torch, as they do in Triton."""
    import torch

    wire = np.frombuffer(np.arange(4, dtype=np.float32).tobytes(), np.float32)
    assert not wire.flags.writeable
    tensor = pb_utils.Tensor("X", wire)
    doubled = torch.utils.dlpack.from_dlpack(tensor.to_dlpack()).mul_(2)
    assert doubled.tolist() == [0.0, 2.0, 4.0, 6.0]
    array = tensor.as_numpy()
    array += 1
    assert tensor.as_numpy() is array  # copied once
    assert wire.tolist() == [0.0, 1.0, 2.0, 3.0]  # the request's buffer is untouched


def test_a_bls_model_name_may_come_from_a_bytes_input() -> None:
    name = np.array([b"add_sub"], dtype=np.object_)[0]
    assert pb_utils.InferenceRequest(model_name=name).model_name == "add_sub"


def test_pb_utils_byte_tensor_helpers_round_trip() -> None:
    texts = np.array([[b"a", b""], ["\u00e9t\u00e9", b"xyz"]], dtype=np.object_)
    encoded = pb_utils.serialize_byte_tensor(texts)
    assert encoded.dtype == np.object_
    assert (
        encoded.item()
        == b"\x01\x00\x00\x00a\x00\x00\x00\x00\x05\x00\x00\x00\xc3\xa9t\xc3\xa9\x03\x00\x00\x00xyz"
    )
    decoded = pb_utils.deserialize_bytes_tensor(encoded.item())
    assert decoded.tolist() == [b"a", b"", "\u00e9t\u00e9".encode(), b"xyz"]
    assert pb_utils.serialize_byte_tensor(np.array([], dtype=np.object_)).shape == (0,)
    with pytest.raises(pb_utils.TritonModelException, match="object or bytes array"):
        pb_utils.serialize_byte_tensor(np.zeros(2, np.float32))
    assert not pb_utils.using_decoupled_model_transaction_policy({})
    assert pb_utils.using_decoupled_model_transaction_policy(
        {"model_transaction_policy": {"decoupled": True}}
    )
