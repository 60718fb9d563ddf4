"""The PyTorch backend (Triton's platform `pytorch_libtorch`): one module per instance runs a
repository's TorchScript `model.pt`, or a `torch.export` program saved as `.pt2`.

As in Triton's libtorch backend, inputs are passed to the module positionally, in the config's
input order (Triton's `INPUT__0` names included), and a returned tuple or list maps to the
config's outputs in order; a returned dict is keyed by output name. A config that leaves the
tensors out is completed from the file (`describe`, in `pytorch_signature`).

torch is optional (extra `torch`). Importing this module without it raises an ImportError that
says how to install it, which the registry turns into a load error naming the model; servers of
`@model` functions or ONNX models never import it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fnserve.backends.base import ModelFileSpec
from fnserve.errors import RepositoryError
from fnserve.model import InstanceContext
from fnserve.types import Array, ParamValue

try:
    import torch
except ImportError as exc:  # re-raised with the install line: the bare name says too little
    raise ImportError(
        f"fnserve's pytorch backend needs the torch package ({exc}); pip install 'fnserve[torch]'"
    ) from exc
from torch.export.passes import move_to_device_pass

from fnserve.backends.pytorch_signature import EXPORTED_SUFFIX, describe

__all__ = ["PyTorchBackend", "PyTorchBackendFactory", "describe"]

# Triton's libtorch parameter key. torch's intra-op pool is process-wide: the last instance
# loaded with the key sets it for every torch model of the server. Without it torch's own
# default (the machine's cores) stays.
INTRA_OP_KEY = "INTRA_OP_THREAD_COUNT"
# Tensors cannot hold strings; a model declaring one would fail every request, so it fails
# the load instead.
_UNSERVED = frozenset({"BYTES"})


class PyTorchBackend:
    """Runs one TorchScript or exported module on the instance's device under inference mode.

    Inputs become tensors without a copy where numpy allows it (a writable array; read-only
    request buffers are copied, so an in-place op in the model cannot write into them) and move
    to the device; outputs come back to the CPU as numpy arrays. BF16 travels as its uint16
    bits both ways. Nothing is cast: a dtype the model does not expect fails in the model.

    Args:
        spec: the model file and its configuration.
        context: which instance this is; KIND_GPU instances run on `context.device`.

    Raises:
        RepositoryError: the file cannot be loaded, the device cannot be used, the thread-count
            parameter is not a number, or the config declares a BYTES tensor.
    """

    is_async = False

    def __init__(self, spec: ModelFileSpec, context: InstanceContext) -> None:
        config = spec.config
        where = f"model '{config.name}' ({spec.path})"
        for kind, tensors in (("input", config.inputs), ("output", config.outputs)):
            for tensor in tensors:
                if tensor.datatype in _UNSERVED:
                    raise RepositoryError(
                        f"{where}: {kind} '{tensor.name}' is {tensor.datatype}, which the "
                        f"pytorch backend does not serve (torch tensors cannot hold strings)"
                    )
        device = _device(where, context)
        threads = _thread_count(where, context.parameters)
        if threads:
            torch.set_num_threads(threads)
        self._device = device
        self._module: Any = _load(where, spec.path, device)
        self._inputs = [t.name for t in config.inputs]
        self._outputs = [t.name for t in config.outputs]
        self._bf16 = {t.name for t in (*config.inputs, *config.outputs) if t.datatype == "BF16"}

    @property
    def module(self) -> Any:
        """The loaded module (None once unloaded), for diagnostics and tests."""
        return self._module

    @property
    def device(self) -> torch.device:
        """Where the module runs."""
        return self._device

    def execute(
        self, inputs: Mapping[str, Array], parameters: Sequence[Mapping[str, ParamValue]]
    ) -> dict[str, Array]:
        """Run the module; the runner turns what torch raises into ModelExecutionError.

        An optional input a batch lacks is passed as None, keeping the later ones in place.
        """
        args = [
            None if name not in inputs else self._tensor(name, inputs[name])
            for name in self._inputs
        ]
        with torch.inference_mode():
            result = self._module(*args)
            return self._outputs_of(result)

    async def aexecute(
        self, inputs: Mapping[str, Array], parameters: Sequence[Mapping[str, ParamValue]]
    ) -> dict[str, Array]:
        raise NotImplementedError("the pytorch backend is synchronous (is_async is False)")

    def unload(self) -> None:
        self._module = None  # its parameters' memory goes with the last reference
        if self._device.type == "cuda":
            torch.cuda.empty_cache()  # hand the freed blocks back for the next model

    def _tensor(self, name: str, array: Array) -> torch.Tensor:
        shareable = array.flags.writeable and array.dtype.isnative
        if not shareable or min(array.strides, default=0) < 0:
            array = np.array(array, dtype=array.dtype.newbyteorder("="))  # a private copy
        tensor = torch.from_numpy(array)
        if name in self._bf16:
            tensor = tensor.view(torch.bfloat16)
        return tensor.to(self._device)

    def _outputs_of(self, result: Any) -> dict[str, Array]:
        """A tensor, a tuple or list of them (in the config's order), or a dict by name."""
        if isinstance(result, torch.Tensor):
            result = (result,)
        if isinstance(result, Mapping):
            missing = [name for name in self._outputs if name not in result]
            if missing:
                raise ValueError(
                    f"the module returned a dict without output(s) {', '.join(missing)} "
                    f"(it has {', '.join(map(str, result)) or 'none'})"
                )
            return {name: self._array(name, result[name]) for name in self._outputs}
        if not isinstance(result, tuple | list) or len(result) != len(self._outputs):
            got = f"{len(result)} values" if isinstance(result, tuple | list) else _kind(result)
            raise ValueError(
                f"the module returned {got}; the config declares {len(self._outputs)} "
                f"output(s) ({', '.join(self._outputs)}), to be returned as a tensor, a "
                f"tuple or list in that order, or a dict by name"
            )
        return {
            name: self._array(name, value)
            for name, value in zip(self._outputs, result, strict=True)
        }

    def _array(self, name: str, value: Any) -> Array:
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"output '{name}' is {_kind(value)}, not a tensor")
        value = value.detach().cpu()
        if value.dtype == torch.bfloat16:
            value = value.view(torch.uint16)  # fnserve's BF16 is its raw bits
        array: Array = value.numpy()
        return array


