"""`fnserve serve` as a real subprocess, for tests that need the process itself.

Signals, exit codes, peak memory and file descriptors only exist for a real process, so these
tests start `python -m fnserve serve` on free loopback ports, read the bound endpoints from the
startup summary, and watch the process from outside:

```python
with ServerProcess.start(MODELS, "--shutdown-timeout", "2") as server, HealthProbe(server) as probe:
    ...  # drive it with httpx / tritonclient / raw sockets
assert probe.worst_ms < 50
assert server.peak_rss_mb() < 400
```
"""

from __future__ import annotations

import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import httpx
import tritonclient.http as httpclient

_ENDPOINT = re.compile(r"\s+(HTTP|gRPC|metrics)\s+(\S+)")


@dataclass
class ServerProcess:
    """A running `fnserve serve` subprocess and its endpoints."""

    proc: subprocess.Popen[str]
    http: str  # base URL, "http://127.0.0.1:PORT"
    grpc: str  # "127.0.0.1:PORT", as tritonclient.grpc wants it
    metrics: str  # full URL of /metrics
    log: list[str] = field(default_factory=list)  # every stderr line so far

    @classmethod
    def start(
        cls,
        *args: str | Path,
        env: dict[str, str] | None = None,
        timeout_s: float = 60,
        entry: Sequence[str] = ("-m", "fnserve"),
    ) -> ServerProcess:
        """Start `fnserve serve ARGS` on free ports; returns once the summary is printed.
        `entry`: what follows the interpreter instead of `-m fnserve` (a wrapper script).

        Raises:
            RuntimeError: the server exited or printed no endpoints within `timeout_s`.
        """
        command = [sys.executable, *entry, "serve", *map(str, args)]
        for flag in ("--http-port", "--grpc-port", "--metrics-port"):
            if flag not in command:
                command += [flag, "0"]
        proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
        assert proc.stderr is not None
        log: list[str] = []
        endpoints: dict[str, str] = {}
        deadline = time.monotonic() + timeout_s
        while len(endpoints) < 3 and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            log.append(line)
            match = _ENDPOINT.match(line)
            if match:
                endpoints[match.group(1)] = match.group(2)
        if len(endpoints) < 3:
            proc.kill()
            proc.wait(10)
            log.append(proc.stderr.read())
            proc.stderr.close()
            raise RuntimeError(f"server did not start (exit {proc.returncode}):\n{''.join(log)}")
        server = cls(proc, endpoints["HTTP"], endpoints["gRPC"], endpoints["metrics"], log)
        # Keep draining stderr so the server never blocks on a full pipe.
        threading.Thread(target=server._drain, daemon=True).start()
        return server

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        with self.proc.stderr:  # closed at the end: left open, the pipe warns when collected
            for line in self.proc.stderr:
                self.log.append(line)

    @property
    def host(self) -> str:
        return self.grpc.rsplit(":", 1)[0]

    @property
    def http_port(self) -> int:
        return int(self.http.rsplit(":", 1)[1])

    @property
    def grpc_port(self) -> int:
        return int(self.grpc.rsplit(":", 1)[1])

    def output(self) -> str:
        """Everything the server wrote to stderr so far."""
        return "".join(self.log)

    def _status_kb(self, key: str) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        raise KeyError(key)

    def rss_mb(self) -> float:
        """Resident memory now, MiB."""
        return self._status_kb("VmRSS") / 1024

    def peak_rss_mb(self) -> float:
        """The highest resident memory since the process started (VmHWM), MiB."""
        return self._status_kb("VmHWM") / 1024

    def open_fds(self) -> int:
        return len(list(Path(f"/proc/{self.proc.pid}/fd").iterdir()))

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30) -> int:
        """Send `sig` and wait for the exit code (killing the process past `timeout_s`)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise

    def http_client(self, concurrency: int = 1) -> httpclient.InferenceServerClient:
        """A tritonclient HTTP client of this server (`concurrency` connections, for its
        `async_infer`)."""
        return httpclient.InferenceServerClient(
            self.http.removeprefix("http://"), concurrency=concurrency
        )

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class HealthProbe:
    """Polls `GET /v2/health/ready` from a thread and records every round trip.

    Use it around an attack or a load: the server must keep answering health checks quickly
    throughout. By default one keep-alive connection is reused, which measures how free the
    event loop is; `fresh_connections=True` opens a new connection per check instead.
    """

    def __init__(
        self, server: ServerProcess, interval_s: float = 0.02, fresh_connections: bool = False
    ) -> None:
        self.url = f"{server.http}/v2/health/ready"
        self.interval_s = interval_s
        self.fresh = fresh_connections
        self.latencies_ms: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="health-probe", daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self._stop.is_set():
                start = time.perf_counter()
                try:
                    if self.fresh:
                        status = httpx.get(self.url, timeout=10).status_code
                    else:
                        status = client.get(self.url).status_code
                except httpx.HTTPError as exc:
                    self.failures.append(f"{type(exc).__name__}: {exc}")
                else:
                    self.latencies_ms.append((time.perf_counter() - start) * 1000)
                    if status != 200:
                        self.failures.append(f"status {status}")
                self._stop.wait(self.interval_s)

    @property
    def worst_ms(self) -> float:
        return max(self.latencies_ms, default=float("inf"))

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.latencies_ms) if self.latencies_ms else float("inf")

    def summary(self) -> str:
        return (
            f"{len(self.latencies_ms)} health checks, p50 {self.p50_ms:.2f} ms, worst "
            f"{self.worst_ms:.2f} ms, {len(self.failures)} failure(s) {self.failures[:3]}"
        )

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(15)


def running(*args: str | Path) -> Iterator[ServerProcess]:
    """A pytest fixture body: `yield from running(MODELS)` serves and cleans up."""
    with ServerProcess.start(*args) as server:
        yield server
