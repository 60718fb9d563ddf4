"""fnserve's `triton_python_backend_utils`: the part of Triton's python_backend API that
`model.py` files commonly use, so they run unchanged (`import triton_python_backend_utils as
pb_utils` finds this module: the backend installs it in `sys.modules` under that name).

Tensors live in host memory as numpy arrays (BYTES as object arrays of `bytes`), as fnserve
hands them over. BLS works as in Triton: `InferenceRequest(model_name=..., inputs=[...],
requested_output_names=[...]).exec()` from a sync `execute`, `await request.async_exec()` from
an `async def execute`; the call goes through the callee's scheduler in-process (`bls.py`), and
the callee's failure comes back as a response whose `has_error()` is True. What a model may
touch but fnserve does not provide (`exec(decoupled=True)`, decoupled response senders,
`ModelConfig` auto-completion, ...) fails with a `TritonModelException` naming the call, never
with a bare AttributeError deep in the user's code.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import struct
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NoReturn

import numpy as np

from fnserve import custom_metrics
from fnserve.backends.triton_python import bls
from fnserve.errors import (
    CancelledError,
    FnserveError,
    InvalidInputError,
    ModelNotFoundError,
    ModelNotReadyError,
    UnavailableError,
    UnsupportedError,
)

__all__ = [
    "InferenceRequest",
    "InferenceResponse",
    "Logger",
    "Metric",
    "MetricFamily",
    "ModelConfig",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "deserialize_bytes_tensor",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "using_decoupled_model_transaction_policy",
]

log = logging.getLogger("fnserve.triton_python")

# Triton's config datatype strings -> numpy (TYPE_STRING is BYTES: object arrays of bytes).
TRITON_STRING_TO_NUMPY: dict[str, Any] = {
    "TYPE_BOOL": np.bool_,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}
# TRITONSERVER_DataType codes (1 BOOL ... 13 BYTES) -> numpy; BF16 (14) has no numpy type.
_CODE_TO_NUMPY: dict[int, Any] = {
    code: TRITON_STRING_TO_NUMPY[name] for code, name in enumerate(TRITON_STRING_TO_NUMPY, start=1)
}
_NUMPY_TO_CODE: dict[Any, int] = {np.dtype(t): code for code, t in _CODE_TO_NUMPY.items()}


class TritonModelException(Exception):  # noqa: N818 (Triton's name)
    """What Triton's utilities raise; `message()` gives the text."""

    def __init__(self, msg: str) -> None:
        super().__init__(msg)
        self._msg = msg

    def message(self) -> str:
        return self._msg


class NotProvidedError(TritonModelException, AttributeError):
    """A pb_utils name fnserve does not provide; an AttributeError too, so `hasattr` and
    `getattr(pb_utils, name, default)` feature checks in models keep working."""


class TritonError:
    """An error a model puts in an `InferenceResponse` (or a response sender) for the client."""

    # Triton's status codes, as class attributes (`TritonError(msg, TritonError.INVALID_ARG)`).
    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        self._message = message
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __str__(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r})"


