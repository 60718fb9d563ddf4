"""Export the MiniLM encoder once, to ONNX or to a torch.export program (.pt2):

    python -m examples.minilm.export [--format onnx|pt2] [OUT]

Both files take INPUT_IDS and ATTENTION_MASK (INT64 [N, 128]) and give HIDDEN (FP32
[N, 128, 384]); the batch axis N is dynamic, the sequence length fixed at SEQ_LEN. OUT defaults
to examples/minilm/.cache/minilm_encoder.{onnx,pt2}. An export is skipped when OUT exists and
is newer than the weights; torch is imported only to export.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from examples.minilm.processing import SEQ_LEN, weights_path

if TYPE_CHECKING:
    import torch

FORMATS = ("onnx", "pt2")
CACHE = Path(__file__).resolve().parent / ".cache"
MAX_BATCH = 1024  # the .pt2 program's batch bound; ONNX has none

log = logging.getLogger(__name__)


def cached(fmt: str) -> Path:
    """Where the encoder's `fmt` export is cached: examples/minilm/.cache/."""
    return CACHE / f"minilm_encoder.{fmt}"


def is_fresh(path: Path) -> bool:
    """Whether `path` exists and is newer than the weights it was exported from."""
    return path.is_file() and path.stat().st_mtime >= weights_path().stat().st_mtime


def ensure_onnx(path: str | Path | None = None) -> Path:
    """The ONNX encoder at `path` (default: the cache), exported unless it is up to date."""
    return _ensure(Path(path or cached("onnx")), _write_onnx)


def ensure_pt2(path: str | Path | None = None) -> Path:
    """The torch.export encoder at `path` (default: the cache), exported unless up to date."""
    return _ensure(Path(path or cached("pt2")), _write_pt2)


def _ensure(out: Path, write: Callable[[Path], None]) -> Path:
    if is_fresh(out):
        return out
    log.info("exporting the MiniLM encoder to %s (once; later loads reuse it)", out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Written aside, then renamed: a concurrent reader never sees half a file. The suffix stays
    # last because torch.export.save insists on .pt2.
    partial = out.with_name(f".{out.stem}.{os.getpid()}.partial{out.suffix}")
    write(partial)
    partial.replace(out)
    return out


def _write_onnx(out: Path) -> None:
    import torch

    from examples.minilm.bert import Bert

    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript exporter, on purpose
        torch.onnx.export(
            Bert.pretrained(),
            _example_inputs(),
            str(out),
            input_names=["INPUT_IDS", "ATTENTION_MASK"],
            output_names=["HIDDEN"],
            dynamic_axes={"INPUT_IDS": {0: "N"}, "ATTENTION_MASK": {0: "N"}, "HIDDEN": {0: "N"}},
            opset_version=17,
            dynamo=False,
        )


def _write_pt2(out: Path) -> None:
    import torch

    from examples.minilm.bert import Bert

    batch = torch.export.Dim("N", min=1, max=MAX_BATCH)
    program = torch.export.export(
        Bert.pretrained(), _example_inputs(), dynamic_shapes=({0: batch}, {0: batch})
    )
    torch.export.save(program, str(out))


def _example_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    """INPUT_IDS and ATTENTION_MASK to trace with: two tensors, never one passed twice (the
    exporters would read the module's two inputs as one)."""
    import torch

    return (
        torch.ones((2, SEQ_LEN), dtype=torch.int64),
        torch.ones((2, SEQ_LEN), dtype=torch.int64),
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--format", choices=FORMATS, default="onnx")
    parser.add_argument("out", nargs="?", type=Path, help="default: the cache")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ensure = ensure_onnx if args.format == "onnx" else ensure_pt2
    started = time.perf_counter()
    path = ensure(args.out)
    print(f"{path} ({path.stat().st_size / 1e6:.1f} MB, {time.perf_counter() - started:.1f} s)")  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
