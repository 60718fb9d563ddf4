"""The ONNX Runtime backend (Triton's platform `onnxruntime_onnx`): one `InferenceSession` per
instance runs a repository's `model.onnx`, with the execution providers its instance kind and
its config's execution accelerators ask for (`execution_providers`).

onnxruntime is optional (extra `onnx`; extra `gpu` brings onnxruntime-gpu). Importing this module
without it raises an ImportError that says how to install it, which the registry turns into a
load error naming the model; servers of `@model` functions never import it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fnserve.backends.base import ModelFileSpec, ModelSignature, pair_declared
from fnserve.backends.execution_providers import CPU, TENSORRT, execution_providers
from fnserve.config.model_config import Tensor
from fnserve.errors import InvalidInputError, RepositoryError
from fnserve.model import InstanceContext
from fnserve.types import Array, ParamValue

try:
    import onnxruntime as ort
except ImportError as exc:  # re-raised with the install line: the bare name says too little
    raise ImportError(
        f"fnserve's onnxruntime backend needs the onnxruntime package ({exc}); "
        f"pip install 'fnserve[onnx]'"
    ) from exc

__all__ = ["ModelSignature", "OnnxRuntimeBackend", "OnnxRuntimeBackendFactory", "describe"]

# Triton's ORT backend parameter keys; unlike Triton (0: all cores) the default is 1 thread,
# because instances are the unit of parallelism here and N instances x all cores oversubscribes.
INTRA_OP_KEY = "intra_op_thread_count"
INTER_OP_KEY = "inter_op_thread_count"

# onnxruntime's type strings -> protocol datatypes.
_DATATYPES = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(string)": "BYTES",
    "tensor(bfloat16)": "BF16",
}
# fnserve carries BF16 as raw uint16 bits, which onnxruntime's numpy API cannot hand over as
# bfloat16; refusing such models at load beats failing every request.
_UNSERVED = frozenset({"BF16"})


def describe(path: Path) -> ModelSignature:
    """The inputs and outputs `path` declares, for completing a config from the model file.

    The session is built without graph optimizations and with one thread: only its metadata
    is read.

    Raises:
        RepositoryError: the file is missing or not a valid ONNX model, or a tensor has a type
            fnserve cannot serve (sequences, maps, sparse tensors).
    """
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return _signature(path, _open(path, options, [CPU], f"model file {path}"))


class OnnxRuntimeBackend:
    """Runs one `InferenceSession` on the instance's device.

    Inputs go to the session as given (onnxruntime refuses a wrong dtype; nothing is cast), but
    BYTES inputs are decoded to `str` and string outputs encoded back to `bytes`: onnxruntime's
    Python API speaks `str`, and would turn `b"a"` into the text "b'a'".

    Args:
        spec: the model file and its configuration.
        context: which instance this is; KIND_GPU instances run on `context.device`.

    Raises:
        RepositoryError: the file cannot be loaded, the device cannot be used, a thread-count
            parameter is not a number, or the config does not match the file.
    """

    is_async = False

    def __init__(self, spec: ModelFileSpec, context: InstanceContext) -> None:
        config = spec.config
        where = f"model '{config.name}' ({spec.path})"
        self._model = config.name
        providers = execution_providers(
            where, spec.accelerators, context.kind, context.device, ort.get_available_providers()
        )
        if any(name == TENSORRT for name, _ in providers):
            _load_tensorrt_libraries()
        options = _session_options(where, context.parameters)
        session = _open(spec.path, options, providers, where)
        _check_started(where, context.device, providers, session.get_providers())
        signature = _signature(spec.path, session)
        _check_config(where, spec, signature)
        self._session: Any = session
        self._outputs = [t.name for t in config.outputs]
        self._text_inputs = {t.name for t in signature.inputs if t.datatype == "BYTES"}
        self._text_outputs = {t.name for t in signature.outputs if t.datatype == "BYTES"}

    @property
    def session(self) -> Any:
        """The onnxruntime session (None once unloaded), for diagnostics and tests."""
        return self._session

    def execute(
        self, inputs: Mapping[str, Array], parameters: Sequence[Mapping[str, ParamValue]]
    ) -> dict[str, Array]:
        """Run the session; the runner turns what onnxruntime raises into ModelExecutionError."""
        feed = {
            name: self._decode(name, array) if name in self._text_inputs else array
            for name, array in inputs.items()
        }
        results = self._session.run(self._outputs, feed)
        return {
            name: _encode(array) if name in self._text_outputs else array
            for name, array in zip(self._outputs, results, strict=True)
        }

    async def aexecute(
        self, inputs: Mapping[str, Array], parameters: Sequence[Mapping[str, ParamValue]]
    ) -> dict[str, Array]:
        raise NotImplementedError("the onnxruntime backend is synchronous (is_async is False)")

    def unload(self) -> None:
        self._session = None  # the session's memory goes with its last reference

    def _decode(self, name: str, array: Array) -> Array:
        items = np.asarray(array, dtype=np.object_)
        try:
            text = [b.decode() if isinstance(b, bytes) else b for b in items.ravel()]
        except UnicodeDecodeError as exc:
            raise InvalidInputError(
                f"model '{self._model}' input '{name}': onnxruntime string tensors hold UTF-8 "
                f"text, got bytes that are not ({exc.reason} at byte {exc.start})"
            ) from None
        return np.array(text, dtype=np.object_).reshape(items.shape)


class OnnxRuntimeBackendFactory:
    """Builds `OnnxRuntimeBackend`s for a model file."""

    name = "onnxruntime"
    process_isolation = False  # instances are native sessions: threads release the GIL

    def __init__(self, spec: ModelFileSpec) -> None:
        self.spec = spec

    def create(self, context: InstanceContext) -> OnnxRuntimeBackend:
        return OnnxRuntimeBackend(self.spec, context)


def _open(path: Path, options: Any, providers: list[Any], where: str) -> Any:
    """An InferenceSession, or a RepositoryError saying which file failed and why."""
    try:
        return ort.InferenceSession(str(path), sess_options=options, providers=providers)
    except Exception as exc:  # onnxruntime's own classes (InvalidProtobuf, NoSuchFile, Fail)
        raise RepositoryError(
            f"{where}: onnxruntime cannot load {path.name}: {type(exc).__name__}: {exc}"
        ) from exc


def _session_options(where: str, parameters: Mapping[str, str]) -> Any:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = _thread_count(where, parameters, INTRA_OP_KEY)
    options.inter_op_num_threads = _thread_count(where, parameters, INTER_OP_KEY)
    return options


def _thread_count(where: str, parameters: Mapping[str, str], key: str) -> int:
    raw = parameters.get(key, "1")
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise RepositoryError(
            f"{where}: parameter {key} must be an integer >= 0 (0: onnxruntime's default), "
            f"got {raw!r}"
        )
    return value


def _load_tensorrt_libraries() -> None:
    """Load libnvinfer from the `tensorrt` wheel, if installed, before onnxruntime's TensorRT
    provider looks for it: the wheel keeps the libraries off the loader's path, and a library
    already loaded is found by its name."""
    try:
        importlib.import_module("tensorrt")
    except ImportError:
        pass  # then the system's TensorRT, if any; a failure shows in _check_started


def _check_started(where: str, device: str, wanted: list[Any], started: list[str]) -> None:
    """onnxruntime falls back to the next provider (with a log line) when one fails to start;
    serving on another device than configured would be a silent surprise, so it fails."""
    for name, _ in wanted:
        if name not in started:
            raise RepositoryError(
                f"{where}: onnxruntime could not start {name} on {device} (check the "
                f"libraries it needs: CUDA and cuDNN for CUDA, TensorRT for TensorRT; "
                f"onnxruntime's log says which is missing)"
            )


def _signature(path: Path, session: Any) -> ModelSignature:
    return ModelSignature(
        inputs=tuple(_tensor(path, arg) for arg in session.get_inputs()),
        outputs=tuple(_tensor(path, arg) for arg in session.get_outputs()),
    )


def _tensor(path: Path, arg: Any) -> Tensor:
    """One graph input or output (an onnxruntime NodeArg) as a declaration with full dims."""
    datatype = _DATATYPES.get(str(arg.type))
    if datatype is None:
        raise RepositoryError(
            f"model file {path}: tensor '{arg.name}' has type {arg.type}, which fnserve cannot "
            f"serve (supported: {', '.join(sorted(_DATATYPES))})"
        )
    shape = arg.shape or []  # None for a tensor of unknown rank
    dims = [d if isinstance(d, int) and d >= 0 else -1 for d in shape]
    return Tensor(str(arg.name), datatype, dims)


def _check_config(where: str, spec: ModelFileSpec, signature: ModelSignature) -> None:
    """The config's tensors exist in the file with the same datatypes and dims, and every
    input the file needs is declared: a mismatch fails the load instead of every request."""
    pairs = pair_declared(where, spec.config, signature.inputs, signature.outputs, "model file")
    for kind, tensor, found in pairs:
        if found.datatype != tensor.datatype:
            raise RepositoryError(
                f"{where}: {kind} '{tensor.name}' is {tensor.datatype} in the config but "
                f"{found.datatype} in the model file"
            )
        _check_dims(where, kind, tensor, found.dims, spec.config.max_batch_size)
        if found.datatype in _UNSERVED:
            raise RepositoryError(
                f"{where}: {kind} '{tensor.name}' is {found.datatype}, which the "
                f"onnxruntime backend does not serve"
            )


def _check_dims(
    where: str, kind: str, tensor: Tensor, file_dims: Sequence[int], max_batch_size: int
) -> None:
    """Triton's CompareDimsSupported: with max_batch_size > 0 the file's first dim must be -1
    and the rest match the config's dims; a -1 in the file accepts any config dim. A tensor the
    file gives no shape (a scalar, or of unknown rank) is not compared, as in Triton."""
    if not file_dims:
        return
    batching = max_batch_size > 0
    if batching and file_dims[0] != -1:
        raise RepositoryError(
            f"{where}: {kind} '{tensor.name}' has shape {list(file_dims)} in the model file, "
            f"whose first dimension must be -1 (dynamic) for max_batch_size {max_batch_size} "
            f"(the config's dims {list(tensor.model_dims)} follow the batch dimension)"
        )
    dims = tensor.model_dims  # a reshape is what the model itself sees
    full = [-1, *dims] if batching else list(dims)
    if len(full) != len(file_dims) or any(
        f != -1 and f != d for f, d in zip(file_dims, full, strict=True)
    ):
        shape = f", shape {full} with the batch dimension" if batching else ""
        said = "dims" if tensor.reshape is None else "reshape"
        raise RepositoryError(
            f"{where}: {kind} '{tensor.name}' has {said} {list(dims)} in the config"
            f"{shape}, but the model file's shape is {list(file_dims)}"
        )


def _encode(array: Array) -> Array:
    """onnxruntime's string output (an object array of str) as fnserve's BYTES (of bytes)."""
    items = np.asarray(array, dtype=np.object_)
    data = [s.encode() if isinstance(s, str) else s for s in items.ravel()]
    return np.array(data, dtype=np.object_).reshape(items.shape)
