"""Instances that follow the load (`max_instances`), end to end and as a policy."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import tritonclient.http as httpclient

from fnserve.scheduling.autoscale import ScalePolicy, decide
from tests.serverless.helpers import MODELS, metric, wait_for
from tests.serverproc import ServerProcess

LABELS = {"model": "elastic", "version": "1"}


@pytest.mark.parametrize(
    ("instances", "queue_ms", "peak", "step"),
    [
        (1, 20.0, None, 1),  # requests wait: grow
        (3, 20.0, None, 0),  # at max_instances
        (2, 1.0, None, 0),  # short waits, and the down window has not passed
        (2, 1.0, 1, -1),  # one instance was never needed for the whole window
        (2, 1.0, 2, 0),  # both were busy at some point
        (1, 0.0, 0, 0),  # never below max(min_instances, 1)
    ],
)
def test_the_policy(instances: int, queue_ms: float, peak: int | None, step: int) -> None:
    assert decide(ScalePolicy(1, 3, 5.0, 1.0), instances, queue_ms, peak) == step


def test_instances_grow_under_load_and_shrink_when_it_stops() -> None:
    with ServerProcess.start(MODELS, "--model-control-mode", "explicit", "--load-model",
                             "elastic") as server:  # fmt: skip
        assert metric(server, "fnserve_model_instances", **LABELS) == 1
        stop = threading.Event()
        answers: list[float] = []

        def client() -> None:
            while not stop.is_set():
                answers.append(float(infer_elastic(server)))

        threads = [threading.Thread(target=client) for _ in range(12)]
        for thread in threads:
            thread.start()
        try:
            wait_for(lambda: metric(server, "fnserve_model_instances", **LABELS) == 3,
                     "three instances under load")  # fmt: skip
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        assert set(answers) == {2.0}
        wait_for(lambda: metric(server, "fnserve_model_instances", **LABELS) == 1,
                 "back to one instance when idle")  # fmt: skip
        assert "instance 2 added (3 now)" in server.output()
        assert "released (1 now)" in server.output()


def infer_elastic(server: ServerProcess) -> float:
    client = httpclient.InferenceServerClient(server.http.removeprefix("http://"))
    x = httpclient.InferInput("X", [1], "FP32")
    x.set_data_from_numpy(np.array([1.0], np.float32))
    return float(client.infer("elastic", [x]).as_numpy("Y")[0])