class Tensor:
    """A named tensor of an InferenceRequest or InferenceResponse, held as a numpy array.

    Args:
        name: the tensor's name.
        numpy_array: its data (anything `np.asarray` takes; BYTES as an object array).
    """

    def __init__(self, name: str, numpy_array: Any) -> None:
        self._name = name
        self._array: np.ndarray[Any, Any] = np.asarray(numpy_array)

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray[Any, Any]:
        """The array, writable as Triton's are: a request's tensor may still be the read-only
        buffer it arrived in, which is then copied (once) before the model may touch it."""
        if not self._array.flags.writeable:
            self._array = self._array.copy()
        return self._array

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def triton_dtype(self) -> int | None:
        return numpy_to_triton_type(self._array.dtype)

    def is_cpu(self) -> bool:
        return True  # fnserve hands the backend host memory only

    def to_dlpack(self) -> Any:
        """A DLPack capsule of the array (numpy's; BYTES tensors have none)."""
        return self.as_numpy().__dlpack__()

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.as_numpy().__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        device: tuple[int, int] = self._array.__dlpack_device__()
        return device

    @staticmethod
    def from_dlpack(name: str, capsule: Any) -> Tensor:
        """A tensor of a DLPack capsule, or of any object with `__dlpack__` (a torch tensor),
        read by numpy: host memory only."""
        source = capsule if hasattr(capsule, "__dlpack__") else _Capsule(capsule)
        try:
            return Tensor(name, np.from_dlpack(source))
        except (BufferError, RuntimeError, TypeError) as exc:
            raise TritonModelException(
                f"pb_utils.Tensor.from_dlpack('{name}'): numpy cannot read this DLPack tensor "
                f"(fnserve's python backend takes host memory only): {exc}"
            ) from exc

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, shape={self.shape()}, dtype={self._array.dtype})"


class _Capsule:
    """A bare (legacy, CPU) DLPack capsule dressed as the object `np.from_dlpack` expects."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, **_: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU


class InferenceRequest:
    """What `execute` receives; a model also builds one to call another model (BLS).

    Args:
        model_name: (BLS) the model to call.
        requested_output_names: (BLS) the outputs wanted; none named: all of them.
        inputs: the input tensors.
        model_version: (BLS) the callee's version; -1: the latest ready one.
        timeout: (BLS) microseconds it may wait in the callee's queue, as Triton's request
            timeout (honoured where the callee's queue policy allows overriding it).
        request_id, correlation_id, flags: as in Triton (a BLS call does not pass them on).
        parameters: a mapping of str, int, float or bool values, or its JSON text.
    """

    def __init__(
        self,
        model_name: str | bytes = "",
        requested_output_names: Sequence[str] = (),
        inputs: Sequence[Tensor] = (),
        request_id: str = "",
        correlation_id: int | str = 0,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        parameters: Mapping[str, Any] | str | None = None,
        **_others: Any,  # preferred_memory, trace: outputs are host memory, nothing is traced
    ) -> None:
        # Triton's binding takes the name as text; models often pass it straight from a BYTES
        # input (`as_numpy()[0]`), which is bytes here.
        self.model_name = model_name.decode() if isinstance(model_name, bytes) else model_name
        self.model_version = model_version
        self._requested = list(requested_output_names)
        self._inputs = list(inputs)
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._flags = flags
        self._timeout = timeout
        if parameters is None:
            parameters = {}
        self._parameters = parameters if isinstance(parameters, str) else json.dumps(parameters)

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def timeout(self) -> int:
        return self._timeout

    def parameters(self) -> str:
        """The request's parameters as JSON text (Triton's form: `json.loads` it)."""
        return self._parameters

    def requested_output_names(self) -> list[str]:
        return self._requested

    def is_cancelled(self) -> bool:
        return False

    def get_response_sender(self) -> NoReturn:
        raise TritonModelException(
            "pb_utils.InferenceRequest.get_response_sender is not provided by fnserve "
            "(decoupled models are not supported yet)"
        )

    def exec(self, decoupled: bool = False) -> InferenceResponse:
        """Run this request on `model_name` and wait for its response (BLS, from a sync
        `execute`); the callee's failure is a response whose `has_error()` is True.

        Raises:
            TritonModelException: `decoupled=True`, called outside `execute`, or on the event
                loop of an `async def execute` (await `async_exec()` there).
        """
        with _bls_usage("exec", decoupled):
            return bls.run(self._call(), _response_of)

    def async_exec(self, decoupled: bool = False) -> asyncio.Future[InferenceResponse]:
        """`exec` for an `async def execute`: the call starts now, the future (await it, or
        `asyncio.gather` several) gives its response. A sync `execute` may use it inside a
        loop of its own (`asyncio.run`).

        Raises:
            TritonModelException: `decoupled=True`, called outside `execute`, or with no event
                loop running.
        """
        with _bls_usage("async_exec", decoupled):
            return bls.start(self._call(), _response_of)

    def _call(self) -> bls.Call:
        return bls.Call(
            self.model_name,
            {t.name(): bls.host_array(t.as_numpy()) for t in self._inputs},
            "" if self.model_version < 0 else str(self.model_version),
            tuple(self._requested) or None,
            bls.parameters_of(self._parameters, self._timeout),
        )


class InferenceResponse:
    """The response to one request: output tensors, or an error for the client.

    Args:
        output_tensors: a list of `Tensor`s.
        error: a `TritonError` (or its text) failing the request.
    """

    def __init__(
        self, output_tensors: list[Tensor] | None = None, error: TritonError | str | None = None
    ) -> None:
        if output_tensors is None:
            output_tensors = []
        if not isinstance(output_tensors, list):
            raise TritonModelException('"output_tensors" must be a list.')
        self._outputs = output_tensors
        self._error = TritonError(error) if isinstance(error, str) else error

    def output_tensors(self) -> list[Tensor]:
        return self._outputs

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error


# The TritonError code of each error a BLS callee's clients would get (first match wins).
_ERROR_CODES: tuple[tuple[type[FnserveError], int], ...] = (
    (InvalidInputError, TritonError.INVALID_ARG),
    (ModelNotFoundError, TritonError.NOT_FOUND),
    (ModelNotReadyError, TritonError.UNAVAILABLE),
    (UnavailableError, TritonError.UNAVAILABLE),
    (CancelledError, TritonError.CANCELLED),
    (UnsupportedError, TritonError.UNSUPPORTED),
)


@contextlib.contextmanager
def _bls_usage(method: str, decoupled: bool) -> Iterator[None]:
    """A BLS call fnserve cannot make fails here, naming the method."""
    if decoupled:
        raise TritonModelException(
            f"pb_utils.InferenceRequest.{method}(decoupled=True) is not provided by fnserve "
            f"(calls to decoupled models need response iterators, and decoupled models are not "
            f"supported yet)"
        )
    try:
        yield
    except bls.UsageError as exc:
        raise TritonModelException(f"pb_utils.InferenceRequest.{method}: {exc}") from None


def _response_of(outcome: bls.Outcome) -> InferenceResponse:
    """A BLS call's response: the callee's outputs, or its error with Triton's code."""
    if isinstance(outcome, FnserveError):
        code = next((c for t, c in _ERROR_CODES if isinstance(outcome, t)), TritonError.INTERNAL)
        return InferenceResponse(error=TritonError(outcome.message, code))
    return InferenceResponse([Tensor(name, array) for name, array in outcome.items()])


