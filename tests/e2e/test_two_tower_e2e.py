"""Real `lambo` processes with the tiny two-tower model configured: a text derive is
embedded by its text tower, `lambo stats` says the embedder embeds text and images, and
`lambo model verify` embeds a probe image."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.conftest import run_lambo
from tests.two_tower import clip_home


def test_stats_and_verify_of_a_two_tower_model(lambo_home: Path, tmp_path: Path) -> None:
    clip_home(lambo_home, tmp_path)
    derived = run_lambo(
        lambo_home, "derive", "--session", "s", "--content", "the deploy dashboard is crimson"
    )
    assert derived.returncode == 0, derived.stderr
    stats = run_lambo(lambo_home, "stats", "--session", "s", "--json")
    assert stats.returncode == 0, stats.stderr
    payload = json.loads(stats.stdout)
    assert payload["embedding_modalities"] == ["text", "image"]
    assert payload["embedding_contract"] == {"kind": "onnx", "model": "tiny-clip", "dim": 8}
    assert payload["concept_count"] == 1
    summary = run_lambo(lambo_home, "stats", "--session", "s")
    assert "modalities text, image" in summary.stdout
    verify = run_lambo(lambo_home, "model", "verify")
    assert verify.returncode == 0, verify.stderr
    assert "embeds images too: a probe image in" in verify.stdout
