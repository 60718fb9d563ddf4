"""`fnserve bench --ui` stopped by a signal takes its Locust child (and the UI port) with it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_locust_and_frees_the_ui_port(sig: signal.Signals) -> None:
    port = _free_port()
    env = {**os.environ, "LOCUST_WEB_PORT": str(port)}
    bench = subprocess.Popen(
        [sys.executable, "-m", "fnserve", "bench", "mlp", "--ui", "--url", "127.0.0.1:9"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not _listening(port) and time.monotonic() < deadline and bench.poll() is None:
            time.sleep(0.2)
        assert _listening(port), "Locust's web UI did not start"
        children = psutil.Process(bench.pid).children(recursive=True)
        assert children
        bench.send_signal(sig)
        assert bench.wait(20) == 128 + sig
        gone, alive = psutil.wait_procs(children, timeout=5)
        assert not alive, f"left behind: {alive}"
        assert not _listening(port)
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait(10)
