"""What a PyTorch model file says of its tensors, to complete a config that leaves them out.

A `torch.export` program (`.pt2`) records everything: its inputs' names (the arguments of
`forward`), every tensor's dtype and shape, which dimensions were exported dynamic and their
bounds. Its outputs are named by what `forward` returns: the keys of a dict, else `OUTPUT__0`,
`OUTPUT__1`, ... in order (Triton's libtorch naming). A first dimension dynamic in every tensor
is the batch dimension, its exported upper bound the largest batch.

A TorchScript file (`.pt`) records only the names and number of `forward`'s arguments: no dtype,
no shape. fnserve reads the rest from how the graph uses each input: an input read by a layer
with weights (`linear`, `matmul` by a parameter, a convolution, an embedding lookup) gets that
layer's dtype, rank and feature size; any other input is taken as a floating tensor of rank 2
in the module's parameter dtype (float32 without parameters). Those dims stay variable (-1)
where the graph fixes none. The outputs are then read from one run of the module on zeros of
those shapes (every variable dim 1). Because nothing in the file marks a batch dimension,
such a model is served without batching (`max_batch_size` 0, dims all variable), so requests
of any batch size pass unchanged; a config.pbtxt that declares the tensors is the way to say
more, and a module the guess cannot run fails its load saying so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from fnserve.backends.base import ModelSignature
from fnserve.config.model_config import Tensor
from fnserve.errors import RepositoryError

EXPORTED_SUFFIX = ".pt2"  # a torch.export program; anything else is read as TorchScript

_DATATYPES = {
    torch.bool: "BOOL",
    torch.uint8: "UINT8",
    torch.int8: "INT8",
    torch.int16: "INT16",
    torch.int32: "INT32",
    torch.int64: "INT64",
    torch.float16: "FP16",
    torch.bfloat16: "BF16",
    torch.float32: "FP32",
    torch.float64: "FP64",
}
_TORCH_DTYPES = {name: dtype for dtype, name in _DATATYPES.items()}
_CONVOLUTIONS = {"aten::_convolution": 8, "aten::conv1d": 6, "aten::conv2d": 6, "aten::conv3d": 6}
_FALLBACK_RANK = 2  # [batch, features]: the shape most models without a layer hint take
_PROBE_SPATIAL = 64  # a convolution's trial height and width: past what common stems reduce


def output_names(count: int) -> list[str]:
    """Triton's libtorch names for outputs returned in order."""
    return [f"OUTPUT__{i}" for i in range(count)]


def describe(path: Path, declared_inputs: Sequence[Tensor] = ()) -> ModelSignature:
    """The inputs and outputs of a `.pt2` program or a TorchScript `.pt` file (full dims).

    Args:
        path: the model file.
        declared_inputs: (TorchScript) inputs a config already declares, with full dims:
            the trial run uses them instead of the guessed ones.

    Raises:
        RepositoryError: torch cannot read the file, or it cannot be described (inputs that
            are not tensors, outputs that are not tensors or a flat tuple, list or dict of
            them, a trial run that fails).
    """
    where = f"model file {path}"
    if path.suffix == EXPORTED_SUFFIX:
        try:
            program = torch.export.load(str(path))
        except Exception as exc:
            raise RepositoryError(
                f"{where}: torch cannot load it as a torch.export program: {exc}"
            ) from exc
        return _exported(where, program)
    try:
        module = torch.jit.load(str(path), map_location="cpu")  # type: ignore[no-untyped-call]
    except Exception as exc:
        raise RepositoryError(
            f"{where}: torch cannot load it as a TorchScript file: {exc}"
        ) from exc
    module.eval()
    return _scripted(where, module, declared_inputs)


# --- torch.export programs ---------------------------------------------------------------