class PyTorchBackendFactory:
    """Builds `PyTorchBackend`s for a model file."""

    name = "pytorch"
    process_isolation = False  # instances are native modules: torch ops release the GIL

    def __init__(self, spec: ModelFileSpec) -> None:
        self.spec = spec

    def create(self, context: InstanceContext) -> PyTorchBackend:
        return PyTorchBackend(self.spec, context)


def _load(where: str, path: Path, device: torch.device) -> Any:
    """The module of `path` on `device`, in eval mode; a RepositoryError names the file."""
    if not path.is_file():
        raise RepositoryError(f"{where}: model file {path.name} does not exist")
    try:
        if path.suffix == EXPORTED_SUFFIX:
            program = torch.export.load(str(path))
            program = move_to_device_pass(program, device)
            # an exported module has no train/eval mode: it was fixed at export
            return program.module()
        module = torch.jit.load(str(path), map_location=device)  # type: ignore[no-untyped-call]
        module.eval()
        return module
    except Exception as exc:  # torch's own errors (a corrupt zip, an unknown operator)
        kind = "torch.export program" if path.suffix == EXPORTED_SUFFIX else "TorchScript file"
        raise RepositoryError(
            f"{where}: torch cannot load {path.name} as a {kind}: {type(exc).__name__}: {exc}"
        ) from exc


def _device(where: str, context: InstanceContext) -> torch.device:
    """The CPU for KIND_CPU; the instance's CUDA device for KIND_GPU, which must exist."""
    if context.kind != "KIND_GPU":
        return torch.device("cpu")
    return cuda_device(where, context, "install a CUDA build of torch, or use KIND_CPU")


def cuda_device(where: str, context: InstanceContext, remedy: str) -> torch.device:
    """The instance's CUDA device `cuda:N`, which must exist (`remedy` ends the message when
    torch has no CUDA device at all). Shared with the tensorrt backend, whose memory is torch's.

    Raises:
        RepositoryError: no CUDA in this torch, a malformed device, or one that does not exist.
    """
    if not torch.cuda.is_available():
        raise RepositoryError(
            f"{where} asks for KIND_GPU but this torch has no CUDA device (a CPU-only build, "
            f"or no GPU or driver); {remedy}"
        )
    prefix, _, index = context.device.partition(":")
    if prefix != "cuda" or not index.isdigit():
        raise RepositoryError(f"{where}: KIND_GPU needs a device 'cuda:N', got {context.device!r}")
    if int(index) >= torch.cuda.device_count():
        raise RepositoryError(
            f"{where}: device {context.device} does not exist (torch sees "
            f"{torch.cuda.device_count()} CUDA device(s))"
        )
    return torch.device(context.device)


def _thread_count(where: str, parameters: Mapping[str, str]) -> int:
    """The INTRA_OP_THREAD_COUNT parameter; 0 when absent (torch's setting stays)."""
    raw = parameters.get(INTRA_OP_KEY, "0")
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise RepositoryError(
            f"{where}: parameter {INTRA_OP_KEY} must be an integer >= 0 (0: torch's default), "
            f"got {raw!r}"
        )
    return value


def _kind(value: Any) -> str:
    return "None" if value is None else f"a {type(value).__name__}"
