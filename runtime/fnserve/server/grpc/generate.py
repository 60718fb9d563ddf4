"""Regenerate the protobuf and grpclib modules in `_proto/` from the `.proto` files there.

Run `python -m fnserve.server.grpc.generate` (`make proto` does). The output is deterministic for
a given grpcio-tools version, so CI can regenerate and `git diff --exit-code`.

protoc writes modules meant to sit at the top level; two rewrites make them a package:

* `import model_config_pb2` becomes `from . import model_config_pb2`, so the modules import as
  `fnserve.server.grpc._proto.*`.
* messages are registered in a private descriptor pool (`_proto/_pool.py`) instead of protobuf's
  default pool. tritonclient, grpclib and grpcio-health-checking register the very same message
  names (`inference.ModelConfig`, `grpc.health.v1.HealthCheckRequest`) in the default pool, and
  a second, different definition of a name there fails at import; a private pool lets fnserve
  and those libraries share one process (the tests run the server and tritonclient together).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent / "_proto"
PROTOS = ("model_config.proto", "grpc_service.proto", "health.proto")
_SIBLING_IMPORT = re.compile(r"^import (\w+_pb2)\b", re.MULTILINE)
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


def run_protoc() -> None:
    """Invoke grpc_tools' bundled protoc for the messages, stubs and grpclib services."""
    out = str(PROTO_DIR)
    command = [
        sys.executable, "-m", "grpc_tools.protoc", f"-I{out}",
        f"--python_out={out}", f"--pyi_out={out}",
        f"--plugin=protoc-gen-grpclib_python={_plugin()}", f"--grpclib_python_out={out}",
        *PROTOS,
    ]  # fmt: skip
    subprocess.run(command, check=True, cwd=out)
    # model_config.proto declares no service, so its grpclib module is empty.
    (PROTO_DIR / "model_config_grpc.py").unlink(missing_ok=True)


def rewrite(path: Path) -> None:
    """Make one generated module package-relative and point it at the private pool."""
    text = _SIBLING_IMPORT.sub(r"from . import \1", path.read_text())
    if path.name.endswith("_pb2.py"):
        if _DEFAULT_POOL not in text:
            raise SystemExit(f"{path.name}: protoc output changed, cannot find the pool call")
        text = text.replace(_DEFAULT_POOL, _PRIVATE_POOL)
        text = text.replace(_POOL_IMPORT, _POOL_IMPORT + "from . import _pool\n", 1)
    path.write_text(text)


def main() -> None:
    """Regenerate every module under `_proto/`."""
    run_protoc()
    for pattern in ("*_pb2.py", "*_pb2.pyi", "*_grpc.py"):
        for path in sorted(PROTO_DIR.glob(pattern)):
            rewrite(path)


if __name__ == "__main__":
    main()
