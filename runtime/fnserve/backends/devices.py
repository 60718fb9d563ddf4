"""Which devices exist: the CUDA device count, found without importing heavy frameworks.

NVML (the `nvidia-ml-py` package, extra `gpu`) answers when installed; otherwise torch answers
if it is already imported by a model; otherwise there is no CUDA device as far as fnserve knows.
"""

from __future__ import annotations

import functools
import sys


@functools.cache
def cuda_device_count() -> int:
    """Number of CUDA devices visible to this process (0 when none or unknown)."""
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # ImportError, or NVML present without a driver
        pass
    torch = sys.modules.get("torch")
    if torch is not None:
        return int(torch.cuda.device_count())
    return 0
