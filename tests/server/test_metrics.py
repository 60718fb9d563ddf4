"""/metrics on its own port: Triton's family names, growing with traffic, agreeing with stats."""

from __future__ import annotations

import re
import threading
import time

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import RunningServer

pytestmark = pytest.mark.e2e


def _samples(server: RunningServer) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = httpx.get(server.metrics_url)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    # A plain line parser: prometheus_client's own renames counters to `<name>_total`.
    samples = {}
    for line in response.text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            name, _, labels = series.partition("{")
            pairs = re.findall(r'(\w+)="([^"]*)"', labels)
            samples[(name, frozenset(pairs))] = float(value)
    return samples


def _value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
           **labels: str) -> float:  # fmt: skip
    return samples[(name, frozenset({"model": "identity", "version": "1", **labels}.items()))]


def _infer(client: httpclient.InferenceServerClient, value: float) -> None:
    x = np.full((1, 4), value, np.float32)
    inp = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    inp.set_data_from_numpy(x)
    client.infer("identity", [inp])


def test_metrics_grow_with_traffic_and_agree_with_statistics(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    before = _samples(server)
    for i in range(7):
        _infer(client, i)
    after = _samples(server)
    success = "nv_inference_request_success"
    assert _value(after, success) - _value(before, success) == 7
    assert _value(after, "nv_inference_count") - _value(before, "nv_inference_count") == 7
    assert _value(after, "nv_inference_exec_count") > _value(before, "nv_inference_exec_count")
    for family in ("request", "queue", "compute_input", "compute_infer", "compute_output"):
        name = f"nv_inference_{family}_duration_us"
        assert _value(after, name) >= _value(before, name)
    assert _value(after, "nv_inference_request_duration_us") > _value(
        before, "nv_inference_request_duration_us"
    )
    assert _value(after, "nv_inference_pending_request_count") == 0
    # The latency histogram counts every success, so p50..p99 can be read from it.
    assert _value(after, "fnserve_inference_request_latency_us_count") == _value(after, success)
    assert _value(after, "fnserve_inference_request_latency_us_bucket", le="+Inf") == _value(
        after, success
    )
    stats = client.get_inference_statistics("identity")["model_stats"][0]
    assert int(stats["inference_stats"]["success"]["count"]) == _value(after, success)
    assert int(stats["execution_count"]) == _value(after, "nv_inference_exec_count")


def test_failures_carry_a_reason_label(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    before = _samples(server)
    inp = httpclient.InferInput("INPUT0", [1], "FP32")
    inp.set_data_from_numpy(np.array([-1.0], np.float32))
    with pytest.raises(InferenceServerException, match="negative input"):
        client.infer("fails", [inp])
    after = _samples(server)
    key = ("nv_inference_request_failure",
           frozenset({"model": "fails", "version": "1", "reason": "BACKEND"}.items()))  # fmt: skip
    assert after[key] - before.get(key, 0.0) == 1


def test_metrics_port_serves_only_metrics(server: RunningServer) -> None:
    assert httpx.get(server.metrics_url.replace("/metrics", "/other")).status_code == 404


def test_a_blocking_model_does_not_delay_health_checks(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    inp = httpclient.InferInput("SECONDS", [1], "FP32")
    inp.set_data_from_numpy(np.array([1.0], np.float32))
    slow = threading.Thread(target=lambda: client.infer("sleeper", [inp]))
    slow.start()
    time.sleep(0.2)  # the model now blocks its instance thread for a second
    start = time.perf_counter()
    assert httpx.get(f"http://{server.http_url}/v2/health/ready").status_code == 200
    elapsed = time.perf_counter() - start
    slow.join(10)
    assert elapsed < 0.5, f"health check took {elapsed:.3f} s while a model slept"
