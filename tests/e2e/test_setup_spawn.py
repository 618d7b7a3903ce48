"""`lambo setup` end to end, as a desktop client meets it: a real `lambo setup` process (the
console script, `python -m lambo_core`, or the .pyz under a Python without lambo's
dependencies) writes its entry with LAMBO_HOME given relative; the entry's command, args
and env are then spawned with an EMPTY PATH from another directory, and the server answers
MCP (initialize, tools/list) and embeds with the model LAMBO_HOME's config names."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.e2e.conftest import ROOT, body, derive

pytestmark = pytest.mark.usefixtures("drop_unpacked")

SCRIPT = Path(sys.executable).parent / "lambo"
SECRET = "e2e-s3cret"


def setup_argv(how: str, request: pytest.FixtureRequest) -> list[str]:
    if how == "console script":
        if not SCRIPT.is_file():
            pytest.skip("lambo is not installed in this venv")
        return [str(SCRIPT)]
    if how == "python -m":
        return [sys.executable, "-m", "lambo_core"]
    bare_python: list[str] = request.getfixturevalue("bare_python")
    return [*bare_python, str(request.getfixturevalue("pyz"))]


def written_entry(client: str, printed: str, home: Path, project: Path) -> dict[str, Any]:
    """The lambo entry `lambo setup CLIENT --write` left (Claude Code's: its add-json line)."""
    if client == "claude":
        line = next(x for x in printed.splitlines() if x.startswith("claude mcp add-json"))
        entry = json.loads(shlex.split(line)[4])
        assert entry.pop("type") == "stdio"
        return dict(entry)
    if client == "codex":
        text = (home / ".codex" / "config.toml").read_text()
        assert SECRET not in text
        return dict(tomllib.loads(text)["mcp_servers"]["lambo"])
    path = home / ".cursor" / "mcp.json" if client == "cursor" else project / ".mcp.json"
    assert SECRET not in path.read_text()
    return dict(json.loads(path.read_text())["mcpServers"]["lambo"])


@pytest.mark.parametrize(
    "how, client",
    [("console script", "generic"), ("python -m", "codex"), ("pyz", "claude")],
)
def test_the_written_entry_serves_with_an_empty_path_from_elsewhere(
    how: str, client: str, served_home: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    argv = setup_argv(how, request)
    home, project, elsewhere = tmp_path / "home", tmp_path / "proj", tmp_path / "elsewhere"
    for where in (home, project, elsewhere):
        where.mkdir()
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "LAMBO_HOME": os.path.relpath(served_home, project),  # relative: made absolute
        "LAMBO_AUTH_TOKEN": SECRET,  # never written
    }
    if how != "pyz":  # this checkout's setup code; the archive holds its own copy
        env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(
        [*argv, "setup", client, "--session", "s", "--write"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert SECRET not in out.stdout + out.stderr
    entry = written_entry(client, out.stdout, home, project)
    assert entry["env"] == {"LAMBO_HOME": str(served_home)}
    assert Path(entry["command"]).is_absolute()
    if how == "console script":
        assert entry["command"] == str(SCRIPT) and entry["args"][0] == "serve"
    elif how == "python -m":
        assert entry["command"] == os.path.abspath(sys.executable)
        assert entry["args"][:2] == ["-m", "lambo_core"]
    else:
        assert entry["command"] == os.path.abspath(argv[0])
        assert entry["args"][0] == argv[-1] and entry["args"][0].endswith(".pyz")
        assert "the entry runs it under this Python" in out.stderr

    params = StdioServerParameters(
        command=entry["command"],
        args=entry["args"],
        env={**entry["env"], "PATH": ""},  # over the SDK's defaults: no PATH at all
        cwd=str(elsewhere),
    )

    async def scenario() -> None:
        with anyio.fail_after(240):
            async with Client(params) as mcp:
                assert mcp.instructions is not None and "session 's'" in mcp.instructions
                names = {t.name for t in (await mcp.list_tools()).tools}
                assert {"lambo_derive", "lambo_recall", "lambo_stats"} <= names
                receipt = await derive(mcp, "the billing service retries webhooks three times")
                wait = {"agent_id": "agent-a", "receipt": receipt, "wait_ms": 60_000}
                stats = body(await mcp.call_tool("lambo_stats", wait))
                assert stats["receipt"]["state"] == "applied"
                # the model LAMBO_HOME's lambo.toml names: the env reached the serve
                assert stats["embedding_contract"]["model"] == "minilm"

    anyio.run(scenario)
    assert (served_home / "data" / "lambo.db").is_file()
    assert list(elsewhere.iterdir()) == []  # the serve wrote nothing where it was started
