"""Models for benchmarks/instances.py: an echo (the transport alone), the anchor MLP and a
pure-Python CPU-bound model, each as in-thread and process instances, with one and two
instances (`<model>_<isolation>_<count>`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from anchor_models import MLP

from fnserve import DynamicBatching, InstanceGroup, Tensor, model

_BATCHING = DynamicBatching(max_queue_delay_microseconds=0)
_mlp = MLP()


def _mlp_infer(INPUT0: np.ndarray) -> dict[str, np.ndarray]:
    return {"OUTPUT0": _mlp(INPUT0)}


def _spin(N: np.ndarray) -> np.ndarray:
    """Pure-Python arithmetic: holds the GIL for the whole call (N iterations per row)."""
    out = np.empty((N.shape[0], 1), np.int64)
    for row, n in enumerate(N[:, 0]):
        total = 0
        for i in range(int(n)):
            total = (total + i * i) % 1_000_003
        out[row, 0] = total
    return out


def _spin_alone(N: np.ndarray) -> np.ndarray:
    """`_spin` for one request at a time (no batch dimension)."""
    return _spin(N.reshape(1, 1)).reshape(1)


def _echo(INPUT0: np.ndarray) -> dict[str, np.ndarray]:
    return {"OUTPUT0": INPUT0}


_KINDS = {
    "echo": (_echo, [Tensor("INPUT0", "FP32", [16])], [Tensor("OUTPUT0", "FP32", [16])]),
    "mlp": (
        _mlp_infer,
        [Tensor("INPUT0", "FP32", [256])],
        [Tensor("OUTPUT0", "FP32", [10])],
    ),
    "spin": (_spin, [Tensor("N", "INT32", [1])], [Tensor("OUTPUT0", "INT64", [1])]),
}

# "spin" takes one request per execution (no batching): with dynamic batching, one instance
# would take every queued request as one long batch and leave the other idle.
_BATCH_SIZE = {"echo": 64, "mlp": 64, "spin": 0}
_KINDS["spin"] = (_spin_alone, *_KINDS["spin"][1:])

for _kind, (_fn, _inputs, _outputs) in _KINDS.items():
    for _isolation in ("thread", "process"):
        for _count in (1, 2):
            _name = f"{_kind}_{_isolation}_{_count}"
            globals()[_name] = model(
                name=_name,
                max_batch_size=_BATCH_SIZE[_kind],
                dynamic_batching=_BATCHING if _BATCH_SIZE[_kind] else None,
                inputs=_inputs,
                outputs=_outputs,
                instance_group=[InstanceGroup(count=_count, kind="KIND_CPU", isolation=_isolation)],
            )(_fn)
