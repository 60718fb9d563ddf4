"""Regenerate fnserve's protobuf messages and grpclib service stubs from the `.proto` files.

Run `python tools/generate_protos.py` (`make proto` does). The output is deterministic for a
given grpcio-tools version, so CI can regenerate and `git diff --exit-code`.

Two places, because of the layering (imports point down only):

* `runtime/fnserve/protocol/`: the `.proto` files and their message modules (`*_pb2`). Plain
  protobuf, no transport: `config/` (config.pbtxt), `jobs/` and every frontend may import them.
* `runtime/fnserve/server/grpc/stubs/`: the grpclib service bases (`*_grpc`), which import
  grpclib and so belong to the gRPC frontend.

protoc writes modules meant to sit at the top level; rewrites make them packages:

* `import model_config_pb2` becomes `from . import model_config_pb2` in the messages, and
  `from fnserve.protocol import ...` in the stubs.
* messages are registered in a private descriptor pool (`protocol/_pool.py`) instead of
  protobuf's default pool. tritonclient, grpclib and grpcio-health-checking register the very
  same message names (`inference.ModelConfig`, `grpc.health.v1.HealthCheckRequest`) in the
  default pool, and a second, different definition of a name there fails at import; a private
  pool lets fnserve and those libraries share one process (the tests run both together).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "runtime" / "fnserve"
PROTOCOL_DIR = ROOT / "protocol"
STUBS_DIR = ROOT / "server" / "grpc" / "stubs"
PROTOS = ("model_config.proto", "grpc_service.proto", "health.proto", "jobs.proto")
_SIBLING_IMPORT = re.compile(r"^import (\w+_pb2)\b", re.MULTILINE)
_STUB_IMPORT = re.compile(r"^from \. import (\w+_pb2)\b", re.MULTILINE)
_DEFAULT_POOL = "_descriptor_pool.Default().AddSerializedFile("
_PRIVATE_POOL = "_pool.POOL.AddSerializedFile("
_POOL_IMPORT = "# @@protoc_insertion_point(imports)\n"


def _plugin() -> str:
    """The grpclib protoc plugin installed next to this interpreter (or on PATH)."""
    local = Path(sys.executable).with_name("protoc-gen-grpclib_python")
    found = str(local) if local.exists() else shutil.which("protoc-gen-grpclib_python")
    if found is None:
        raise SystemExit("protoc-gen-grpclib_python not found; install grpclib")
    return found


def run_protoc(out: Path) -> None:
    """Invoke grpc_tools' bundled protoc for the messages, stubs and grpclib services."""
    command = [
        sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTOCOL_DIR}",
        f"--python_out={out}", f"--pyi_out={out}",
        f"--plugin=protoc-gen-grpclib_python={_plugin()}", f"--grpclib_python_out={out}",
        *PROTOS,
    ]  # fmt: skip
    subprocess.run(command, check=True, cwd=PROTOCOL_DIR)


def message_module(text: str, name: str) -> str:
    """Make one generated message module package-relative and point it at the private pool."""
    text = _SIBLING_IMPORT.sub(r"from . import \1", text)
    if name.endswith("_pb2.py"):
        if _DEFAULT_POOL not in text:
            raise SystemExit(f"{name}: protoc output changed, cannot find the pool call")
        text = text.replace(_DEFAULT_POOL, _PRIVATE_POOL)
        text = text.replace(_POOL_IMPORT, _POOL_IMPORT + "from . import _pool\n", 1)
    return text


def stub_module(text: str) -> str:
    """Point one grpclib stub at the message modules in `fnserve.protocol`."""
    text = _SIBLING_IMPORT.sub(r"from fnserve.protocol import \1", text)
    return _STUB_IMPORT.sub(r"from fnserve.protocol import \1", text)


def main() -> None:
    """Regenerate the message modules and the grpclib stubs."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        run_protoc(out)
        for path in sorted(out.glob("*_pb2.py*")):
            (PROTOCOL_DIR / path.name).write_text(message_module(path.read_text(), path.name))
        for path in sorted(out.glob("*_grpc.py")):
            if path.name == "model_config_grpc.py":
                continue  # model_config.proto declares no service: its module is empty
            (STUBS_DIR / path.name).write_text(stub_module(path.read_text()))


if __name__ == "__main__":
    main()
