"""Every repository test starts from fresh counters (see `counting.py`)."""

from __future__ import annotations

import pytest

from tests.repository import counting


@pytest.fixture(autouse=True)
def _fresh_counters() -> None:
    counting.reset()