class Logger:
    """Triton's `pb_utils.Logger`, writing to fnserve's log (logger "fnserve.triton_python")."""

    INFO = logging.INFO
    WARNING = logging.WARNING
    ERROR = logging.ERROR
    VERBOSE = logging.DEBUG

    @staticmethod
    def log(message: str, level: int = logging.INFO) -> None:
        log.log(level, "%s", message)

    @staticmethod
    def log_info(message: str) -> None:
        log.info("%s", message)

    @staticmethod
    def log_warn(message: str) -> None:
        log.warning("%s", message)

    @staticmethod
    def log_error(message: str) -> None:
        log.error("%s", message)

    @staticmethod
    def log_verbose(message: str) -> None:
        log.debug("%s", message)


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    """The request's input `name`, or None."""
    return next((t for t in inference_request.inputs() if t.name() == name), None)


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    """The response's output `name`, or None."""
    return next((t for t in inference_response.output_tensors() if t.name() == name), None)


def get_input_config_by_name(model_config: Mapping[str, Any], name: str) -> Any:
    """The `input` entry of a config dict (`json.loads(args["model_config"])`) named `name`."""
    return next((t for t in model_config.get("input", []) if t.get("name") == name), None)


def get_output_config_by_name(model_config: Mapping[str, Any], name: str) -> Any:
    """The `output` entry of a config dict named `name`, or None."""
    return next((t for t in model_config.get("output", []) if t.get("name") == name), None)


