"""Triton-layout model directories: `<name>/config.pbtxt` and `<name>/<version>/model.<ext>`.

A directory is a model directory when it holds a config.pbtxt or a numbered version folder.
Its config.pbtxt (optional) is parsed against `model_config.proto`; what it leaves out is
completed from the model file as Triton does by default (input and output names, datatypes
and shapes; a batch dimension when every tensor's first dimension is dynamic: `max_batch_size`
4 for ONNX, the optimization profile's largest batch for a TensorRT plan, the exported bound
for a torch.export program (else 4), and dynamic batching when that is over 1). TorchScript
files keep no shapes: `backends.pytorch_signature` says what fnserve reads instead. The
version policy (`latest { num_versions }`, `all`, `specific { versions }`; default: the latest
one) picks the versions served. A directory that fails (a bad config, a missing or unreadable
model file) fails only its own model, with the reason.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
from dataclasses import dataclass, field
from pathlib import Path

from fnserve.backends.base import ModelFileSpec, ModelSignature
from fnserve.backends.triton_python.autocomplete import auto_complete
from fnserve.config.model_config import Tensor
from fnserve.config.pbtxt import (
    BACKEND_PLATFORMS,
    PLATFORM_BACKENDS,
    config_datatype,
    datatype,
    parse_config,
    to_accelerators,
    to_model_config,
)
from fnserve.errors import FnserveError, RepositoryError
from fnserve.protocol import model_config_pb2 as pb
from fnserve.user_modules import ImportFailure

CONFIG_FILE = "config.pbtxt"
DEFAULT_FILES = {
    "onnxruntime": "model.onnx",
    "pytorch": "model.pt",
    "tensorrt": "model.plan",
    "python": "model.py",
}
EXTENSION_BACKENDS = {".onnx": "onnxruntime", ".pt": "pytorch", ".pt2": "pytorch",
                      ".plan": "tensorrt"}  # fmt: skip
log = logging.getLogger(__name__)
DEFAULT_MAX_BATCH_SIZE = 4  # Triton's default-max-batch-size for auto-completed configs


def is_model_dir(path: Path) -> bool:
    """Whether `path` is a Triton model directory (config.pbtxt or a numbered version)."""
    if not path.is_dir():
        return False
    if (path / CONFIG_FILE).is_file():
        return True
    return any(child.is_dir() and child.name.isdigit() for child in path.iterdir())


@dataclass
class ModelDirScan:
    """What a model directory yields: one spec per served version, or the failure."""

    specs: list[ModelFileSpec] = field(default_factory=list)
    failure: ImportFailure | None = None


class ModelDirs:
    """Reads model directories, and reads one again only when its files changed (so an
    unchanged model keeps the very same specs, and a repository `load` leaves it alone)."""

    def __init__(self) -> None:
        self._known: dict[Path, tuple[str, ModelDirScan]] = {}

    def scan(self, directory: Path) -> ModelDirScan:
        digest = _digest(directory)
        known = self._known.get(directory)
        if known is not None and known[0] == digest:
            return known[1]
        try:
            found = ModelDirScan(specs=read_model_dir(directory))
        except Exception as exc:  # a bad config, or a model file its library cannot read
            detail = (
                exc.message if isinstance(exc, FnserveError) else f"{type(exc).__name__}: {exc}"
            )
            reason = f"model directory '{directory}': {detail}"
            found = ModelDirScan(failure=ImportFailure(directory, reason, ((directory.name, 1),)))
        self._known[directory] = (digest, found)
        return found


def _digest(directory: Path) -> str:
    """Changes when config.pbtxt or any file of a version folder changes (size, mtime)."""
    h = hashlib.sha1()
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            stat = path.stat()
            h.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return h.hexdigest()


def read_model_dir(directory: Path) -> list[ModelFileSpec]:
    """The specs of the versions `directory`'s policy serves.

    Raises:
        FnserveError: the config is invalid, no version exists, a model file is missing or
            cannot be described.
    """
    config_file = directory / CONFIG_FILE
    if config_file.is_file():
        message = parse_config(config_file.read_text(), str(config_file))
    else:
        message = pb.ModelConfig()
    if message.name and message.name != directory.name:
        raise RepositoryError(
            f"the config names the model '{message.name}' but its directory is "
            f"'{directory.name}'; they must match"
        )
    message.name = directory.name
    versions = _versions(directory, message)
    specs = []
    for version in versions:
        folder = directory / str(version)
        backend = _backend(message, folder)
        if backend == "ensemble":  # no model file: the steps' models do the work
            file = folder
        else:
            file = _model_file(folder, message, backend)
            if not file.is_file():
                raise RepositoryError(f"version {version} has no model file '{file.name}'")
        completed = pb.ModelConfig()
        completed.CopyFrom(message)
        if backend == "python":  # the model's own auto_complete_config, as Triton calls it
            auto_complete(completed, file)
        completed.backend = backend
        completed.platform = completed.platform or BACKEND_PLATFORMS.get(backend, "")
        _complete(completed, file, backend)
        config = to_model_config(completed, version, directory / "warmup", directory)
        specs.append(ModelFileSpec(config, file, to_accelerators(completed)))
    return specs


def _model_file(folder: Path, message: pb.ModelConfig, backend: str) -> Path:
    """The config's `default_model_filename`, else the backend's default name (for pytorch,
    `model.pt`, or `model.pt2` when only that one exists)."""
    if message.default_model_filename:
        return folder / message.default_model_filename
    default = folder / DEFAULT_FILES.get(backend, "")
    exported = folder / "model.pt2"
    if backend == "pytorch" and not default.is_file() and exported.is_file():
        return exported
    return default


def _versions(directory: Path, message: pb.ModelConfig) -> list[int]:
    present = sorted(int(c.name) for c in directory.iterdir() if c.is_dir() and c.name.isdigit())
    if not present:
        raise RepositoryError("it holds no version folder (such as '1/')")
    policy = message.version_policy
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        return present
    if choice == "specific":
        wanted = sorted(set(policy.specific.versions))
        missing = [v for v in wanted if v not in present]
        if missing:
            raise RepositoryError(f"version_policy names version(s) {missing} that do not exist")
        return wanted
    count = policy.latest.num_versions if choice == "latest" else 1
    if count < 1:
        raise RepositoryError("version_policy latest needs num_versions >= 1")
    return present[-count:]


def _backend(message: pb.ModelConfig, folder: Path) -> str:
    """The backend the config names, else the one the model file's extension implies."""
    if message.backend:
        return message.backend
    if message.platform:
        if message.platform not in PLATFORM_BACKENDS:
            raise RepositoryError(f"platform '{message.platform}' is not supported")
        return PLATFORM_BACKENDS[message.platform]
    if message.default_model_filename:
        suffix = Path(message.default_model_filename).suffix
        if suffix in EXTENSION_BACKENDS:
            return EXTENSION_BACKENDS[suffix]
    found = {
        EXTENSION_BACKENDS[p.suffix] for p in folder.iterdir() if p.suffix in EXTENSION_BACKENDS
    }
    if len(found) == 1:
        return found.pop()
    if (folder / "model.py").is_file():
        return "python"
    kinds = ", ".join(sorted(EXTENSION_BACKENDS))
    raise RepositoryError(
        f"cannot tell its backend: set `backend` or `platform` in {CONFIG_FILE}, or put one "
        f"model file ({kinds}) in '{folder.name}/'"
    )


