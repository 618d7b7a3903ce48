"""Shared fixtures. Every test runs with LAMBO_HOME under its own tmp dir."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


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