def triton_string_to_numpy(triton_type_string: str) -> Any:
    """The numpy type of a config datatype ("TYPE_FP32" -> np.float32)."""
    try:
        return TRITON_STRING_TO_NUMPY[triton_type_string]
    except KeyError:
        raise TritonModelException(
            f"pb_utils.triton_string_to_numpy: no numpy type for {triton_type_string!r}"
        ) from None


def triton_to_numpy_type(data_type: int) -> Any:
    """The numpy type of a TRITONSERVER_DataType code (11 -> np.float32); None if none."""
    return _CODE_TO_NUMPY.get(data_type)


def numpy_to_triton_type(data_type: Any) -> int | None:
    """The TRITONSERVER_DataType code of a numpy type (np.float32 -> 11); None if none."""
    try:
        dtype = np.dtype(data_type)
    except TypeError:
        return None
    if dtype.kind == "S":
        return _NUMPY_TO_CODE[np.dtype(np.object_)]
    return _NUMPY_TO_CODE.get(dtype)


class ModelConfig:
    """The config `TritonPythonModel.auto_complete_config(auto_complete_model_config)` gets
    and returns: Triton's JSON form of config.pbtxt (or of nothing), completed by the model.

    Args:
        model_config: the config, as a dict or its JSON text.
    """

    def __init__(self, model_config: Mapping[str, Any] | str) -> None:
        loaded = json.loads(model_config) if isinstance(model_config, str) else model_config
        self._config: dict[str, Any] = dict(loaded)

    def as_dict(self) -> dict[str, Any]:
        return self._config

    def set_max_batch_size(self, max_batch_size: int) -> None:
        """Sets it unless the config set another value (which wins, as in Triton)."""
        current = int(self._config.get("max_batch_size", 0) or 0)
        if current not in (0, max_batch_size):
            raise TritonModelException(
                f"the configuration specifies max_batch_size {current}, but "
                f"auto_complete_config sets {max_batch_size}"
            )
        self._config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        """Turns dynamic batching on (keeping its fields when the config set them)."""
        if "sequence_batching" in self._config:
            raise TritonModelException(
                "set_dynamic_batching: the configuration uses sequence_batching"
            )
        self._config.setdefault("dynamic_batching", {})

    def add_input(self, input: Mapping[str, Any]) -> None:  # Triton's parameter name
        self._add("input", input)

    def add_output(self, output: Mapping[str, Any]) -> None:
        self._add("output", output)

    def add_model_warmup(self, model_warmup: Mapping[str, Any]) -> None:
        self._config.setdefault("model_warmup", []).append(dict(model_warmup))

    def set_model_transaction_policy(self, transaction_policy_dict: Mapping[str, Any]) -> None:
        self._config["model_transaction_policy"] = dict(transaction_policy_dict)

    def _add(self, kind: str, tensor: Mapping[str, Any]) -> None:
        """Adds the tensor, or fills what the config's tensor of that name leaves out; a
        datatype or dims that differ from the config's are an error, as in Triton."""
        missing = [key for key in ("name", "data_type", "dims") if key not in tensor]
        if missing:
            raise TritonModelException(
                f"add_{kind}: the {kind} needs {', '.join(missing)} (got {dict(tensor)})"
            )
        declared = self._config.setdefault(kind, [])
        found = next((t for t in declared if t.get("name") == tensor["name"]), None)
        if found is None:
            declared.append(dict(tensor))
            return
        for key in ("data_type", "dims"):
            mine, theirs = found.get(key), tensor[key]
            if key == "dims" and mine is not None:
                mine, theirs = [int(d) for d in mine], [int(d) for d in theirs]
            if mine not in (None, "", "TYPE_INVALID", []) and mine != theirs:
                raise TritonModelException(
                    f"add_{kind}: {kind} '{tensor['name']}' has {key} {mine} in the "
                    f"configuration, but auto_complete_config gives {theirs}"
                )
            found[key] = tensor[key]


