"""e2e fixtures: a LAMBO_HOME with the real MiniLM model imported, and how to spawn `lambo`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from lambo_core.embed.importer import import_model
from tests.embed_fixtures import minilm_source_dir

ROOT = Path(__file__).resolve().parents[2]


def lambo_argv() -> list[str]:
    """The installed console script when present, else the checkout's lambo.py."""
    script = Path(sys.executable).parent / "lambo"
    if script.exists():
        return [str(script)]
    return [sys.executable, str(ROOT / "lambo.py")]


@pytest.fixture
def served_home(lambo_home: Path, tmp_path: Path) -> Path:
    """LAMBO_HOME with MiniLM imported as the configured model."""
    import_model(
        minilm_source_dir(tmp_path / "minilm-src"),
        "minilm",
        lambo_home / "cache" / "models",
        pooling="mean",
    )
    config = lambo_home / "config" / "lambo.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('[embedder]\nmodel = "minilm"\nthreads = 1\n')
    return lambo_home


def serve_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAMBO_")}
    env["LAMBO_HOME"] = str(home)
    env["LAMBO_LOG"] = "INFO"
    return env
