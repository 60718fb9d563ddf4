"""Inline execution on and off, in-process (no network), in one run:

    OMP_NUM_THREADS=1 taskset -c 0 .venv/bin/python benchmarks/inline.py [--rounds 3]

The median latency of one-row `Runtime.infer` calls at concurrency 1: the identity model, and
the anchor MLP as a three-step ensemble (`mlp3`) against the same three layers fused in one
function, with every model's batches on its thread (`--inline-max-us 0`, the default) and with
short ones on the event loop's thread (`--inline-max-us 1000`). Rounds alternate the two.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from anchor_models import identity
from pipeline_models import mlp3, mlp_fused, mlp_layer1, mlp_layer2, mlp_layer3

from fnserve.backends.base import ModelSpec
from fnserve.config.server import ModelDefaults
from fnserve.runtime import Runtime
from fnserve.types import InferInput, InferRequest

MODELS: list[ModelSpec] = [identity, mlp_layer1, mlp_layer2, mlp_layer3, mlp3, mlp_fused]


async def median_us(runtime: Runtime, name: str, dim: int, calls: int = 3000) -> float:
    x = np.random.default_rng(1).standard_normal((1, dim)).astype(np.float32)
    request = InferRequest(name, (InferInput("INPUT0", "FP32", x),))
    for _ in range(200):  # warm up, and let inline execution see its streak of short batches
        await runtime.infer(request)
    took = []
    for _ in range(calls):
        await asyncio.sleep(0)  # one request per turn of the loop, as from a network client
        start = time.perf_counter_ns()
        await runtime.infer(request)
        took.append(time.perf_counter_ns() - start)
    return statistics.median(took) / 1000


async def main(rounds: int) -> None:
    print(f"{'inline':>8} {'identity':>9} {'mlp3':>7} {'fused':>7} {'mlp3-fused':>11}  (median us)")
    for _ in range(rounds):
        for inline_us in (0.0, 1000.0):
            runtime = Runtime(MODELS)
            await runtime.start(ModelDefaults(inline_us=inline_us))
            one = await median_us(runtime, "identity", 16)
            steps = await median_us(runtime, "mlp3", 256)
            fused = await median_us(runtime, "mlp_fused", 256)
            await runtime.aclose()
            label = "off" if not inline_us else f"{inline_us:g} us"
            print(f"{label:>8} {one:9.0f} {steps:7.0f} {fused:7.0f} {steps - fused:11.0f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(parser.parse_args().rounds))
