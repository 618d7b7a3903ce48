"""What the `lambo setup` tests share: a HOME of their own with the current directory a
project named ``myproj``, and the printed form of an entry without its comment lines."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from lambo_core.setup_launch import running_launcher


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME in tmp, no client's own location variable, the current directory ``myproj``.
    (A plugin of tests/conftest.py, so every test module may ask for it.)"""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("CODEX_HOME", raising=False)
    monkeypatch.delenv("PI_CODING_AGENT_DIR", raising=False)
    project = tmp_path / "myproj"
    project.mkdir()
    monkeypatch.chdir(project)
    return home


def body(printed: str) -> str:
    """The printed form without its comment lines."""
    return "\n".join(line for line in printed.splitlines() if not line.startswith("#"))


def lambo_entry(session: str = "myproj", **env: str) -> dict[str, Any]:
    """The command entry `lambo setup` writes from this test process: the lambo this Python
    runs (``setup_launch.running_launcher``; its choice is tested on its own) and the
    variables set, LAMBO_HOME (the autouse fixture's) and ``env``."""
    launcher = running_launcher()
    variables = {"LAMBO_HOME": os.environ["LAMBO_HOME"], **env}
    return {
        "command": launcher.command,
        "args": [*launcher.prefix, "serve", "--session", session],
        "env": dict(sorted(variables.items())),
    }
