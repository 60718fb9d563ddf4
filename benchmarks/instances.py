"""In-thread vs process instances, served over HTTP: throughput, latency, health-check latency.

    .venv/bin/python benchmarks/instances.py [--seconds 10] [--concurrency 8] [--spin 400000]
    .venv/bin/python benchmarks/instances.py --overhead 5000

Starts one `fnserve serve benchmarks/instance_models.py` (OMP_NUM_THREADS=1, so BLAS does not
spread one instance over every core), then for each of the anchor MLP and a pure-Python
CPU-bound model ("spin", N loop iterations per request, holding the GIL), in-thread and process
instances, count 1 and 2: a separate client process sends single-row requests with bounded
concurrency for `--seconds`, while this process checks `/v2/health/ready` every 20 ms. Prints
infer/s, p50/p99 latency and the health check's p50 for each case; "echo" (16 floats back)
shows the transport alone. `--overhead N` instead times N executions of echo through a
thread instance and a process instance in this process (no HTTP): the price of the round trip.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

HERE = Path(__file__).parent
CASES = [
    f"{kind}_{isolation}_{count}"
    for kind in ("echo", "mlp", "spin")
    for isolation in ("thread", "process")
    for count in (1, 2)
]


def main() -> None:
    args = _parse()
    if args.client:
        print(json.dumps(asyncio.run(_client(args))))
        return
    if args.overhead:
        asyncio.run(_overhead(args.overhead))
        return
    server, url = _start_server()
    try:
        print(f"{'model':<18} {'infer/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'health p50 ms':>14}")
        for case in args.cases or CASES:
            _warm(url, case, args.spin)
            with _HealthProbe(url) as probe:
                result = _run_client(url, case, args)
            print(
                f"{case:<18} {result['rate']:>9.1f} {result['p50']:>8.2f} "
                f"{result['p99']:>8.2f} {probe.p50_ms():>14.2f}",
                flush=True,
            )
    finally:
        server.terminate()
        server.wait(30)


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="load per case")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight")
    parser.add_argument("--spin", type=int, default=400_000, help="loop iterations per request")
    parser.add_argument("--cases", nargs="*", help=f"subset of {' '.join(CASES)}")
    parser.add_argument(
        "--overhead", type=int, metavar="N", help="instead: N in-process executions of echo"
    )
    parser.add_argument("--client", help=argparse.SUPPRESS)  # internal: URL to load
    parser.add_argument("--model", help=argparse.SUPPRESS)
    return parser.parse_args()


def _start_server() -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "fnserve", "serve", str(HERE / "instance_models.py")]
    command += ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        match = re.match(r"\s+HTTP\s+(\S+)", line)
        if match:
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep draining
            return proc, match.group(1)
    proc.kill()
    raise SystemExit("the server did not start")


async def _overhead(calls: int) -> None:
    """What one execution costs in a thread vs a process instance, without HTTP in between."""
    import numpy as np

    from fnserve.backends.python import PythonBackend
    from fnserve.model import InstanceContext, ModelDefinition
    from fnserve.repository.discover import discover
    from fnserve.scheduling.instance import Instance, ThreadInstance
    from fnserve.scheduling.process import ProcessInstance
    from fnserve.scheduling.request import PendingRequest
    from fnserve.scheduling.runner import BatchRunner

    echo = next(
        d
        for d in discover([HERE / "instance_models.py"])
        if isinstance(d, ModelDefinition) and d.config.name == "echo_process_1"
    )
    ctx = InstanceContext("echo_process_1", 1, 0, "KIND_CPU", "cpu", {})
    loop = asyncio.get_running_loop()
    batch = [
        PendingRequest(
            inputs={"INPUT0": np.ones((1, 16), np.float32)},
            rows=1,
            shape_key=(),
            future=loop.create_future(),
        )
    ]
    instances: dict[str, Instance] = {
        "thread": ThreadInstance(0, BatchRunner(echo.config, PythonBackend(echo, ctx)), "echo"),
        "process": ProcessInstance(echo, ctx, echo.config),
    }
    for _ in range(2):  # twice, alternating, so a noisy neighbour shows as a difference
        for name, instance in instances.items():
            for _ in range(calls // 10):
                await instance.start(batch)
            start = time.perf_counter()
            for _ in range(calls):
                await instance.start(batch)
            per_call_us = (time.perf_counter() - start) / calls * 1e6
            print(f"{name:<8} {per_call_us:8.1f} us per execution", flush=True)
    for instance in instances.values():
        instance.close()


def _body(model: str, spin: int) -> dict[str, object]:
    if model.startswith("echo"):
        return {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16],
                            "data": [0.5] * 16}]}  # fmt: skip
    if model.startswith("mlp"):
        return {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 256],
                            "data": [0.01 * i for i in range(256)]}]}  # fmt: skip
    return {"inputs": [{"name": "N", "datatype": "INT32", "shape": [1], "data": [spin]}]}


def _warm(url: str, model: str, spin: int) -> None:
    with httpx.Client(timeout=60) as client:
        for _ in range(4):
            response = client.post(f"{url}/v2/models/{model}/infer", json=_body(model, spin))
            response.raise_for_status()


def _run_client(url: str, model: str, args: argparse.Namespace) -> dict[str, float]:
    command = [sys.executable, __file__, "--client", url, "--model", model]
    command += ["--seconds", str(args.seconds), "--concurrency", str(args.concurrency)]
    command += ["--spin", str(args.spin)]
    out = subprocess.run(command, capture_output=True, text=True, check=True, timeout=600)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


async def _client(args: argparse.Namespace) -> dict[str, float]:
    """The load: `concurrency` loops posting one request after another until time is up."""
    url = f"{args.client}/v2/models/{args.model}/infer"
    body = json.dumps(_body(args.model, args.spin)).encode()
    headers = {"content-type": "application/json"}
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=args.concurrency)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        end = time.perf_counter() + args.seconds

        async def user() -> None:
            while time.perf_counter() < end:
                start = time.perf_counter()
                response = await client.post(url, content=body, headers=headers)
                response.raise_for_status()
                latencies.append(time.perf_counter() - start)

        start = time.perf_counter()
        await asyncio.gather(*(user() for _ in range(args.concurrency)))
        elapsed = time.perf_counter() - start
    latencies.sort()
    return {
        "rate": len(latencies) / elapsed,
        "p50": 1000 * statistics.median(latencies),
        "p99": 1000 * latencies[int(0.99 * (len(latencies) - 1))],
    }


class _HealthProbe:
    """GET /v2/health/ready every 20 ms on one keep-alive connection, from a thread.

    `http.client`, not httpx: its own cost per call (~0.1 ms) stays out of the figure.
    """

    def __init__(self, url: str) -> None:
        self.host, port = url.removeprefix("http://").rsplit(":", 1)
        self.port = int(port)
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            while not self._stop.wait(0.02):
                start = time.perf_counter()
                connection.request("GET", "/v2/health/ready")
                connection.getresponse().read()
                self.latencies.append(time.perf_counter() - start)
        finally:
            connection.close()

    def p50_ms(self) -> float:
        return 1000 * statistics.median(self.latencies) if self.latencies else float("nan")

    def __enter__(self) -> _HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(15)


if __name__ == "__main__":
    main()