def _complete(message: pb.ModelConfig, file: Path, backend: str) -> None:
    """Fill in what the config leaves out from the model file (Triton's auto-complete)."""
    if message.input and message.output:
        return
    signature = _describe(message, file, backend)
    if not message.max_batch_size and not message.input and signature.batchable():
        limit = signature.max_batch_size  # a plan's profile; None: the file sets no limit
        message.max_batch_size = DEFAULT_MAX_BATCH_SIZE if limit is None else limit
    if message.max_batch_size > 0 and not signature.guessed:
        _check_batchable(message.max_batch_size, signature)
        # Triton's backends turn the dynamic batcher on for a model they complete that
        # batches, whoever set max_batch_size, unless the config chose a scheduler.
        scheduled = message.HasField("dynamic_batching") or message.HasField("sequence_batching")
        if message.max_batch_size > 1 and not scheduled:
            message.dynamic_batching.SetInParent()
    strip = 1 if message.max_batch_size > 0 else 0
    if signature.guessed and not message.input:
        log.info(
            "model '%s': %s keeps no tensor shapes or dtypes; inputs completed from forward() "
            "and the layers reading them: %s; served without batching unless config.pbtxt "
            "sets max_batch_size",
            message.name,
            file.name,
            ", ".join(f"{t.name} {t.datatype} {list(t.dims)}" for t in signature.inputs),
        )
    if not message.input:
        for tensor in signature.inputs:
            _declare(message.input.add(), tensor, strip)
    if not message.output:
        for tensor in signature.outputs:
            _declare(message.output.add(), tensor, strip)