class Metric:
    """One metric of a `MetricFamily` (one label set): `increment` (counter, gauge), `set`
    (gauge), `observe` (histogram), `value` (counter, gauge)."""

    def __init__(self, metric: custom_metrics.CustomMetric) -> None:
        self._metric = metric

    def increment(self, value: float) -> None:
        with _metric_errors():
            self._metric.increment(value)

    def set(self, value: float) -> None:
        with _metric_errors():
            self._metric.set(value)

    def observe(self, value: float) -> None:
        with _metric_errors():
            self._metric.observe(value)

    def value(self) -> float:
        with _metric_errors():
            return self._metric.value()


class MetricFamily:
    """A custom metric family, exported on the server's metrics port as Triton does.

    Args:
        name: the family's name (the same name, description and kind: the same family).
        description: its HELP text.
        kind: `MetricFamily.COUNTER`, `GAUGE` or `HISTOGRAM`.
    """

    COUNTER = custom_metrics.MetricKind.COUNTER
    GAUGE = custom_metrics.MetricKind.GAUGE
    HISTOGRAM = custom_metrics.MetricKind.HISTOGRAM

    def __init__(self, name: str, description: str, kind: int) -> None:
        with _metric_errors():
            self._family = custom_metrics.family(name, description, kind)

    def Metric(  # noqa: N802 (Triton's name)
        self, labels: Mapping[str, str] | None = None, buckets: Sequence[float] | None = None
    ) -> Metric:
        """The metric of `labels` (histograms: with its bucket upper bounds)."""
        with _metric_errors():
            return Metric(self._family.metric(labels, buckets))


@contextlib.contextmanager
def _metric_errors() -> Iterator[None]:
    try:
        yield
    except custom_metrics.CustomMetricError as exc:
        raise TritonModelException(str(exc)) from None


# Triton's request and response flags, for models that test them.
TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
_LENGTH = struct.Struct("<I")


def serialize_byte_tensor(input_tensor: Any) -> np.ndarray[Any, Any]:
    """A BYTES array as Triton's wire form: each element (bytes, or text encoded as UTF-8)
    as a 4-byte little-endian length and its bytes, all in one 0-d object array."""
    array = np.asarray(input_tensor)
    if array.size == 0:
        return np.empty([0], dtype=np.object_)
    if array.dtype != np.object_ and array.dtype.type is not np.bytes_:
        raise TritonModelException(
            f"pb_utils.serialize_byte_tensor: expected an object or bytes array, got {array.dtype}"
        )
    parts: list[bytes] = []
    for item in array.flat:
        data = item if isinstance(item, bytes) else str(item).encode("utf-8")
        parts += (_LENGTH.pack(len(data)), data)
    return np.asarray(b"".join(parts), dtype=np.object_)


def deserialize_bytes_tensor(encoded_tensor: Any) -> np.ndarray[Any, Any]:
    """The elements of `serialize_byte_tensor`'s form, as a 1-d object array of bytes."""
    buffer = bytes(encoded_tensor)
    items, offset = [], 0
    while offset < len(buffer):
        (length,) = _LENGTH.unpack_from(buffer, offset)
        offset += _LENGTH.size
        items.append(buffer[offset : offset + length])
        offset += length
    return np.array(items, dtype=np.object_)


def using_decoupled_model_transaction_policy(model_config: Mapping[str, Any]) -> bool:
    """Whether a config dict makes the model decoupled (never, for a model fnserve loads)."""
    policy = model_config.get("model_transaction_policy") or {}
    return bool(policy.get("decoupled", False))


def __getattr__(name: str) -> NoReturn:
    """Anything else a model touches fails here, naming it (dunders stay plain AttributeErrors:
    import machinery and introspection probe them)."""
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    raise NotProvidedError(f"pb_utils.{name} is not provided by fnserve")
