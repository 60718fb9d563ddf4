"""The TensorRT backend (Triton's platform `tensorrt_plan`): each instance deserializes the
repository's `model.plan` on its GPU (TensorRT 10 API) and runs it with its own execution
context on its own CUDA stream, on the instance's thread (never the event loop).

Device memory and streams are torch's: inputs are copied to CUDA tensors from torch's caching
allocator, outputs are allocated the same way at the shapes the context infers, and
`execute_async_v3` runs on a `torch.cuda.Stream` per instance; the copy back to the host waits
for it. torch rather than cuda-python because the pytorch backend already depends on it and
its allocator and streams are well kept; the extra `tensorrt` brings both packages.

Dynamic shapes go through optimization profile 0 (Triton's default): each input's shape is
checked against the profile's min and max before `set_input_shape`, so a request outside it
fails with both bounds instead of a TensorRT error. Each instance holds its own engine, as
Triton does for engines with dynamic shapes (an execution context per profile at a time).

tensorrt and torch are optional. Importing this module without them raises an ImportError that
says how to install them, which the registry turns into a load error naming the model; servers
of other models never import it.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fnserve.backends.base import ModelFileSpec, ModelSignature
from fnserve.backends.plan import (
    PROFILE,
    EngineIO,
    EngineTensor,
    check_config,
    check_shape,
    protocol_datatype,
)
from fnserve.errors import InvalidInputError, RepositoryError
from fnserve.model import InstanceContext
from fnserve.tensors import numpy_dtype
from fnserve.types import Array, ParamValue

try:
    import tensorrt as trt
    import torch

    from fnserve.backends.pytorch import cuda_device  # torch places the engines' memory
except ImportError as exc:  # re-raised with the install line: the bare name says too little
    raise ImportError(
        f"fnserve's tensorrt backend needs the tensorrt and torch packages ({exc}); "
        f"pip install 'fnserve[tensorrt]'"
    ) from exc

__all__ = ["TensorRTBackend", "TensorRTBackendFactory", "describe"]

# Deserializing engines is not thread-safe (Triton's TensorRT backend serializes it too).
_LOAD_LOCK = threading.Lock()
_TORCH_DTYPES = {
    "FP32": torch.float32,
    "FP16": torch.float16,
    "BF16": torch.bfloat16,
    "INT8": torch.int8,
    "INT32": torch.int32,
    "INT64": torch.int64,
    "BOOL": torch.bool,
    "UINT8": torch.uint8,
}


@functools.cache
def _logger() -> Any:
    """One logger for the process, as TensorRT wants; its messages go to stderr."""
    return trt.Logger(trt.Logger.WARNING)


def describe(path: Path, gpu: int = 0) -> ModelSignature:
    """The inputs, outputs and batch limit of a plan, to complete its config (on GPU `gpu`:
    a plan is read by deserializing it on the GPU it was built for).

    Raises:
        RepositoryError: no CUDA device, or the plan cannot be deserialized or served.
    """
    where = f"model file {path}"
    if not torch.cuda.is_available():
        raise RepositoryError(
            f"{where}: a TensorRT plan is read on a CUDA GPU, and this process sees none"
        )
    with torch.cuda.device(gpu):
        runtime = trt.Runtime(_logger())
        engine = _deserialize(where, path, runtime)
        try:
            return read_io(where, engine).signature()
        finally:
            del engine  # before its runtime


def read_io(where: str, engine: Any) -> EngineIO:
    """An engine's inputs and outputs (names, datatypes, shapes, profile bounds).

    Raises:
        RepositoryError: a shape tensor, a non-linear format or a datatype fnserve cannot serve.
    """
    return EngineIO(
        tuple(
            _tensor(where, engine, engine.get_tensor_name(i)) for i in range(engine.num_io_tensors)
        )
    )


def _tensor(where: str, engine: Any, name: str) -> EngineTensor:
    if engine.is_shape_inference_io(name):
        raise RepositoryError(
            f"{where}: tensor '{name}' is a shape tensor, which fnserve's tensorrt backend "
            f"does not serve"
        )
    if engine.get_tensor_format(name) != trt.TensorFormat.LINEAR:
        raise RepositoryError(
            f"{where}: tensor '{name}' has a non-linear format, which fnserve's tensorrt "
            f"backend does not serve"
        )
    dtype = engine.get_tensor_dtype(name)
    datatype = protocol_datatype(dtype.name)
    if datatype is None:
        raise RepositoryError(
            f"{where}: tensor '{name}' is {dtype.name}, which has no protocol datatype "
            f"(served: {', '.join(_TORCH_DTYPES)})"
        )
    is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
    dims = tuple(int(d) for d in engine.get_tensor_shape(name))
    low = high = dims
    if is_input and -1 in dims:
        low, _, high = (
            tuple(int(d) for d in s) for s in engine.get_tensor_profile_shape(name, PROFILE)
        )
    return EngineTensor(name, is_input, datatype, dims, low, high)


def _deserialize(where: str, path: Path, runtime: Any) -> Any:
    """The engine of `path` on the current CUDA device; a RepositoryError says why not."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RepositoryError(f"{where}: cannot read {path.name}: {exc}") from exc
    with _LOAD_LOCK:
        try:
            engine = runtime.deserialize_cuda_engine(data)
        except Exception as exc:  # TensorRT's own errors
            raise RepositoryError(
                f"{where}: TensorRT cannot deserialize {path.name}: {type(exc).__name__}: {exc}"
            ) from exc
    if engine is None:  # TensorRT logged why (on stderr)
        raise RepositoryError(
            f"{where}: TensorRT {trt.__version__} cannot deserialize {path.name} on "
            f"{torch.cuda.get_device_name()}: a corrupt file, or a plan built by another "
            f"TensorRT version or for another GPU (TensorRT's log says which)"
        )
    return engine