def _declare(entry: pb.ModelInput | pb.ModelOutput, tensor: Tensor, strip: int) -> None:
    """Fill a config tensor from the file's; one of the batch dimension alone becomes dims [1]
    with `reshape { shape: [] }`, as Triton completes it (dims may not be empty)."""
    entry.name = tensor.name
    entry.data_type = config_datatype(tensor.datatype)  # type: ignore[assignment]
    if isinstance(entry, pb.ModelInput):
        entry.optional = tensor.optional
    dims = tensor.dims[strip:]
    entry.dims.extend(dims or [1])
    if not dims:
        entry.reshape.SetInParent()


def _check_batchable(max_batch_size: int, signature: ModelSignature) -> None:
    """Triton's autocomplete rule: a config with max_batch_size > 0 needs a model whose every
    input and output has a dynamic (-1) first dimension; stripping a fixed one instead would
    serve a model that fails at every other batch size."""
    for tensor in (*signature.inputs, *signature.outputs):
        if not tensor.dims or tensor.dims[0] != -1:
            raise RepositoryError(
                f"the config sets max_batch_size {max_batch_size} but the model file does not "
                f"support batching: tensor '{tensor.name}' has shape {list(tensor.dims)}, and "
                f"every input and output needs a dynamic (-1) first dimension to batch; set "
                f"max_batch_size: 0, or export the model with a dynamic batch dimension"
            )


def _describe(message: pb.ModelConfig, file: Path, backend: str) -> ModelSignature:
    """What a model file declares: an ONNX file, a TensorRT plan, a torch.export program or a
    TorchScript file (their backends are optional extras)."""
    if backend == "python":
        raise RepositoryError(
            "the config must declare its inputs and outputs, or the model's "
            "TritonPythonModel.auto_complete_config must add them"
        )
    if backend not in ("onnxruntime", "tensorrt", "pytorch"):  # ensembles
        raise RepositoryError(
            f"the config must declare its inputs and outputs: fnserve completes configs from "
            f"ONNX, TorchScript and torch.export files and TensorRT plans only, and this "
            f"model's backend is '{backend}'"
        )
    try:  # the modules of optional packages
        module = importlib.import_module(f"fnserve.backends.{backend}")
    except ImportError as exc:
        raise RepositoryError(f"cannot read '{file}': {exc}") from exc
    if backend == "tensorrt":
        # on the model's first GPU, as Triton does: a plan is built for one kind of GPU
        gpu = next((g.gpus[0] for g in message.instance_group if g.gpus), 0)
        plan: ModelSignature = module.describe(file, gpu)
        return plan
    if backend == "pytorch":  # a TorchScript trial run uses the inputs a config declares
        batch = [-1] if message.max_batch_size > 0 else []
        declared = [
            Tensor(t.name, datatype(t.data_type, t.name), [*batch, *t.dims]) for t in message.input
        ]
        torch_file: ModelSignature = module.describe(file, declared)
        return torch_file
    signature: ModelSignature = module.describe(file)
    return signature
