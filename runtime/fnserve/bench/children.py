"""Run a child command (Locust's web UI) so that it never outlives `fnserve bench`.

The child gets its own process group (Locust's `--processes` workers join it). SIGINT, SIGTERM
and SIGHUP sent to `fnserve bench` are forwarded to the whole group, and whatever is still
alive a few seconds after the child stopped, or after the grace period, is killed: a bench
stopped by a supervisor no longer leaves Locust holding port 8089.
"""

from __future__ import annotations

import os
import signal
import subprocess
from types import FrameType

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
GRACE_S = 10.0  # how long the group may take to stop after a forwarded signal


def run_group(command: list[str]) -> int:
    """Run `command` in its own process group until it exits; returns its exit status, or
    128 + the signal's number when a forwarded signal stopped it (130 for Ctrl-C)."""
    child = subprocess.Popen(command, start_new_session=True)
    received: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        _signal_group(child.pid, signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        status = _wait(child, received)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _signal_group(child.pid, signal.SIGKILL)  # workers the child left behind, if any
    return 128 + received[0] if received else status


def _wait(child: subprocess.Popen[bytes], received: list[int]) -> int:
    while True:
        try:
            # Poll so the grace period starts when a signal arrives, not when waiting began.
            return child.wait(GRACE_S if received else 0.5)
        except subprocess.TimeoutExpired:
            if received:  # forwarded, yet still alive past the grace period
                _signal_group(child.pid, signal.SIGKILL)
                return child.wait()


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already
