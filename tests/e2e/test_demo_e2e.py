"""`lambo demo` spawned as a process with the real MiniLM model installed (its wall time is
tests/bench/demo.py's to print)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.e2e.conftest import lambo_argv, serve_env


def test_demo_runs_with_the_installed_model(served_home: Path) -> None:
    env = serve_env(served_home)
    env["LAMBO_LOG"] = "WARNING"
    out = subprocess.run(
        [*lambo_argv(), "demo"],
        capture_output=True,
        text=True,
        env=env,
        cwd=served_home,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "in a throwaway SQLite store" in text
    assert "embedder: minilm (384 dimensions), hybrid matching" in text
    assert "keyword-only" not in text
    assert "derived 4 concept(s): 4 created (4 embedded), 0 matched existing" in text
    assert "Venerable -> Canonical, blast radius 9" in text
    assert "⚑ Load-bearing pillar — 9 nodes depend on this. Modify with caution." in text
    assert "⚠ Contradicted at" in text
    assert not (served_home / "data" / "lambo.db").exists()
