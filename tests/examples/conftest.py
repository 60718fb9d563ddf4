"""Fixtures of the MiniLM tests, built once per session: the torch reference, and one server
of model_repository/ holding both encoders (ONNX and .pt2) and their ensembles.

The encoder files are exported once into examples/minilm/.cache/ (reused while newer than the
weights, so later runs skip the export) and linked into a copy of the repository. torch and
the model package are imported only when a fixture runs: the test modules skip first when
they are missing.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from tests.examples.minilm_cases import SENTENCES
from tests.serverproc import ServerProcess

if TYPE_CHECKING:
    from examples.minilm.bert import Bert

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = ROOT / "model_repository"


@pytest.fixture(scope="session")
def bert() -> Bert:
    from examples.minilm.bert import Bert

    return Bert.pretrained()


@pytest.fixture(scope="session")
def reference(bert: Bert) -> np.ndarray:
    """The torch module's embeddings of SENTENCES."""
    from examples.minilm.bert import embed_reference

    return embed_reference(SENTENCES, bert)


@pytest.fixture(scope="session")
def repository_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """`fnserve serve` of a copy of model_repository/ with both encoder files in place."""
    from examples.minilm.export import ensure_onnx, ensure_pt2

    root = tmp_path_factory.mktemp("model_repository")
    generated = shutil.ignore_patterns("*.onnx", "*.pt2")
    shutil.copytree(REPOSITORY, root, dirs_exist_ok=True, ignore=generated)
    (root / "minilm_encoder" / "1" / "model.onnx").symlink_to(ensure_onnx())
    (root / "minilm_encoder_torch" / "1" / "model.pt2").symlink_to(ensure_pt2())
    with ServerProcess.start(root, timeout_s=180) as server:
        yield server
