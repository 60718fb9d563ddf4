"""Which devices exist: the CUDA device count, found without importing heavy frameworks.

NVML (the `nvidia-ml-py` package, extras `gpu` and `tensorrt`) answers when installed;
otherwise torch answers if it is already imported (by a model's backend, such as pytorch or
tensorrt); otherwise there is no CUDA device as far as fnserve knows.
"""

from __future__ import annotations

import functools
import sys


def cuda_device_count() -> int:
    """Number of CUDA devices visible to this process (0 when none or unknown)."""
    count = _nvml_device_count()
    if count is not None:
        return count
    torch = sys.modules.get("torch")
    if torch is not None:  # asked again each time: torch may be imported after a first call
        return int(torch.cuda.device_count())
    return 0


@functools.cache
def _nvml_device_count() -> int | None:
    """NVML's count, or None without NVML (the package, or a driver)."""
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # ImportError, or NVML present without a driver
        return None
