"""Export the MiniLM encoder to ONNX once: `python -m examples.minilm.export [OUT]`.

Inputs INPUT_IDS and ATTENTION_MASK (INT64 [N, 128]), output HIDDEN (FP32 [N, 128, 384]); the
batch axis is dynamic, the sequence length fixed at SEQ_LEN. The export is skipped when OUT
exists and is newer than the weights.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path

from examples.minilm.bert import SEQ_LEN, Bert, weights_path

DEFAULT_OUT = Path(__file__).resolve().parent / ".cache" / "minilm_encoder.onnx"


def ensure_onnx(path: str | Path = DEFAULT_OUT) -> Path:
    """The ONNX encoder at `path`, exported unless it is already there and up to date."""
    import torch

    out = Path(path)
    if out.exists() and out.stat().st_mtime >= weights_path().stat().st_mtime:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    ids = torch.ones((2, SEQ_LEN), dtype=torch.int64)
    mask = torch.ones((2, SEQ_LEN), dtype=torch.int64)
    partial = out.with_name(f"{out.name}.{os.getpid()}.partial")
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript exporter, on purpose
        torch.onnx.export(
            Bert.pretrained(),
            (ids, mask),
            str(partial),
            input_names=["INPUT_IDS", "ATTENTION_MASK"],
            output_names=["HIDDEN"],
            dynamic_axes={"INPUT_IDS": {0: "N"}, "ATTENTION_MASK": {0: "N"}, "HIDDEN": {0: "N"}},
            opset_version=17,
            dynamo=False,
        )
    partial.replace(out)  # atomic: a concurrent reader never sees half a file
    return out


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else DEFAULT_OUT
    started = time.perf_counter()
    path = ensure_onnx(out)
    print(f"{path} ({path.stat().st_size / 1e6:.1f} MB, {time.perf_counter() - started:.1f} s)")  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
