"""The MiniLM example against its baselines, in one run on one machine.

    python benchmarks/minilm.py [--seconds 10] [--server-cpu 0] [--client-cpu 1]

1. The encoder's ONNX session in-process on the server core, rows/s at batch 1..64 (the best
   is the baseline), against the encoder served by fnserve (dynamic batching) at
   concurrency 64.
2. The three-step ensemble `minilm` against `minilm_fused` (the same three steps in one
   function), at concurrency 64 (throughput) and 1 (p50); then at concurrency 1 with the two
   taking turns on one connection, so that drift of the machine cancels out of the difference
   (the median of ~15 pairs a second, with a bootstrap 95 % interval), each
   request's own encoder time subtracted (the server runs under minilm_clock.py): the
   encoder's ~1 ms jitter (the same work in both) drops out, which leaves what serving adds
   with an interval a few times narrower. The pairs run on `--pair-servers` servers started
   afresh (`--pair-seconds` shared among them): the difference moves by about +-20 us from one
   server to the next and over time within one (the machine's cold-cache cost drifts), more
   than one run's interval; the mean of their medians is the figure.
3. The same pairs in-process, through the runtime without HTTP (the runtime's share).
Server pinned to one core, h2load (HTTP/1.1 JSON) to the other. The ensemble's encoder and the
fused function run one ONNX Runtime session (`MINILM_SHARED_SESSION`, examples/minilm/steps.py):
two sessions in one process differ by about 0.1 ms a call from where their weights landed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))
from pipeline import h2load, serve_pinned

from examples.minilm.steps import SHARED_SESSION_ENV

HERE = Path(__file__).parent
# The pipeline as `make serve` serves it, and its fused baseline.
MODELS = [HERE.parent / "functions" / "embeddings.py", HERE / "minilm_models.py"]

SENTENCE = "A man is eating a piece of bread while reading the morning newspaper."


def inprocess(cpu: int) -> dict[int, float]:
    """Rows/s of the bare ONNX session at each batch size, pinned to `cpu`."""
    code = f"""
import json, os, sys, time
import numpy as np
os.sched_setaffinity(0, {{{cpu}}})
sys.path.insert(0, {str(HERE.parent)!r})
from examples.minilm.steps import MiniLMEncoder, MiniLMTokenize
tok, enc = MiniLMTokenize(), MiniLMEncoder()
out = {{}}
for batch in (1, 8, 16, 32, 64):
    t = tok(np.array([[{SENTENCE!r}.encode()]] * batch, dtype=object))
    enc(t["INPUT_IDS"], t["ATTENTION_MASK"])
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < 3:
        enc(t["INPUT_IDS"], t["ATTENTION_MASK"]); n += batch
    out[batch] = n / (time.perf_counter() - start)
print(json.dumps(out))
"""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=env, check=True)  # fmt: skip
    return {int(k): v for k, v in json.loads(result.stdout.strip().splitlines()[-1]).items()}


def alternating(base: str, body: Path, seconds: float, cpu: int, clock: Path) -> tuple[float, ...]:
    """c=1 over one keep-alive connection, ensemble and fused requests taking turns (the order
    flipping every pair), so a slow patch of the machine hits both alike; each request's own
    encoder time (`clock`, written by the server's minilm_clock.py) is subtracted from its
    latency, which takes the encoder's jitter out of the difference. (ensemble p50 ms, fused
    p50 ms, median of the per-pair differences in ms, its 95 % interval's low and high ends,
    pairs, median per-pair difference without the subtraction in ms.)"""
    code = f"""
import http.client, json, os, random, statistics, sys, time
os.sched_setaffinity(0, {{{cpu}}})
sys.path.insert(0, {str(HERE)!r})
from minilm_clock import last_ns_file, read_last_ns
clock = last_ns_file({str(clock)!r})
host, port = {base.removeprefix("http://")!r}.split(":")
conn = http.client.HTTPConnection(host, int(port))
body = open({str(body)!r}, "rb").read()
def once(name):
    start = time.perf_counter()
    conn.request("POST", f"/v2/models/{{name}}/infer", body, {{"Content-Type": "application/json"}})
    response = conn.getresponse(); response.read(); assert response.status == 200
    elapsed = (time.perf_counter() - start) * 1000
    return elapsed, elapsed - read_last_ns(clock) / 1e6