class TensorRTBackend:
    """Runs one engine with one execution context on one CUDA stream of the instance's GPU.

    Inputs are checked against the optimization profile and copied to the GPU; every output of
    the engine is bound (TensorRT needs them all) and the declared ones come back to the host
    as numpy arrays. BF16 travels as its uint16 bits both ways. Nothing is cast.

    Args:
        spec: the plan file and its configuration.
        context: which instance this is; it must be a KIND_GPU instance.

    Raises:
        RepositoryError: no CUDA device for it, the plan cannot be deserialized, or the config
            does not match the engine.
    """

    is_async = False

    def __init__(self, spec: ModelFileSpec, context: InstanceContext) -> None:
        config = spec.config
        where = f"model '{config.name}' ({spec.path})"
        self._model = config.name
        self._device = _device(where, context)
        with torch.cuda.device(self._device):
            self._runtime: Any = trt.Runtime(_logger())  # must outlive its engine
            self._engine: Any = _deserialize(where, spec.path, self._runtime)
            self._io = read_io(where, self._engine)
            check_config(where, config, self._io)
            self._context: Any = self._engine.create_execution_context()
            if self._context is None:
                raise RepositoryError(
                    f"{where}: TensorRT could not create an execution context on "
                    f"{self._device} (out of GPU memory?)"
                )
            self._stream = torch.cuda.Stream(self._device)  # type: ignore[no-untyped-call]
        self._declared = [t.name for t in config.outputs]

    @property
    def engine(self) -> Any:
        """The deserialized engine (None once unloaded), for diagnostics and tests."""
        return self._engine

    @property
    def device(self) -> torch.device:
        """Where the engine runs."""
        return self._device

    def execute(
        self, inputs: Mapping[str, Array], parameters: Sequence[Mapping[str, ParamValue]]
    ) -> dict[str, Array]:
        """Run the engine; the runner turns what is raised here into ModelExecutionError
        (InvalidInputError, for a shape outside the profile, reaches the client as is)."""
        with torch.cuda.device(self._device), torch.cuda.stream(self._stream):
            held = [self._bind_input(t, inputs[t.name]) for t in self._io.inputs]
            outputs = {t.name: self._bind_output(t) for t in self._io.outputs}
            if not self._context.execute_async_v3(self._stream.cuda_stream):
                raise RuntimeError("TensorRT's execute_async_v3 failed (TensorRT's log says why)")
            # `.cpu()` copies on this stream and waits for it, so the run has finished after it
            result = {name: _host(outputs[name]) for name in self._declared}
        del held  # only now may the inputs' device memory be reused
        return result

    async def aexecute(
        self, inputs: Mapping[str, Array], parameters: Sequence[Mapping[str, ParamValue]]
    ) -> dict[str, Array]:
        raise NotImplementedError("the tensorrt backend is synchronous (is_async is False)")

    def unload(self) -> None:
        # the context before its engine, the engine before its runtime
        self._context = None
        self._engine = None
        self._runtime = None
        with torch.cuda.device(self._device):
            torch.cuda.empty_cache()  # hand the freed blocks back for the next model

    def _bind_input(self, tensor: EngineTensor, array: Array) -> torch.Tensor:
        check_shape(self._model, tensor, array.shape)
        expected = numpy_dtype(tensor.datatype)
        if array.dtype != expected:
            raise InvalidInputError(
                f"model '{self._model}' input '{tensor.name}': expected {tensor.datatype} "
                f"({expected}), got {array.dtype}"
            )
        on_device = _device_copy(array, tensor.datatype, self._device)
        if not self._context.set_input_shape(tensor.name, tuple(array.shape)):
            raise InvalidInputError(
                f"model '{self._model}' input '{tensor.name}': TensorRT refused shape "
                f"{list(array.shape)}"
            )
        self._context.set_tensor_address(tensor.name, on_device.data_ptr())
        return on_device

    def _bind_output(self, tensor: EngineTensor) -> torch.Tensor:
        shape = tuple(int(d) for d in self._context.get_tensor_shape(tensor.name))
        if any(d < 0 for d in shape):
            raise RuntimeError(
                f"output '{tensor.name}' has a data-dependent shape {list(shape)}, which "
                f"fnserve's tensorrt backend does not serve"
            )
        out = torch.empty(shape, dtype=_TORCH_DTYPES[tensor.datatype], device=self._device)
        self._context.set_tensor_address(tensor.name, out.data_ptr())
        return out


