"""A client nobody here wrote: MCP Inspector's CLI (npm, pinned) against `lambo serve`.

The README's test command installs it into .npm-tools/ (as .ci/run does). Outside
CI a machine without it skips these tests; under CI a missing inspector fails.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ROOT, lambo_argv, serve_env

INSPECTOR = ROOT / ".npm-tools" / "node_modules" / ".bin" / "mcp-inspector"


def inspector(home: Path, *args: str) -> dict[str, Any]:
    if not INSPECTOR.exists():
        if os.environ.get("CI"):
            pytest.fail(f"MCP Inspector is not installed at {INSPECTOR} (see the README)")
        pytest.skip("MCP Inspector is not installed (npm install --prefix .npm-tools ...)")
    env = serve_env(home)
    env["MCP_CATALOG_PATH"] = str(home / "inspector-catalog.json")
    # The inspector does not pass its own environment on to the server: name what it needs.
    argv = [
        str(INSPECTOR),
        "--cli",
        "-e",
        f"LAMBO_HOME={home}",
        "--cwd",
        str(home),
        *lambo_argv(),
        "serve",
        "--session",
        "insp",
        *args,
    ]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=home, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return dict(json.loads(out.stdout))


def test_inspector_lists_the_tools(served_home: Path) -> None:
    listed = inspector(served_home, "--method", "tools/list")
    names = [t["name"] for t in listed["tools"]]
    assert {"lambo_recall", "lambo_derive", "lambo_stats"} <= set(names)
    for tool in listed["tools"]:
        assert tool["inputSchema"]["additionalProperties"] is False


def test_inspector_derives_and_reads_back(served_home: Path) -> None:
    concepts = json.dumps([{"content": "inspector wrote this fact", "concept_type": "entity"}])
    ack = inspector(
        served_home,
        "--method",
        "tools/call",
        "--tool-name",
        "lambo_derive",
        "--tool-arg",
        "agent_id=inspector",
        "--tool-arg",
        f"concepts={concepts}",
    )
    assert ack["isError"] is False
    assert ack["structuredContent"]["receipt_state"] == "pending"
    # A second inspector run is a new serve of the same session: the write was kept.
    stats = inspector(
        served_home,
        "--method",
        "tools/call",
        "--tool-name",
        "lambo_stats",
        "--tool-arg",
        "agent_id=inspector",
    )
    assert stats["structuredContent"]["concept_count"] == 1
    recalled = inspector(
        served_home,
        "--method",
        "tools/call",
        "--tool-name",
        "lambo_recall",
        "--tool-arg",
        "agent_id=inspector",
        "--tool-arg",
        "query=which fact did the inspector write",
    )
    assert recalled["isError"] is False
    hits = recalled["structuredContent"]["hits"]
    assert hits[0]["content"] == "inspector wrote this fact"
