"""/metrics writes the families a real Triton writes: same names, types and label names.

The reference is a scrape of Triton 2.51 (PyTriton 0.7.0) after successful and failing requests:
`triton_metrics_reference.txt` beside this file, with the command in its header.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import RunningServer

pytestmark = pytest.mark.e2e

REFERENCE = Path(__file__).with_name("triton_metrics_reference.txt")

# Families Triton writes that fnserve cannot have, and why.
TRITON_ONLY = {
    "nv_pinned_memory_pool_total_bytes": "fnserve has no pinned (page-locked) host memory pool",
    "nv_pinned_memory_pool_used_bytes": "fnserve has no pinned (page-locked) host memory pool",
}
# Written by Triton only on a GPU or with its response cache on, so absent from the reference
# (taken on a CPU-only machine, cache off) and from fnserve: nv_gpu_*, nv_energy_consumption,
# nv_cache_*, nv_inference_*_summary_us (summaries are off by default).
FNSERVE_ONLY = {
    "fnserve_inference_request_latency_us",
    "fnserve_inference_exec_timeout",
    "fnserve_inference_oom_split",
    "fnserve_model_state",
    "fnserve_model_load_duration_seconds",
    "fnserve_model_cold_start_duration_seconds",
    "fnserve_model_cold_starts",
    "fnserve_model_idle_unloads",
    "fnserve_model_evictions",
    "fnserve_model_reloads",
    "fnserve_model_memory_bytes",
    "fnserve_model_instances",
    # durable jobs (server/jobs_metrics.py)
    "fnserve_jobs",
    "fnserve_jobs_queue_depth",
    "fnserve_jobs_oldest_queued_age_seconds",
    "fnserve_job_duration_seconds",
}

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="')


def families(text: str) -> dict[str, tuple[str, frozenset[str], set[str]]]:
    """Family name -> (TYPE, label names, sample names), from Prometheus text format."""
    types: dict[str, str] = {}
    labels: dict[str, set[str]] = {}
    samples: dict[str, set[str]] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
        elif line and not line.startswith("#"):
            match = _SAMPLE.match(line)
            assert match, f"not a sample line: {line!r}"
            name, label_text, value = match.groups()
            float(value)
            family = _family_of(name, types)
            labels.setdefault(family, set()).update(_LABEL.findall(label_text or ""))
            samples.setdefault(family, set()).add(name)
    return {
        n: (t, frozenset(labels.get(n, set())), samples.get(n, set())) for n, t in types.items()
    }


def _family_of(sample: str, types: dict[str, str]) -> str:
    if sample in types:
        return sample
    for suffix in ("_bucket", "_sum", "_count"):
        base = sample.removesuffix(suffix)
        if base in types and types[base] in ("histogram", "summary"):
            return base
    raise AssertionError(f"sample {sample!r} belongs to no declared family")


def _traffic(server: RunningServer) -> None:
    """Successes and a model failure, so every labelled series exists (as in the reference)."""
    client = httpclient.InferenceServerClient(server.http_url)
    inp = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    inp.set_data_from_numpy(np.ones((1, 4), np.float32))
    for _ in range(3):
        client.infer("identity", [inp])
    bad = httpclient.InferInput("INPUT0", [1], "FP32")
    bad.set_data_from_numpy(np.array([-1.0], np.float32))
    with pytest.raises(InferenceServerException):
        client.infer("fails", [bad])


def test_metric_families_equal_tritons(server: RunningServer) -> None:
    _traffic(server)
    response = httpx.get(server.metrics_url)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    ours = families(response.text)
    triton = families(REFERENCE.read_text())
    assert set(triton) - set(ours) == set(TRITON_ONLY)
    assert set(ours) - set(triton) == FNSERVE_ONLY
    for name in set(triton) & set(ours):
        assert ours[name][:2] == triton[name][:2], name  # TYPE and label names
        assert ours[name][2] == triton[name][2], name  # samples named as Triton names them
    assert not any(n.endswith("_total") for _, _, names in ours.values() for n in names)


def test_counters_count_as_tritons_do(server: RunningServer) -> None:
    """Triton's request duration sums successful requests only (its failing model showed 0)."""
    before = httpx.get(server.metrics_url).text
    _traffic(server)
    after = httpx.get(server.metrics_url).text

    def value(text: str, series: str) -> float:
        line = next(x for x in text.splitlines() if x.startswith(series + " "))
        return float(line.rsplit(" ", 1)[1])

    fails = '{model="fails",version="1"}'
    failure = 'nv_inference_request_failure{model="fails",reason="BACKEND",version="1"}'
    assert value(after, failure) - value(before, failure) == 1
    assert value(after, "nv_inference_request_duration_us" + fails) == 0
    success = 'nv_inference_request_success{model="identity",version="1"}'
    assert value(after, success) - value(before, success) == 3
    assert 0 <= value(after, "nv_cpu_utilization") <= 1
    assert 0 < value(after, "nv_cpu_memory_used_bytes") < value(after, "nv_cpu_memory_total_bytes")


def test_readme_names_the_families_fnserve_writes(server: RunningServer) -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    paragraph = readme[readme.index("- Metrics written exactly as Triton") :].split("\n- ")[0]
    paragraph = paragraph.replace("{input,infer,output}", "(input|infer|output)")
    named: set[str] = set()
    for token in re.findall(r"`((?:nv|fnserve)_[a-z_|()]+)`", paragraph):
        parts = re.match(r"(.*)\((.*)\)(.*)", token)
        named |= {f"{parts[1]}{p}{parts[3]}" for p in parts[2].split("|")} if parts else {token}
    ours = set(families(httpx.get(server.metrics_url).text))
    written = {n for n in named if not n.endswith("_")}  # `nv_pinned_memory_pool_*` prefixes
    assert written - set(TRITON_ONLY) == ours