class TensorRTBackendFactory:
    """Builds `TensorRTBackend`s for a plan file."""

    name = "tensorrt"
    process_isolation = False  # instances are native engines: TensorRT releases the GIL

    def __init__(self, spec: ModelFileSpec) -> None:
        self.spec = spec

    def create(self, context: InstanceContext) -> TensorRTBackend:
        return TensorRTBackend(self.spec, context)


def _device(where: str, context: InstanceContext) -> torch.device:
    """The instance's CUDA device, which must exist: TensorRT plans run on GPUs only."""
    if context.kind != "KIND_GPU":
        raise RepositoryError(
            f"{where}: TensorRT plans run on a CUDA GPU only, and this instance is placed on "
            f"the CPU (KIND_CPU in the config, or KIND_AUTO where no CUDA device was found); "
            f"serve it on a machine with a GPU, its driver and pip install 'fnserve[tensorrt]'"
        )
    return cuda_device(where, context, "pip install 'fnserve[tensorrt]' on a machine with a GPU")


def _device_copy(array: Array, datatype: str, device: torch.device) -> torch.Tensor:
    """`array` on `device` (a copy; read-only or strided request buffers go through a private
    contiguous copy first, as torch.from_numpy needs)."""
    if not (array.flags.writeable and array.flags.c_contiguous and array.dtype.isnative):
        array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("="))
        if not array.flags.writeable:
            array = array.copy()
    tensor = torch.from_numpy(array)
    if datatype == "BF16":
        tensor = tensor.view(torch.bfloat16)  # fnserve's BF16 is its raw uint16 bits
    return tensor.to(device)


def _host(tensor: torch.Tensor) -> Array:
    value = tensor.cpu()
    if value.dtype == torch.bfloat16:
        value = value.view(torch.uint16)
    array: Array = value.numpy()
    return array
