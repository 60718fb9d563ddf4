"""Cold start: first request to a scaled-to-zero model against the bare load + warmup.

    python benchmarks/cold_start.py [--rounds 5] [--server-cpu 0] [--client-cpu 1]

Baseline (in-process, pinned to the server core, modules already imported as in the server):
build the model's instance and run its warmup sample once, each round after handing freed
memory back to the system as a scale to zero does (so both pay for faulting it in again).
Served: `fnserve serve benchmarks/cold_start_models.py` pinned to the same core; each round
waits until the model scaled to zero (idle 0.5 s), then times one request from the client
core until its answer.
Medians of the rounds; the served figure also pays the request's own inference.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from pipeline import serve_pinned

HERE = Path(__file__).parent
MODELS = {"mlp_cold": ("INPUT0",), "minilm_encoder_cold": ("INPUT_IDS", "ATTENTION_MASK")}


def bare(cpu: int, rounds: int) -> dict[str, float]:
    """Median seconds to build each model's instance and run its warmup sample, in-process."""
    code = f"""
import ctypes, gc, json, os, statistics, sys, time
import numpy as np
libc = ctypes.CDLL("libc.so.6")
os.sched_setaffinity(0, {{{cpu}}})
sys.path.insert(0, {str(HERE)!r})
import cold_start_models as m
samples = {{
    "mlp_cold": (m.MLPModel, {{"INPUT0": np.zeros((1, 256), np.float32)}}),
    "minilm_encoder_cold": (m.MiniLMEncoder, {{"INPUT_IDS": np.zeros((1, 128), np.int64),
                                               "ATTENTION_MASK": np.zeros((1, 128), np.int64)}}),
}}
out = {{}}
for name, (cls, sample) in samples.items():
    cls()(**sample)  # first time: lazy imports, file cache
    times = []
    for _ in range({rounds}):
        gc.collect(); libc.malloc_trim(0)  # as after a scale to zero: the memory went back
        start = time.perf_counter()
        cls()(**sample)
        times.append(time.perf_counter() - start)
    out[name] = statistics.median(times)
print(json.dumps(out))
"""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=env, check=True)  # fmt: skip
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def _body(name: str) -> dict[str, object]:
    if name == "mlp_cold":
        x = np.random.default_rng(0).standard_normal(256).astype(np.float32)
        return {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 256],
                            "data": x.tolist()}]}  # fmt: skip
    ids = [101] + [2023] * 10 + [102] + [0] * 116
    mask = [1] * 12 + [0] * 116
    return {"inputs": [
        {"name": "INPUT_IDS", "datatype": "INT64", "shape": [1, 128], "data": ids},
        {"name": "ATTENTION_MASK", "datatype": "INT64", "shape": [1, 128], "data": mask},
    ], "parameters": {"binary_data_output": True}}  # fmt: skip


def _scaled_to_zero(client: httpx.Client, base: str, name: str) -> bool:
    rows = client.post(f"{base}/v2/repository/index", json={}).json()
    return any(r["name"] == name and "scaled to zero" in r.get("reason", "") for r in rows)


def served(base: str, name: str, rounds: int) -> list[float]:
    """Seconds from sending the first request to a scaled-to-zero model to its answer.

    The request goes over one keep-alive `http.client` connection with the body prebuilt and
    sent in the same write as the headers: with httpx the encoder's requests took ~30 ms longer
    on this machine (warm: 60 ms against 30 ms), time that is not the server's.
    """
    host, port = base.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=120)
    body = json.dumps(_body(name)).encode()
    headers = {"Content-Type": "application/json"}
    times = []
    with httpx.Client(timeout=120) as client:
        for _ in range(rounds):
            deadline = time.monotonic() + 30
            while not _scaled_to_zero(client, base, name):
                assert time.monotonic() < deadline, f"{name} did not scale to zero"
                time.sleep(0.05)
            start = time.perf_counter()
            connection.request("POST", f"/v2/models/{name}/infer", body, headers)
            response = connection.getresponse()
            response.read()
            times.append(time.perf_counter() - start)
            assert response.status == 200, response.status
    connection.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    args = parser.parse_args()
    baseline = bare(args.server_cpu, args.rounds)
    os.sched_setaffinity(0, {args.client_cpu})  # this process is the client
    proc, base = serve_pinned([HERE / "cold_start_models.py"], args.server_cpu)
    try:
        for name in MODELS:
            times = served(base, name, args.rounds)
            median = statistics.median(times)
            print(f"{name}: cold start {median * 1000:.1f} ms (rounds: "
                  f"{', '.join(f'{t * 1000:.0f}' for t in times)}), bare load + warmup "
                  f"{baseline[name] * 1000:.1f} ms: {median / baseline[name]:.2f}x, "
                  f"+{(median - baseline[name]) * 1000:.1f} ms")  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(30)


if __name__ == "__main__":
    main()