def _exported(where: str, program: Any) -> ModelSignature:
    in_spec, out_spec = program.call_spec.in_spec, program.call_spec.out_spec
    args, kwargs = in_spec.children()
    if kwargs.num_leaves or any(not arg.is_leaf() for arg in args.children()):
        raise RepositoryError(
            f"{where}: fnserve completes configs of programs whose inputs are positional "
            f"tensors; declare input and output in config.pbtxt"
        )
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    inputs = tuple(
        _fake_tensor(where, name, placeholders[name].meta.get("val"))
        for name in program.graph_signature.user_inputs
    )
    output_node = next(n for n in program.graph.nodes if n.op == "output")
    values = [node.meta.get("val") for node in output_node.args[0]]
    user_outputs = values[len(values) - out_spec.num_leaves :]  # after mutated buffers
    names = _returned_names(where, out_spec)
    outputs = tuple(
        _fake_tensor(where, name, value) for name, value in zip(names, user_outputs, strict=True)
    )
    return ModelSignature(inputs, outputs, _batch_bound(program, inputs, placeholders))


def _returned_names(where: str, spec: Any) -> list[str]:
    """Output names from the structure `forward` returns (a pytree spec)."""
    if spec.is_leaf():
        return output_names(1)
    flat = all(child.is_leaf() for child in spec.children())
    if flat and spec.type is dict and all(isinstance(k, str) for k in spec.context):
        return list(spec.context)
    if flat and spec.type in (tuple, list):
        return output_names(spec.num_children)
    raise RepositoryError(
        f"{where}: forward returns {spec.type.__name__} of nested values; fnserve completes "
        f"configs of modules returning a tensor, a flat tuple or list, or a dict of tensors: "
        f"declare output in config.pbtxt"
    )


def _fake_tensor(where: str, name: str, value: Any) -> Tensor:
    if not isinstance(value, torch.Tensor) or value.dtype not in _DATATYPES:
        kind = value.dtype if isinstance(value, torch.Tensor) else type(value).__name__
        raise RepositoryError(
            f"{where}: '{name}' is {kind}, which fnserve cannot serve as a tensor; declare "
            f"input and output in config.pbtxt"
        )
    dims = [d if isinstance(d, int) else -1 for d in value.shape]  # SymInt: exported dynamic
    return Tensor(name, _DATATYPES[value.dtype], dims)


def _batch_bound(
    program: Any, inputs: Sequence[Tensor], placeholders: dict[str, Any]
) -> int | None:
    """The exported upper bound of the inputs' dynamic first dimension; None if unbounded."""
    bounds = []
    for tensor in inputs:
        first = placeholders[tensor.name].meta["val"].shape[:1]
        if not first or isinstance(first[0], int):
            return None
        found = program.range_constraints.get(first[0].node.expr)
        if found is None or not found.upper.is_Integer:  # a sympy Integer; else int_oo
            return None
        bounds.append(int(found.upper))
    return min(bounds, default=None)


# --- TorchScript -------------------------------------------------------------------------


def _scripted(where: str, module: Any, declared: Sequence[Tensor]) -> ModelSignature:
    arguments = module.forward.schema.arguments[1:]  # [0] is self
    optional = {a.name for a in arguments if _is_optional_tensor(a.type)}
    for arg in arguments:
        if not isinstance(arg.type, torch.TensorType) and arg.name not in optional:
            raise RepositoryError(
                f"{where}: forward's argument '{arg.name}' is {arg.type}; fnserve completes "
                f"configs of TorchScript modules whose inputs are tensors: declare input and "
                f"output in config.pbtxt"
            )
    if declared:
        inputs = tuple(declared)
        probe_shapes = [[1 if d < 0 else d for d in t.dims] for t in inputs]
    else:
        graph = module.inlined_graph
        values = list(graph.inputs())[1:]
        default = _parameter_dtype(module)
        guesses = [
            _guess_input(module, arg.name, value, default)
            for arg, value in zip(arguments, values, strict=True)
        ]
        inputs = tuple(
            dataclasses.replace(tensor, optional=tensor.name in optional) for tensor, _ in guesses
        )
        probe_shapes = [shape for _, shape in guesses]
    probe = [
        torch.zeros(shape, dtype=_TORCH_DTYPES.get(t.datatype))
        for t, shape in zip(inputs, probe_shapes, strict=True)
    ]
    try:
        with torch.inference_mode():
            result = module(*probe)
    except Exception as exc:
        shapes = ", ".join(
            f"{t.name} {t.datatype} {shape}" for t, shape in zip(inputs, probe_shapes, strict=True)
        )
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        raise RepositoryError(
            f"{where}: TorchScript keeps no tensor shapes or dtypes, and a trial run on zeros "
            f"of the inputs fnserve guessed ({shapes}) failed: {type(exc).__name__}: "
            f"{lines[-1] if lines else ''}; declare input and output in config.pbtxt"
        ) from exc
    return ModelSignature(inputs, _returned(where, result), guessed=not declared)


