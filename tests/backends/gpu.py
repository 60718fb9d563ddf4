"""The skip rule of GPU tests: skip only when no CUDA device is present (torch is imported
first so that `cuda_device_count` can ask it where NVML is not installed)."""

from __future__ import annotations

import pytest
import torch  # noqa: F401  # the test set-up installs it; its count answers without NVML

from fnserve.backends.devices import cuda_device_count

HAS_CUDA = cuda_device_count() > 0
requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device present")
