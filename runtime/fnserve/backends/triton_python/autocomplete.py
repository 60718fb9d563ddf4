"""Triton's `auto_complete_config`: a python-backend model may complete its own config.

Triton calls the `TritonPythonModel.auto_complete_config(auto_complete_model_config)`
staticmethod, when the class defines one, before the model loads: it gets the config.pbtxt (or
an empty config) as a `pb_utils.ModelConfig`, may add inputs and outputs, set
`max_batch_size`, turn dynamic batching on or add warmup samples, and returns it. fnserve does
the same while it reads the model directory, so the completed config is what the model
serves with and what the config API shows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format

from fnserve.backends.triton_python import pb_utils
from fnserve.backends.triton_python.backend import MODEL_CLASS, import_model
from fnserve.config.pbtxt import parse_config
from fnserve.errors import RepositoryError
from fnserve.protocol import model_config_pb2 as pb

HOOK = "auto_complete_config"


def auto_complete(message: pb.ModelConfig, file: Path) -> bool:
    """Let the model in `file` complete `message` in place; False when it has no hook.

    The file is imported only when its text names the hook (importing runs its code).

    Raises:
        RepositoryError: the file fails to import, the hook raises or returns something else
            than the config, or the completed config is not a valid model config.
    """
    try:
        if HOOK not in file.read_text(errors="replace"):
            return False
    except OSError as exc:
        raise RepositoryError(f"cannot read '{file}': {exc}") from exc
    hook = getattr(getattr(import_model(file), MODEL_CLASS, None), HOOK, None)
    if not callable(hook):
        return False
    config = pb_utils.ModelConfig(_as_dict(message))
    try:
        result = hook(config)
    except Exception as exc:  # the user's code: it fails the load, with the reason
        raise RepositoryError(
            f"{MODEL_CLASS}.{HOOK} in '{file}' failed: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(result, pb_utils.ModelConfig):
        raise RepositoryError(
            f"{MODEL_CLASS}.{HOOK} in '{file}' must return the config it was given "
            f"(a pb_utils.ModelConfig), returned {type(result).__name__}"
        )
    completed = pb.ModelConfig()
    where = f"{MODEL_CLASS}.{HOOK} in '{file}'"
    try:
        json_format.ParseDict(result.as_dict(), completed)
    except json_format.ParseError as exc:
        raise RepositoryError(f"{where} made an invalid config: {exc}") from exc
    # the same checks as config.pbtxt's: a field fnserve does not implement is refused
    message.CopyFrom(parse_config(text_format.MessageToString(completed), where))
    return True


def _as_dict(message: pb.ModelConfig) -> dict[str, Any]:
    """Triton's JSON form, with dims as numbers (protobuf's JSON writes int64 as text)."""
    doc = json_format.MessageToDict(message, preserving_proto_field_name=True)
    for kind in ("input", "output"):
        for tensor in doc.get(kind, []):
            tensor["dims"] = [int(d) for d in tensor.get("dims", [])]
    return doc