def _is_optional_tensor(kind: Any) -> bool:
    """`Optional[Tensor]` (an input the config may mark optional)."""
    return isinstance(kind, torch.OptionalType) and isinstance(
        kind.getElementType(), torch.TensorType
    )


def _returned(where: str, result: Any) -> tuple[Tensor, ...]:
    """The outputs of a trial run: names by structure, dtypes and ranks as returned."""
    if isinstance(result, torch.Tensor):
        named: list[tuple[str, Any]] = [(output_names(1)[0], result)]
    elif isinstance(result, tuple | list):
        named = list(zip(output_names(len(result)), result, strict=True))
    elif isinstance(result, dict) and all(isinstance(k, str) for k in result):
        named = list(result.items())
    else:
        named = [("the returned value", result)]
    outputs = []
    for name, value in named:
        tensor = _fake_tensor(where, name, value)
        outputs.append(Tensor(tensor.name, tensor.datatype, [-1] * len(tensor.dims)))
    return tuple(outputs)


def _parameter_dtype(module: Any) -> str:
    """The dtype of the module's floating parameters; FP32 when it has none."""
    for tensor in (*module.parameters(), *module.buffers()):
        if tensor.is_floating_point() and tensor.dtype in _DATATYPES:
            return _DATATYPES[tensor.dtype]
    return "FP32"


def _guess_input(module: Any, name: str, value: Any, default: str) -> tuple[Tensor, list[int]]:
    """An input's dtype and full dims, from the first layer with weights that reads it, and
    the shape of the zeros its trial run uses."""
    for use in value.uses():
        node, position = use.user, use.offset
        kind = node.kind()
        weight = _constant_tensor(module, node.inputsAt(1)) if node.inputsSize() > 1 else None
        if kind == "aten::embedding" and position == 1:
            return Tensor(name, "INT64", [-1] * _FALLBACK_RANK), [1] * _FALLBACK_RANK
        if weight is None or position != 0 or weight.dtype not in _DATATYPES:
            continue
        datatype = _DATATYPES[weight.dtype]
        if kind in ("aten::linear", "aten::matmul") and weight.dim() == 2:
            features = int(weight.shape[1 if kind == "aten::linear" else 0])
            return Tensor(name, datatype, [-1, features]), [1, features]
        if kind in _CONVOLUTIONS and weight.dim() >= 3:
            groups = node.inputsAt(_CONVOLUTIONS[kind]).toIValue()
            channels = int(weight.shape[1]) * groups if isinstance(groups, int) else -1
            spatial = weight.dim() - 2
            return (
                Tensor(name, datatype, [-1, channels, *[-1] * spatial]),
                [1, max(channels, 1), *[_PROBE_SPATIAL] * spatial],
            )
    return Tensor(name, default, [-1] * _FALLBACK_RANK), [1] * _FALLBACK_RANK


def _constant_tensor(module: Any, value: Any) -> torch.Tensor | None:
    """The parameter or buffer a graph value reads (`self.fc.weight`), else None."""
    path = []
    node = value.node()
    while node.kind() == "prim::GetAttr":
        path.append(node.s("name"))
        value = node.inputsAt(0)
        node = value.node()
    if not path or node.kind() != "prim::Param":  # the chain must start at `self`
        return None
    found: Any = module
    for attribute in reversed(path):
        found = getattr(found, attribute, None)
    return found if isinstance(found, torch.Tensor) else None
