"""`fnserve bench` end to end: a real server, the real CLI in a subprocess, Locust in its own.

Locust monkey-patches whatever process imports it, so it never loads in this one: every run
goes through `python -m fnserve bench`, as a user would start it.
"""

from __future__ import annotations

import base64
import csv
import importlib.util
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from fnserve import DynamicBatching, Tensor, model
from fnserve.runtime import Runtime
from tests.conftest import RunningServer, start_server, stop_server
from tests.models import identity

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(120)]
if importlib.util.find_spec("locust") is None:  # importing it here would patch pytest for gevent
    pytest.skip("needs the loadtest extra", allow_module_level=True)

SEEN: list[tuple[float, ...]] = []  # every row bench_recorder was asked to compute


@model(
    name="bench_recorder",
    max_batch_size=8,
    dynamic_batching=DynamicBatching(max_queue_delay_microseconds=0),
    inputs=[Tensor("INPUT0", "FP32", [4])],
    outputs=[Tensor("OUTPUT0", "FP32", [4])],
)
def bench_recorder(INPUT0: np.ndarray) -> dict[str, np.ndarray]:
    """Remembers the rows it sees, so a test can tell which data reached the model."""
    SEEN.extend(tuple(row) for row in INPUT0.tolist())
    return {"OUTPUT0": INPUT0}


@pytest.fixture(scope="module")
def bench_server() -> Iterator[RunningServer]:
    handle = start_server(Runtime([identity, bench_recorder]))
    try:
        yield handle.server
    finally:
        stop_server(handle)


def served_requests(server: RunningServer, name: str) -> int:
    stats = httpx.get(f"http://{server.http_url}/v2/models/{name}/stats").json()["model_stats"]
    return sum(
        s["inference_stats"]["success"]["count"] + s["inference_stats"]["fail"]["count"]
        for s in stats
    )


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "fnserve", "bench", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=100, env=env)


def read_csv(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.open()))


def check_rows(rows: list[dict[str, str]], concurrency: list[int]) -> None:
    assert [int(r["concurrency"]) for r in rows] == concurrency
    for row in rows:
        assert int(row["requests"]) > 0
        assert row["errors"] == "0"
        assert int(row["sent"]) == int(row["server_requests"]), row
        assert row["integrity_ok"] == "True"
        p50, p90, p95, p99 = (float(row[f"p{q}_ms"]) for q in (50, 90, 95, 99))
        assert 0 < p50 <= p90 <= p95 <= p99


@pytest.mark.parametrize(
    ("protocol", "encoding"), [("http", "--json"), ("grpc", "--binary")], ids=["http", "grpc"]
)
def test_sweep_matches_server_statistics(
    bench_server: RunningServer, tmp_path: Path, protocol: str, encoding: str
) -> None:
    url = bench_server.http_url if protocol == "http" else bench_server.grpc_url
    before = served_requests(bench_server, "identity")
    result = bench(
        "identity",
        "--url",
        url,
        "--protocol",
        protocol,
        encoding,
        "--shape",
        "INPUT0:16",
        "--concurrency",
        "1,4",
        "--duration",
        "2",
        "--warmup",
        "0.5",
        "--csv",
        str(tmp_path / "sweep.csv"),
        "--plot",
        str(tmp_path / "sweep.png"),
    )
    assert result.returncode == 0, result.stderr
    rows = read_csv(tmp_path / "sweep.csv")
    check_rows(rows, [1, 4])
    assert sum(int(r["sent"]) for r in rows) == served_requests(bench_server, "identity") - before
    assert "Request concurrency: 4" in result.stdout
    assert "Avg request latency:" in result.stdout
    assert "Avg batch size:" in result.stdout
    assert "c=4:" in result.stderr  # the progress lines

    import matplotlib.image

    image = matplotlib.image.imread(tmp_path / "sweep.png")
    assert image.ndim == 3
    assert image.shape[0] > 200
    assert image.shape[1] > 300


def test_input_data_reaches_the_model(bench_server: RunningServer, tmp_path: Path) -> None:
    rows = [(k, k + 0.25, k + 0.5, k + 0.75) for k in range(1, 6)]
    raw = base64.b64encode(np.array([9, 9, 9, 9], dtype="<f4").tobytes()).decode()
    entries: list[dict[str, object]] = [{"INPUT0": list(r)} for r in rows[:4]]
    entries += [{"INPUT0": {"content": list(rows[4]), "shape": [4]}}, {"INPUT0": {"b64": raw}}]
    data = tmp_path / "data.json"
    data.write_text(json.dumps({"data": entries}))
    SEEN.clear()
    result = bench(
        "bench_recorder",
        "--url",
        bench_server.http_url,
        "--input-data",
        str(data),
        "--batch-size",
        "2",
        "--concurrency",
        "2",
        "--duration",
        "1",
        "--warmup",
        "0",
    )
    assert result.returncode == 0, result.stderr
    assert set(SEEN) == {*rows, (9.0, 9.0, 9.0, 9.0)}


def test_workers_share_the_load(bench_server: RunningServer, tmp_path: Path) -> None:
    before = served_requests(bench_server, "identity")
    result = bench(
        "identity",
        "--url",
        bench_server.http_url,
        "--shape",
        "INPUT0:8",
        "--workers",
        "2",
        "--concurrency",
        "4",
        "--duration",
        "1.5",
        "--warmup",
        "0.5",
        "--csv",
        str(tmp_path / "workers.csv"),
    )
    assert result.returncode == 0, result.stderr
    assert "2 process(es)" in result.stdout
    rows = read_csv(tmp_path / "workers.csv")
    check_rows(rows, [4])
    assert int(rows[0]["sent"]) == served_requests(bench_server, "identity") - before


def test_requests_from_elsewhere_are_reported_as_an_error(bench_server: RunningServer) -> None:
    stop = threading.Event()

    def other_client() -> None:
        body = {
            "inputs": [
                {"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}
            ]
        }
        with httpx.Client(base_url=f"http://{bench_server.http_url}") as client:
            while not stop.is_set():
                client.post("/v2/models/identity/infer", json=body)

    thread = threading.Thread(target=other_client)
    thread.start()
    try:
        result = bench(
            "identity",
            "--url",
            bench_server.http_url,
            "--shape",
            "INPUT0:4",
            "--duration",
            "1",
            "--warmup",
            "0.2",
        )
    finally:
        stop.set()
        thread.join()
    assert result.returncode == 1
    assert "error: concurrency 1: the harness sent" in result.stderr
    assert "extra" in result.stderr
    assert "MISMATCH" in result.stdout
