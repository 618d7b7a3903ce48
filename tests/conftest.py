"""Shared fixtures. Every test runs with LAMBO_HOME under its own tmp dir and no LAMBO_* of the
shell it was started from."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from lambo_core.embed.importer import import_model
from lambo_core.embed.onnx import OnnxEmbedder
from tests.embed_fixtures import minilm_source_dir

# The `lambo setup` tests' HOME (the fixture ``home``), shared by their three modules.
pytest_plugins = ["tests.setup_home"]

# What lambo reads from the environment besides LAMBO_* (tests/test_environment.py fails on any
# other the source reads): a developer's values must not leak into a test.
FOREIGN_VARIABLES = (
    "XDG_RUNTIME_DIR",
    "CODEX_HOME",
    "PI_CODING_AGENT_DIR",
    # `lambo setup` passes these on when LAMBO_HOME is unset (setup_launch.XDG_DIRS)
    "XDG_DATA_HOME",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
)


def inherited_variables(environ: Mapping[str, str]) -> list[str]:
    """What the fixture clears: every LAMBO_* set in ``environ``, and the foreign variables."""
    return sorted({name for name in environ if name.startswith("LAMBO_")} | set(FOREIGN_VARIABLES))


@pytest.fixture(autouse=True)
def lambo_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for var in inherited_variables(os.environ):
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "lambo-home"
    monkeypatch.setenv("LAMBO_HOME", str(home))
    # config discovery reads ./lambo.toml: never pick up one from the checkout
    monkeypatch.chdir(tmp_path)
    yield home


@pytest.fixture(scope="session")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> OnnxEmbedder:
    """The real all-MiniLM-L6-v2 int8 model the PyPI packages ship, imported once per run."""
    root = tmp_path_factory.mktemp("minilm")
    model_dir = import_model(
        minilm_source_dir(root / "src"), "minilm", root / "models", pooling="mean"
    )
    return OnnxEmbedder(model_dir, threads=1)


@pytest.fixture
def pg_dsn() -> Iterator[str]:
    """A database of its own on the tests' real PostgreSQL (tests/pg_server.py)."""
    from tests import pg_server

    dsn = pg_server.new_database()
    yield dsn
    pg_server.drop_database(dsn)
