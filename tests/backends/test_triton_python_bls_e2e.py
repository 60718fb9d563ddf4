"""BLS end to end: Triton python-backend models calling models, served by a real `fnserve serve`
and called with tritonclient over HTTP and gRPC, against the same pipeline as a Triton ensemble
and against numpy."""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.backends.triton_bls_models import MEAN, SCALE, classification_repository, reference
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.e2e
Outputs = tuple[np.ndarray, np.ndarray]  # LABEL, PROB
Infer = Callable[[str, np.ndarray], Outputs]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = classification_repository(tmp_path_factory.mktemp("bls_repository"))
    with ServerProcess.start(root) as running:
        yield running
        assert running.stop() == 0


def _raw(rows: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(MEAN, np.array(SCALE) * 1.5, size=(rows, 4)).astype(np.float32)


def _http(server: ServerProcess, concurrency: int = 1) -> httpclient.InferenceServerClient:
    url = server.http.removeprefix("http://")
    return httpclient.InferenceServerClient(url, concurrency=concurrency, network_timeout=30)


def _http_infer(server: ServerProcess) -> Infer:
    client = _http(server)

    def infer(model: str, raw: np.ndarray) -> Outputs:
        tensor = httpclient.InferInput("RAW", list(raw.shape), "FP32")
        tensor.set_data_from_numpy(raw)
        result = client.infer(model, [tensor])
        return result.as_numpy("LABEL"), result.as_numpy("PROB")

    return infer


def _grpc_infer(server: ServerProcess) -> Infer:
    client = grpcclient.InferenceServerClient(server.grpc)

    def infer(model: str, raw: np.ndarray) -> Outputs:
        tensor = grpcclient.InferInput("RAW", list(raw.shape), "FP32")
        tensor.set_data_from_numpy(raw)
        result = client.infer(model, [tensor], client_timeout=30)
        return result.as_numpy("LABEL"), result.as_numpy("PROB")

    return infer


@pytest.fixture(params=["http", "grpc"])
def infer(request: pytest.FixtureRequest, server: ServerProcess) -> Infer:
    return _http_infer(server) if request.param == "http" else _grpc_infer(server)


@pytest.mark.parametrize("rows", [1, 7])
def test_ensemble_and_bls_give_the_same_answer_as_numpy(infer: Infer, rows: int) -> None:
    raw = _raw(rows, seed=rows)
    ensemble = infer("pipeline", raw)
    label, probability = reference(raw)
    assert ensemble[0].dtype == np.int64
    assert ensemble[1].dtype == np.float32
    np.testing.assert_array_equal(ensemble[0], label)
    np.testing.assert_allclose(ensemble[1], probability, rtol=1e-5)
    for model in ("bls_sync", "bls_async"):  # the same models' maths: identical to the bit
        got = infer(model, raw)
        np.testing.assert_array_equal(got[0], ensemble[0])
        np.testing.assert_array_equal(got[1], ensemble[1])


@pytest.mark.parametrize(
    ("model", "how"),
    [("bls_sync", ""), ("bls_async", "model 'bls_async' raised TritonModelException: ")],
)
def test_a_callee_error_comes_back_through_bls_as_a_client_error(
    infer: Infer, model: str, how: str
) -> None:
    raw = _raw(3, seed=0)
    raw[1, 2] = np.nan  # preprocess passes it on; the classifier refuses it
    with pytest.raises(InferenceServerException) as info:
        infer(model, raw)
    message = str(info.value)
    # bls_sync answers with the callee's error as its response's; bls_async lets it raise
    assert f"] {how}step 'classifier' failed: call to model " in message
    assert "model 'classifier' raised ValueError: FEATURES must be finite, row 1 is" in message


def test_a_bls_cycle_fails_instead_of_waiting_for_itself(infer: Infer) -> None:
    with pytest.raises(InferenceServerException) as info:
        infer("bls_loop", _raw(1, seed=0))
    assert "model call cycle: bls_loop -> bls_loop" in str(info.value)


def _counts(client: httpclient.InferenceServerClient, model: str) -> np.ndarray:
    """The model's inference and execution counts so far."""
    stats = client.get_inference_statistics(model)["model_stats"][0]
    return np.array([stats["inference_count"], stats["execution_count"]], np.int64)


def test_concurrent_bls_requests_get_their_own_answers_and_the_steps_batch(
    server: ServerProcess,
) -> None:
    client = _http(server, concurrency=50)
    rows = [_raw(1, seed=100 + i) for i in range(50)]
    before = {m: _counts(client, m) for m in ("bls_async", "classifier")}
    pending = []
    for raw in rows:
        tensor = httpclient.InferInput("RAW", [1, 4], "FP32")
        tensor.set_data_from_numpy(raw)
        pending.append(client.async_infer("bls_async", [tensor]))
    for raw, request in zip(rows, pending, strict=True):
        result = request.get_result()
        label, probability = reference(raw)
        np.testing.assert_array_equal(result.as_numpy("LABEL"), label)
        np.testing.assert_allclose(result.as_numpy("PROB"), probability, rtol=1e-5)
    assert (_counts(client, "bls_async") - before["bls_async"]).tolist() == [50, 50]  # unbatched
    inferences, executions = _counts(client, "classifier") - before["classifier"]
    assert inferences == 50
    assert executions < 50  # the BLS calls met in the classifier's dynamic batcher


def test_concurrent_grpc_requests_to_a_batching_bls_model(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc)
    rows = [_raw(1 + i % 3, seed=200 + i) for i in range(50)]
    answers: queue.Queue[tuple[int, Any, Any]] = queue.Queue()
    for i, raw in enumerate(rows):
        tensor = grpcclient.InferInput("RAW", list(raw.shape), "FP32")
        tensor.set_data_from_numpy(raw)
        client.async_infer(
            "bls_sync",
            [tensor],
            callback=lambda result, error, i=i: answers.put((i, result, error)),
            client_timeout=30,
        )
    got = {i: (result, error) for i, result, error in (answers.get(timeout=30) for _ in rows)}
    for i, raw in enumerate(rows):
        result, error = got[i]
        assert error is None, error
        label, probability = reference(raw)
        np.testing.assert_array_equal(result.as_numpy("LABEL"), label)
        np.testing.assert_allclose(result.as_numpy("PROB"), probability, rtol=1e-5)
