"""`lambo demo`: the scripted scenario end to end, keyword-only (no model in the test home)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from lambo_core import demo
from lambo_core.cli import cli
from lambo_core.config import load_config
from lambo_core.model import Status
from lambo_core.store import open_store


def run_demo(*args: str) -> Result:
    return CliRunner().invoke(cli, ["demo", *args])


def assert_story(out: str) -> None:
    """The lines a newcomer should see: citations, the walk to Canonical, both warnings."""
    assert "[1] agent-api starts the API" in out
    assert "4 citation(s) recorded" in out
    assert "stage 2 dependents: 2 >= 3 (NOT met)" in out
    assert "lambo_record_action as agent-api" in out
    assert "seen Canonical" in out
    assert "None -> Candidate" in out
    assert "Candidate -> Venerable" in out
    assert "Venerable -> Canonical, blast radius 9" in out
    assert "user schema [Entity, canonical]" in out
    assert "⚑ Load-bearing pillar — 9 nodes depend on this. Modify with caution." in out
    assert "⚠ Contradicted at" in out and "by agent-api" in out
    assert "9 direct dependencies rest on a contradicted concept" in out
    assert "demo finished in" in out


def test_demo_memory_store_keyword_only(lambo_home: Path) -> None:
    out = run_demo("--store", "memory")
    assert out.exit_code == 0, out.output
    text = out.output
    assert "in a memory store (gone when the demo ends)" in text
    assert 'no model is installed for embedder.model = "bge-m3"' in text
    assert 'the demo runs keyword-only (match_strategy = "canonical")' in text
    assert "`lambo model pull bge-m3`" in text and "`lambo model import DIR --name NAME`" in text
    assert "(0 embedded)" in text
    assert_story(text)
    # The recall that carries the warnings is agent-auth's.
    step = text.split("agent-auth recalls the user schema before building on it again")[1]
    assert step.splitlines()[1].startswith("    > lambo_recall as agent-auth:")


def test_demo_default_store_is_a_throwaway_file(lambo_home: Path) -> None:
    config = load_config()
    out = run_demo("--session", "first-look")
    assert out.exit_code == 0, out.output
    assert "session 'first-look', in a throwaway SQLite store (deleted when" in out.output
    assert_story(out.output)
    assert not config.store_path.exists()  # the user's memory was never opened


def test_demo_store_path_keeps_the_session_and_wants_a_fresh_one(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    out = run_demo("--store", str(db), "--session", "api")
    assert out.exit_code == 0, out.output
    assert f"The session stays in {db}" in out.output
    store = open_store("sqlite", db)
    try:
        events = store.canon_events("api")
    finally:
        store.close()
    assert [e.to_status for e in events if e.blast_radius is not None] == [Status.CANONICAL]
    assert [e.blast_radius for e in events if e.to_status is Status.CANONICAL] == [9]
    again = run_demo("--store", str(db), "--session", "api")
    assert again.exit_code == 2
    assert "session 'api' already exists" in again.output


def test_demo_says_which_step_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(demo.DEMO_SETTINGS, "canonization.canonical_min_blast_radius", 50)
    monkeypatch.setattr(demo, "WAIT_S", 0.3)
    out = run_demo("--store", "memory")
    assert out.exit_code == 1
    last = out.output.strip().splitlines()[-1]
    assert last.startswith(
        "lambo demo: step 7 (the daemon walks the user schema to Canonical (polling "
        "lambo_inspect)) failed: the user schema is still Venerable after 0.3 s"
    )
    assert "blast radius 9" in last and "needs more than 50" in last


def test_keyword_only_by_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAMBO_EMBEDDER", "none")
    out = run_demo("--store", "memory")
    assert out.exit_code == 0, out.output
    assert "embedder: none, by your configuration" in out.output
    assert "lambo model pull" not in out.output


def fake_contract(_config: Any) -> dict[str, Any]:
    return {"kind": "onnx", "model": "minilm", "dim": 384}


def test_plan_with_a_model_embeds_on_sqlite_but_not_in_memory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(demo, "read_contract", fake_contract)

    def load(flags: dict[str, object]) -> Any:
        return load_config(flags=flags)

    on_file = demo.plan_demo(load, str(tmp_path / "x.db"))
    assert not on_file.keyword_only
    assert on_file.config.get("embedder.match_strategy") == "hybrid"
    assert on_file.embedder_line.startswith("embedder: minilm (384 dimensions), hybrid")
    in_memory = demo.plan_demo(load, "memory")
    assert in_memory.keyword_only
    assert in_memory.config.get("embedder.match_strategy") == "canonical"
    assert "memory store keeps no vectors" in in_memory.embedder_line
    # The demo's timings win over the user's settings.
    assert on_file.config.get("canonization.cycle_interval_s") == pytest.approx(0.025)
    assert on_file.config.get("canonization.edge_min_age_s") == pytest.approx(0.01)
