"""What every MiniLM test embeds and how: 24 sentences (empty, blank, longer than 128 tokens,
non-ASCII), the tolerance against the torch reference, and the tritonclient calls."""

from __future__ import annotations

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.serverproc import ServerProcess

TOLERANCE = 1e-4  # max abs difference from the torch module's embeddings

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


def text(sentences: list[str]) -> np.ndarray:
    """TEXT BYTES [N, 1] holding `sentences` as UTF-8."""
    return np.array([[s.encode("utf-8")] for s in sentences], dtype=object)


def http_embed(server: ServerProcess, name: str, sentences: list[str]) -> np.ndarray:
    """EMBEDDING [N, 384] of model `name` over HTTP."""
    client = httpclient.InferenceServerClient(server.http.removeprefix("http://"))
    try:
        tensor = httpclient.InferInput("TEXT", [len(sentences), 1], "BYTES")
        tensor.set_data_from_numpy(text(sentences))
        result = client.infer(name, [tensor]).as_numpy("EMBEDDING")
    finally:
        client.close()
    assert result is not None
    return np.asarray(result)


def grpc_embed(server: ServerProcess, name: str, sentences: list[str]) -> np.ndarray:
    """EMBEDDING [N, 384] of model `name` over gRPC."""
    client = grpcclient.InferenceServerClient(server.grpc)
    try:
        tensor = grpcclient.InferInput("TEXT", [len(sentences), 1], "BYTES")
        tensor.set_data_from_numpy(text(sentences))
        result = client.infer(name, [tensor]).as_numpy("EMBEDDING")
    finally:
        client.close()
    assert result is not None
    return np.asarray(result)


def assert_matches(server: ServerProcess, name: str, reference: np.ndarray) -> None:
    """Model `name` embeds SENTENCES like `reference` within TOLERANCE, over HTTP and gRPC."""
    http = http_embed(server, name, SENTENCES)
    grpc = grpc_embed(server, name, SENTENCES)
    assert http.shape == grpc.shape == reference.shape == (len(SENTENCES), 384)
    assert np.abs(http - reference).max() <= TOLERANCE
    assert np.abs(grpc - reference).max() <= TOLERANCE
    np.testing.assert_allclose(np.linalg.norm(http, axis=1), 1.0, atol=1e-5)
