"""`lambo forget` and `lambo backup` from a shell, beside a real `lambo serve` (MiniLM loaded)
and alone: a forget forwarded to the hub's writer and reflected in its next recall, one
served by the command itself, and a backup taken while the serve applies writes, checked
against every receipt applied before it began."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from contextlib import closing
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from lambo_core.model import Concept, ConceptType, WriteBatch, new_id
from lambo_core.paths import resolve_paths
from lambo_core.store import SqliteStore
from tests.e2e.conftest import body, open_served_store, serve_env
from tests.e2e.conftest import run_lambo as lambo
from tests.e2e.conftest import stdio_params as serve_params

SECRET = "the deploy token for staging is tok-7Hq2xUNIQUEzz91"
TOKEN = b"tok-7Hq2xUNIQUEzz91"


async def derive_applied(client: Client, content: str, **extra: object) -> str:
    ack = body(
        await client.call_tool(
            "lambo_derive",
            {"agent_id": "a", "concepts": [{"content": content, "concept_type": "logic", **extra}]},
        )
    )
    got = body(
        await client.call_tool(
            "lambo_stats", {"agent_id": "a", "receipt": ack["receipt"], "wait_ms": 30000}
        )
    )["receipt"]
    assert got["state"] == "applied", got
    return str(got["created"][0])


async def recall_text(client: Client, query: str) -> str:
    result = await client.call_tool("lambo_recall", {"agent_id": "a", "query": query})
    assert not result.is_error, result.content
    return str(result.content[0].text)  # type: ignore[union-attr]


def test_forget_through_the_running_hub(
    served_home: Path, served_shared_store: str, request: pytest.FixtureRequest
) -> None:
    session = "forget-hub"

    async def scenario() -> None:
        async with Client(serve_params(served_home, session)) as client:
            secret = await derive_applied(client, SECRET)
            cites = await derive_applied(
                client, "the release job reads the staging deploy token", depends_on=[SECRET]
            )
            await derive_applied(client, "the office coffee machine is on floor three")
            # by meaning: the MiniLM vector leg finds it before the forget
            assert secret[:8] in await recall_text(client, "credential used to ship to staging")
            before = body(await client.call_tool("lambo_stats", {"agent_id": "a"}))
            # an agent cannot forget: the admin tool is the hub socket's, never MCP's
            with pytest.raises(MCPError, match="unknown tool"):
                await client.call_tool("lambo.forget", {"agent_id": "a", "ids": [secret]})

            refused = await anyio.to_thread.run_sync(
                lambda: lambo(served_home, "forget", "--session", session, secret[:8], "feedbeef")
            )
            assert refused.returncode == 1
            assert refused.stderr.strip().splitlines()[-1] == (
                'lambo: reference refused: "feedbeef" names no concept in this session; '
                "nothing was removed"
            )
            out = await anyio.to_thread.run_sync(
                lambda: lambo(served_home, "forget", "--session", session, secret[:8])
            )
            assert out.returncode == 0, out.stderr
            lines = out.stdout.splitlines()
            assert lines[0].startswith(f"forgot 1 concept(s) ({secret[:8]}) and ")
            assert lines[1] == f"- {secret}"
            removed = int(lines[0].split(" and ")[1].split(" ")[0])
            assert removed >= 2

            # the hub's own index: at once, by meaning and by keyword alike
            after = body(await client.call_tool("lambo_stats", {"agent_id": "a"}))
            assert after["holder_pid"] == before["holder_pid"]  # the hub applied it
            assert after["concept_count"] == before["concept_count"] - 1
            assert after["edge_count"] == before["edge_count"] - removed
            for query in ("credential used to ship to staging", "tok-7Hq2xUNIQUEzz91"):
                shown = await recall_text(client, query)
                assert secret[:8] not in shown and "tok-7Hq2x" not in shown
            assert cites[:8] in await recall_text(client, "release job deploy token")

    anyio.run(scenario)
    store = open_served_store(served_shared_store, served_home, request)
    try:
        record = store.get_session(session)
        assert record is not None and not record.shared_layer
        (event,) = store.forget_events(session)
        assert event.node_ids and event.agent_id == "cli"
        assert all(TOKEN.decode() not in json.dumps(i.payload) for i in store.intents(session))
    finally:
        store.close()
    if served_shared_store == "sqlite":
        db = resolve_paths(serve_env(served_home)).default_store
        # the forget's checkpoint is PASSIVE (it never waits on readers): reset the WAL here
        with closing(sqlite3.connect(db)) as conn:
            assert conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
        for part in (db, db.with_name(db.name + "-wal")):
            if part.exists():
                assert TOKEN not in part.read_bytes(), part


def test_forget_from_the_shell_alone(served_home: Path) -> None:
    """No serve: the command holds the session for the call, as every tool command does."""
    session = "forget-alone"
    assert lambo(served_home, "derive", "--session", session, "--content", SECRET).returncode == 0
    made = json.loads(
        lambo(
            served_home, "recall", "--session", session, "--query", "deploy token", "--json"
        ).stdout
    )
    node = next(h["node_id"] for h in made["hits"] if "tok-7Hq2x" in h["content"])
    forgot = lambo(served_home, "forget", "--session", session, "--json", node)
    assert forgot.returncode == 0, forgot.stderr
    outcome = json.loads(forgot.stdout)
    assert outcome["state"] == "applied" and outcome["forgotten"] == [node]
    shown = lambo(served_home, "recall", "--session", session, "--query", "deploy token")
    assert shown.returncode == 0 and "tok-7Hq2x" not in shown.stdout
    missing = lambo(served_home, "forget", "--session", "no-such-session", node)
    assert missing.returncode == 1 and "no session named 'no-such-session'" in missing.stderr
    usage = lambo(served_home, "forget", "--session", session)
    assert usage.returncode == 2 and "Missing argument 'ID...'" in usage.stderr


def test_backup_while_the_serve_applies_writes(served_home: Path, tmp_path: Path) -> None:
    """Every write whose receipt was applied before the backup began is in the copy, which
    opens, passes integrity_check and `lambo session verify`."""
    session = "backup-live"
    db = resolve_paths(serve_env(served_home)).default_store
    seeded = SqliteStore(db)  # a store of some pages, so the copy takes several steps
    seeded.ensure_session("bulk", time.time())
    for start in range(0, 20000, 2000):
        texts = [f"bulk fact {i} " + "x" * 400 for i in range(start, start + 2000)]
        concepts = [
            Concept(new_id(), "bulk", t, t, ConceptType.ENTITY, 1.0, 1.0, "seed") for t in texts
        ]
        seeded.apply(WriteBatch(session="bulk", concepts=concepts))
    seeded.close()
    copy = tmp_path / "copy.db"
    applied_at: dict[str, float] = {}  # concept id -> when its receipt was seen applied
    started: list[float] = []
    done = anyio.Event()

    async def writer(client: Client) -> None:
        n = 0
        while not done.is_set() or n < 20:
            node = await derive_applied(client, f"live write number {n} about the backup")
            applied_at[node] = time.monotonic()
            n += 1

    async def backup() -> subprocess.CompletedProcess[str]:
        while len(applied_at) < 10:
            await anyio.sleep(0.05)
        started.append(time.monotonic())
        out = await anyio.to_thread.run_sync(lambda: lambo(served_home, "backup", str(copy)))
        done.set()
        return out

    async def scenario() -> subprocess.CompletedProcess[str]:
        async with Client(serve_params(served_home, session)) as client:
            result: list[subprocess.CompletedProcess[str]] = []
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(writer, client)

                async def run_backup() -> None:
                    result.append(await backup())

                tasks.start_soon(run_backup)
            return result[0]

    out = anyio.run(scenario)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"backed up {db} to {copy}: 2 session(s), ")
    before = {node for node, at in applied_at.items() if at < started[0]}
    after = {node for node, at in applied_at.items() if at > started[0]}
    assert len(before) >= 10 and after  # the serve kept writing around the backup

    assert copy.stat().st_mode & 0o777 == 0o600
    assert not list(tmp_path.glob(".copy.db.*"))  # the temporary file was renamed
    with sqlite3.connect(copy) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        held = {row[0] for row in conn.execute("SELECT id FROM concepts WHERE session = ?",
                                               (session,))}  # fmt: skip
        bulk = conn.execute("SELECT count(*) FROM concepts WHERE session = 'bulk'").fetchone()
    assert before <= held
    assert bulk == (20000,)
    verify = lambo(served_home, "session", "verify", "--session", session, "--store", str(copy))
    assert verify.returncode == 0, verify.stderr
    assert verify.stdout.startswith(f"session {session}: {len(held)} concepts")
