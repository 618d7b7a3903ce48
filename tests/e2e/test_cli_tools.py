"""`lambo derive|record-action|recall|stats` from a shell: alone, and beside a running hub, on
each store that outlives a command (``served_shared_store``: SQLite, PostgreSQL)."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

from tests.e2e.conftest import lambo_argv, serve_env
from tests.e2e.conftest import run_lambo as lambo


def test_cli_alone_writes_reads_and_exit_codes(served_home: Path, served_shared_store: str) -> None:
    out = lambo(served_home, "derive", "--session", "cli", "--content", "user schema owns accounts")
    assert out.returncode == 0, out.stderr
    assert "applied — derived 1 concept(s): 1 created (1 embedded)" in out.stdout
    out = lambo(
        served_home,
        "record-action",
        "--session",
        "cli",
        "--action",
        "created migrations/003.sql",
        "--produces",
        "migrations/003.sql",
        "--depends-on",
        "user schema owns accounts",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    body = json.loads(out.stdout)
    assert body["outcome"]["state"] == "applied"
    out = lambo(served_home, "recall", "--session", "cli", "--query", "who owns the accounts")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("user schema owns accounts [Entity]")
    assert "blast radius 1" in out.stdout.splitlines()[0]

    bad_value = lambo(served_home, "recall", "--session", "cli", "--query", "x", "--top-k", "101")
    assert bad_value.returncode == 2
    assert bad_value.stderr.splitlines()[-1] == "lambo: --top-k must be in 1..=100"
    refused = lambo(
        served_home, "derive", "--session", "cli", "--content", "y", "--depends-on", "no such"
    )
    assert refused.returncode == 1
    assert refused.stderr.splitlines()[-1].startswith("lambo: reference refused:")
    bad_kind = lambo(served_home, "derive", "--session", "cli", "--content", "y", "--kind", "Logic")
    assert bad_kind.returncode == 2
    assert bad_kind.stderr.splitlines()[-1].startswith("lambo: --kind: unknown variant Logic")


def test_cli_forwards_to_the_running_hub(served_home: Path, served_shared_store: str) -> None:
    argv = lambo_argv()
    params = StdioServerParameters(
        command=argv[0],
        args=[*argv[1:], "serve", "--session", "shared-cli"],
        env=serve_env(served_home),
        cwd=str(served_home),
    )

    async def scenario() -> None:
        async with Client(params) as client:
            hub = await client.call_tool("lambo_stats", {"agent_id": "a"})
            hub_pid = hub.structured_content["holder_pid"]
            out = await anyio.to_thread.run_sync(
                lambda: lambo(
                    served_home,
                    "derive",
                    "--session",
                    "shared-cli",
                    "--content",
                    "written from the shell while a serve holds the session",
                )
            )
            assert out.returncode == 0, out.stderr
            assert "applied" in out.stdout
            stats = await anyio.to_thread.run_sync(
                lambda: lambo(served_home, "stats", "--session", "shared-cli", "--json")
            )
            body = json.loads(stats.stdout)
            assert body["holder_pid"] == hub_pid  # the writer's own figures
            seen = await client.call_tool("lambo_stats", {"agent_id": "a"})
            assert seen.structured_content["concept_count"] == 1

    anyio.run(scenario)
