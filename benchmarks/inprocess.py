"""In-process baseline: the model called directly vs through `Runtime.infer` (no network).

    OMP_NUM_THREADS=1 taskset -c 0 .venv/bin/python benchmarks/inprocess.py [--seconds 3]

For each anchor model it prints rows/s of the bare function at batch 1/8/64, and of
`Runtime.infer` with 1/8/64 concurrent single-row callers (the dynamic batcher forms the
batches). The gap between the two is the core's own cost per request; the gap between
this and the served figures (benchmarks/anchors.sh) is the frontends' cost.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from anchor_models import identity, mlp

from fnserve.runtime import Runtime
from fnserve.types import InferInput, InferRequest

DIMS = {"identity": 16, "mlp": 256}


def direct(fn: object, dim: int, batch: int, seconds: float) -> float:
    x = np.random.default_rng(1).standard_normal((batch, dim)).astype(np.float32)
    calls, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        fn(INPUT0=x)  # type: ignore[operator]
        calls += 1
    return calls * batch / seconds


async def served(runtime: Runtime, name: str, concurrency: int, seconds: float) -> float:
    x = np.random.default_rng(1).standard_normal((1, DIMS[name])).astype(np.float32)
    request = InferRequest(name, (InferInput("INPUT0", "FP32", x),))
    done = 0
    end = time.perf_counter() + seconds

    async def caller() -> None:
        nonlocal done
        while time.perf_counter() < end:
            await runtime.infer(request)
            done += 1

    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return done / seconds


async def main(seconds: float) -> None:
    runtime = Runtime([identity, mlp])
    await runtime.start()
    print(f"{'model':9} {'path':26} {'c/batch=1':>10} {'8':>10} {'64':>10}   (rows/s)")
    for name, fn in (("identity", identity), ("mlp", mlp)):
        bare = [direct(fn, DIMS[name], b, seconds) for b in (1, 8, 64)]
        print(f"{name:9} {'function, batch=N':26} " + " ".join(f"{v:10.0f}" for v in bare))
        via = [await served(runtime, name, c, seconds) for c in (1, 8, 64)]
        print(f"{name:9} {'Runtime.infer, c=N rows':26} " + " ".join(f"{v:10.0f}" for v in via))
    await runtime.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    asyncio.run(main(parser.parse_args().seconds))
