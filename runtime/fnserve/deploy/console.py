"""What `fnserve deploy` and its sibling commands print: progress, reports, example calls."""

from __future__ import annotations

import json
import sys
import threading
import time
from datetime import datetime
from types import TracebackType
from typing import Any, TextIO

_FRAMES = "|/-\\"


class Spinner:
    """A progress line on a terminal (a single line otherwise) while a call runs.

    Args:
        what: what is happening, e.g. "deploying 'plus' to http://127.0.0.1:8000".
        stream: where to write (default: stderr).
    """

    def __init__(self, what: str, stream: TextIO | None = None) -> None:
        self.what = what
        self.stream = stream or sys.stderr
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, name="spinner", daemon=True)
        self._start = time.monotonic()

    def _spin(self) -> None:
        frame = 0
        while not self._stop.wait(0.1):
            elapsed = time.monotonic() - self._start
            self.stream.write(f"\r{_FRAMES[frame % 4]} {self.what} ({elapsed:.1f} s)")
            self.stream.flush()
            frame += 1

    def __enter__(self) -> Spinner:
        if self.stream.isatty():
            self._thread.start()
        else:
            self.stream.write(f"{self.what} ...\n")
            self.stream.flush()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
            elapsed = time.monotonic() - self._start
            self.stream.write(f"\r{self.what}: {elapsed:.1f} s\n")
            self.stream.flush()


def report_lines(report: dict[str, Any]) -> list[str]:
    """A deploy or rollback answer, one line per model."""
    name, version, digest = report["name"], report["version"], report["hash"][:12]
    if report.get("unchanged"):
        head = f"deployment '{name}' version {version} (hash {digest}) already serves this content"
    else:
        head = f"deployment '{name}' version {version} (hash {digest}) serves:"
    return [head, *(_model_line(m) for m in report["models"])]


def _model_line(model: dict[str, Any]) -> str:
    return (
        f"  {model['name']} v{model['version']}: {model['state']} "
        f"(load {model['load_s']:.3f} s, warmup {model['warmup_s']:.3f} s)"
    )


def example_calls(report: dict[str, Any], server: str) -> list[str]:
    """A ready-to-paste curl and tritonclient call of the deployment's first model."""
    if not report["models"]:
        return []
    model = report["models"][0]
    inputs = [_example(t) for t in model.get("inputs", [])]
    doc = json.dumps({"inputs": inputs})
    host = server.split("://", 1)[-1]
    args = ", ".join(f"x{i}" for i in range(len(inputs)))
    return [
        "call it:",
        f"  curl -s {server}/v2/models/{model['name']}/infer -H 'Content-Type: application/json' "
        f"-d '{doc}'",
        "  python - <<'EOF'",
        "  import numpy as np, tritonclient.http as httpclient  # tritonclient.grpc: same calls",
        f"  client = httpclient.InferenceServerClient('{host}')",
        *(
            f"  x{i} = httpclient.InferInput({t['name']!r}, {t['shape']}, {t['datatype']!r}); "
            f"x{i}.set_data_from_numpy(np.{_numpy(t)})"
            for i, t in enumerate(inputs)
        ),
        f"  print(client.infer({model['name']!r}, [{args}]).get_response())",
        "  EOF",
    ]


def _example(tensor: dict[str, Any]) -> dict[str, Any]:
    shape = [1 if d < 0 else d for d in tensor["shape"]]
    count = 1
    for d in shape:
        count *= d
    value: Any = (
        "" if tensor["datatype"] == "BYTES" else (False if tensor["datatype"] == "BOOL" else 0)
    )
    return {"name": tensor["name"], "datatype": tensor["datatype"], "shape": shape,
            "data": [value] * count}  # fmt: skip


def _numpy(tensor: dict[str, Any]) -> str:
    if tensor["datatype"] == "BYTES":
        return f"full({tensor['shape']}, b'', dtype=object)"
    dtype = {"BOOL": "bool_", "BF16": "float32"}.get(tensor["datatype"], tensor["datatype"].lower())
    dtype = dtype.replace("fp", "float")
    return f"zeros({tensor['shape']}, dtype=np.{dtype})"


def deployment_lines(deployments: list[dict[str, Any]]) -> list[str]:
    """`fnserve deployments`: one block per deployment, its versions newest first."""
    if not deployments:
        return ["no deployment"]
    lines = []
    for deployment in deployments:
        models = ", ".join(
            f"{m['name']} v{m['version']} {m['state']}" for m in deployment["models"]
        )
        lines.append(f"{deployment['name']}: version {deployment['current']} serves ({models})")
        for version in reversed(deployment["versions"]):
            when = datetime.fromtimestamp(version["deployed_at"]).strftime("%Y-%m-%d %H:%M:%S")
            mark = "*" if version["version"] == deployment["current"] else " "
            lines.append(f"  {mark} v{version['version']}  {when}  {version['hash'][:12]}")
    return lines