times = {{"minilm": [], "minilm_fused": []}}
end, flip = time.perf_counter() + {seconds}, False
while time.perf_counter() < end:
    for name in (("minilm", "minilm_fused") if flip else ("minilm_fused", "minilm")):
        times[name].append(once(name))
    flip = not flip
ens, fused = times["minilm"][5:], times["minilm_fused"][5:]
pairs = [a[1] - b[1] for a, b in zip(ens, fused)]
rng = random.Random(0)
boot = sorted(statistics.median(rng.choices(pairs, k=len(pairs))) for _ in range(1000))
print(json.dumps([statistics.median(t[0] for t in ens), statistics.median(t[0] for t in fused),
                  statistics.median(pairs), boot[25], boot[974], len(pairs),
                  statistics.median(a[0] - b[0] for a, b in zip(ens, fused))]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return tuple(json.loads(out.stdout.strip().splitlines()[-1]))


def runtime_share(seconds: float, cpu: int) -> tuple[float, ...]:
    """c=1 in-process (no HTTP, which both pay alike) on the server's event loop (uvloop),
    ensemble and fused requests taking turns through `Runtime.infer`, each request's own
    encoder time subtracted: the encoder's run to run jitter (~1 ms on this host, the same
    work in both) then drops out of the difference, which leaves the runtime's share with a
    narrow interval. (ensemble ms, fused ms, median paired difference ms, its 95 % interval's
    ends, pairs), times without the encoder."""
    code = f"""
import asyncio, json, os, random, statistics, sys, time
os.sched_setaffinity(0, {{{cpu}}})
sys.path.insert(0, {str(HERE.parent)!r}); sys.path.insert(0, {str(HERE.parent / "runtime")!r})
sys.path.insert(0, {str(HERE)!r})
import numpy as np
import minilm_clock
encoder_ns = []
minilm_clock.install(encoder_ns.append)
from fnserve.config.server import ModelDefaults
from fnserve.runtime import Runtime
from fnserve.types import InferInput, InferRequest
from fnserve.user_modules import definitions_in, import_file
from pathlib import Path
async def main():
    files = [Path(f) for f in {[str(m) for m in MODELS]!r}]
    runtime = Runtime([d for f in files for d in definitions_in(import_file(f))])
    await runtime.start(ModelDefaults())
    text = np.array([[{SENTENCE!r}.encode()]], dtype=object)
    requests = {{n: InferRequest(n, (InferInput("TEXT", "BYTES", text),))
                for n in ("minilm", "minilm_fused")}}
    async def once(name):
        await asyncio.sleep(0)
        encoder_ns.clear()
        start = time.perf_counter_ns()
        await runtime.infer(requests[name])
        return (time.perf_counter_ns() - start - encoder_ns[0]) / 1000
    times = {{"minilm": [], "minilm_fused": []}}
    end, flip = time.perf_counter() + {seconds}, False
    while time.perf_counter() < end:
        for name in (("minilm", "minilm_fused") if flip else ("minilm_fused", "minilm")):
            times[name].append(await once(name))
        flip = not flip
    await runtime.aclose()
    ens, fused = times["minilm"][20:], times["minilm_fused"][20:]
    pairs = [a - b for a, b in zip(ens, fused)]
    rng = random.Random(0)
    boot = sorted(statistics.median(rng.choices(pairs, k=len(pairs))) for _ in range(1000))
    print(json.dumps([x / 1000 for x in (statistics.median(ens), statistics.median(fused),
                      statistics.median(pairs), boot[25], boot[974])] + [len(pairs)]))
try:  # the server's event loop
    from uvloop import run
except ImportError:
    from asyncio import run
run(main())
"""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # Only stdout is captured: the child's errors reach the terminal as they are.
    out = subprocess.run(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env, check=True
    )
    return tuple(json.loads(out.stdout.strip().splitlines()[-1]))


def fresh_server_pairs(body: Path, seconds: float, args: argparse.Namespace) -> tuple[float, ...]:
    """`alternating` against a server started for it, under minilm_clock.py."""
    clock = Path(tempfile.mkstemp(prefix="minilm-encoder-ns-")[1])
    proc, base = serve_pinned(
        MODELS, args.server_cpu, entry=(str(HERE / "minilm_clock.py"), str(clock))
    )
    try:
        time.sleep(1)
        return alternating(base, body, seconds, args.client_cpu, clock)
    finally:
        proc.terminate()
        proc.wait(30)
        clock.unlink()


def _body(doc: Mapping[str, Any]) -> Path:
    file = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump(doc, file)
    file.close()
    return Path(file.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--pair-seconds", type=float, default=90.0, help="in all")
    parser.add_argument("--pair-servers", type=int, default=3)
    args = parser.parse_args()
    os.environ[SHARED_SESSION_ENV] = "1"  # the server's encoder and fused function: one session
    rates = inprocess(args.server_cpu)
    best = max(rates, key=lambda b: rates[b])
    print("in-process ONNX session, rows/s by batch:", {b: round(r) for b, r in rates.items()})
    sys.path.insert(0, str(HERE.parent))
    from examples.minilm.steps import MiniLMTokenize

    tokens = MiniLMTokenize()(np.array([[SENTENCE.encode()]], dtype=object))
    # The hidden states come back as binary tensor data, as tritonclient asks for them by
    # default: as JSON, 49,152 floats per row cost the server's core ~3 ms to print.
    ids_doc = {"inputs": [
        {"name": n, "datatype": "INT64", "shape": [1, 128], "data": tokens[n].ravel().tolist()}
        for n in ("INPUT_IDS", "ATTENTION_MASK")
    ], "parameters": {"binary_data_output": True}}  # fmt: skip
    text_doc = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1],
                            "data": [SENTENCE]}]}  # fmt: skip
    ids_body, text_body = _body(ids_doc), _body(text_doc)
    proc, base = serve_pinned(MODELS, args.server_cpu)
    try:
        time.sleep(1)
        url = f"{base}/v2/models/%s/infer"
        served, _ = h2load(url % "minilm_encoder", ids_body, 64, args.seconds, args.client_cpu)
        print(f"encoder served at c=64: {served:.0f} rows/s = {served / rates[best]:.1%} of the "
              f"in-process session at batch {best} ({rates[best]:.0f} rows/s)")  # fmt: skip
        for clients in (64, 1):
            fused = h2load(url % "minilm_fused", text_body, clients, args.seconds, args.client_cpu)
            steps = h2load(url % "minilm", text_body, clients, args.seconds, args.client_cpu)
            print(f"c={clients}: ensemble {steps[0]:.0f} req/s p50 {steps[1]:.2f} ms, fused "
                  f"{fused[0]:.0f} req/s p50 {fused[1]:.2f} ms: {steps[0] / fused[0]:.1%} of "
                  f"fused, p50 {1000 * (steps[1] - fused[1]):+.0f} us")  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(30)
    # Servers started afresh differ by about +-20 us in this difference (where the process's
    # objects landed), more than one run's interval: the pairs run on several.
    medians = []
    for server in range(1, args.pair_servers + 1):
        paired = fresh_server_pairs(text_body, args.pair_seconds / args.pair_servers, args)
        medians.append(paired[2])
        print(f"c=1 alternating, server {server}, {paired[5]} pairs: ensemble p50 "
              f"{paired[0]:.2f} ms, fused p50 {paired[1]:.2f} ms; median paired difference, "
              f"each request's encoder time subtracted: {1000 * paired[2]:+.0f} us (95 % "
              f"interval {1000 * paired[3]:+.0f} to {1000 * paired[4]:+.0f} us); without the "
              f"subtraction {1000 * paired[6]:+.0f} us")  # fmt: skip
    print(f"c=1 alternating, the {len(medians)} servers' median paired differences: mean "
          f"{1000 * statistics.mean(medians):+.0f} us")  # fmt: skip
    share = runtime_share(args.pair_seconds, args.server_cpu)
    print(f"c=1 in-process, encoder time subtracted, {share[5]} pairs: ensemble {share[0]:.2f} "
          f"ms, fused {share[1]:.2f} ms, median paired difference {1000 * share[2]:+.0f} us "
          f"(95 % interval {1000 * share[3]:+.0f} to {1000 * share[4]:+.0f} us)")  # fmt: skip


if __name__ == "__main__":
    main()
