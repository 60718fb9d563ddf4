"""Byte sizes as people write them: 8GiB, 512MB, 1.5G, 1048576."""

from __future__ import annotations

import re

_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "kib": 2**10,
    "m": 10**6, "mb": 10**6, "mib": 2**20,
    "g": 10**9, "gb": 10**9, "gib": 2**30,
    "t": 10**12, "tb": 10**12, "tib": 2**40,
}  # fmt: skip
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")


def parse_size(text: str) -> int:
    """Bytes in `text` (decimal units kB/MB/GB/TB, binary KiB/MiB/GiB/TiB, bare numbers).

    Raises:
        ValueError: not a size (the message lists what is accepted).
    """
    match = _SIZE.fullmatch(text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(
            f"{text!r} is not a size: write bytes or a number with kB, MB, GB, TB, KiB, MiB, "
            f"GiB or TiB (e.g. 8GiB)"
        )
    return int(float(match.group(1)) * _UNITS[unit])
