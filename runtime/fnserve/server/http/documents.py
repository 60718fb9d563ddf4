"""The JSON documents of the HTTP frontend, rendered from the core's typed records."""

from __future__ import annotations

from typing import Any

from fnserve.server.vocabulary import index_state
from fnserve.stats import Duration, ModelStats
from fnserve.types import IndexEntry, ModelMetadata, ServerMetadata, TensorMetadata


def server_metadata(record: ServerMetadata) -> dict[str, Any]:
    return {"name": record.name, "version": record.version, "extensions": list(record.extensions)}


def model_metadata(record: ModelMetadata) -> dict[str, Any]:
    """The KServe v2 model metadata document."""
    return {
        "name": record.name,
        "versions": list(record.versions),
        "platform": record.platform,
        "inputs": [_tensor(t) for t in record.inputs],
        "outputs": [_tensor(t) for t in record.outputs],
    }


def _tensor(tensor: TensorMetadata) -> dict[str, Any]:
    return {"name": tensor.name, "datatype": tensor.datatype, "shape": list(tensor.shape)}


def statistics(records: list[ModelStats]) -> dict[str, Any]:
    """Triton's statistics document."""
    return {"model_stats": [model_statistics(s) for s in records]}


def model_statistics(s: ModelStats) -> dict[str, Any]:
    """Triton's ModelStatistics JSON form."""
    return {
        "name": s.name,
        "version": s.version,
        "last_inference": s.last_inference_ms,
        "inference_count": s.inference_count,
        "execution_count": s.execution_count,
        "inference_stats": {
            "success": _duration(s.success),
            "fail": _duration(s.fail),
            "queue": _duration(s.queue),
            "compute_input": _duration(s.compute_input),
            "compute_infer": _duration(s.compute_infer),
            "compute_output": _duration(s.compute_output),
            "cache_hit": _duration(Duration()),
            "cache_miss": _duration(Duration()),
        },
        "response_stats": {},
        "batch_stats": [
            {
                "batch_size": size,
                "compute_input": _duration(b.compute_input),
                "compute_infer": _duration(b.compute_infer),
                "compute_output": _duration(b.compute_output),
            }
            for size, b in sorted(s.batches.items())
        ],
        "memory_usage": [],
    }


def _duration(d: Duration) -> dict[str, int]:
    return {"count": d.count, "ns": d.ns}


def index_entry(entry: IndexEntry) -> dict[str, str]:
    state, reason = index_state(entry)
    doc = {"name": entry.name, "version": entry.version, "state": state}
    if reason:
        doc["reason"] = reason
    return doc
