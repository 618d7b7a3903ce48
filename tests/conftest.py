"""Shared fixtures. Every test runs with LAMBO_HOME under its own tmp dir."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lambo_core.embed.onnx import OnnxEmbedder
from lambo_core.embed.pull import import_model
from tests.embed_fixtures import minilm_source_dir


@pytest.fixture(autouse=True)
def lambo_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "lambo-home"
    monkeypatch.setenv("LAMBO_HOME", str(home))
    # config discovery reads ./lambo.toml: never pick up one from the checkout
    monkeypatch.chdir(tmp_path)
    for var in (
        "LAMBO_CONFIG",
        "LAMBO_STORE",
        "LAMBO_SQLITE_PATH",
        "LAMBO_EMBEDDER",
        "LAMBO_EMBED_DIM",
        "LAMBO_EMBEDDER_MODEL",
        "LAMBO_PROMOTION_POLICY",
        "LAMBO_AUTH_TOKEN",
        "XDG_RUNTIME_DIR",
    ):
        monkeypatch.delenv(var, raising=False)
    yield home


@pytest.fixture(scope="session")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> OnnxEmbedder:
    """The real all-MiniLM-L6-v2 int8 model the PyPI packages ship, imported once per run."""
    root = tmp_path_factory.mktemp("minilm")
    model_dir = import_model(
        minilm_source_dir(root / "src"), "minilm", root / "models", pooling="mean"
    )
    return OnnxEmbedder(model_dir, threads=1)
