"""`lambo serve --transport http` over real HTTP on 127.0.0.1 with the SDK's own client:
both protocol versions, the same tools and receipts as stdio, several sessions kept apart,
and a stdio serve of an HTTP-held session forwarding to it."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters

from lambo_core.store import SqliteStore
from tests.e2e.conftest import body, derive, lambo_argv, serve_env
from tests.e2e.http_serve import HttpServe, http_client, serve_settings
from tests.http_requests import MCP_HEADERS, initialize


async def _derive_wait_recall(client: Client, content: str, query: str) -> dict[str, object]:
    receipt = await derive(client, content)
    waited = body(
        await client.call_tool(
            "lambo_stats", {"agent_id": "agent-a", "receipt": receipt, "wait_ms": 30_000}
        )
    )
    assert waited["receipt"]["state"] == "applied"
    return body(await client.call_tool("lambo_recall", {"agent_id": "agent-a", "query": query}))


@pytest.mark.parametrize(("mode", "version"), [("legacy", "2025-11-25"), ("auto", "2026-07-28")])
def test_the_sdk_client_lists_derives_waits_and_recalls(
    served_home: Path, tmp_path: Path, mode: str, version: str
) -> None:
    with HttpServe(served_home, tmp_path / "m.db") as serve:
        url = serve.url("web")

        async def scenario() -> None:
            async with http_client(url, mode=mode) as client:
                assert client.protocol_version == version
                names = [t.name for t in (await client.list_tools()).tools]
                assert names[:3] == ["lambo_recall", "lambo_derive", "lambo_record_action"]
                recalled = await _derive_wait_recall(
                    client, "the deploy script lives in ops/deploy.sh", "deploy script"
                )
                hits = recalled["hits"]
                assert isinstance(hits, list)
                assert hits[0]["content"] == "the deploy script lives in ops/deploy.sh"

        anyio.run(scenario)
        assert serve.stop() == 0
    assert "http method=POST session=web status=200" in serve.log
    assert "ops/deploy.sh" not in serve.log  # arguments are never logged


def test_two_sessions_of_one_serve_stay_apart(served_home: Path, tmp_path: Path) -> None:
    with HttpServe(served_home, tmp_path / "m.db", ("alpha", "beta")) as serve:

        async def scenario() -> None:
            async with http_client(serve.url("alpha")) as alpha:
                await _derive_wait_recall(alpha, "alpha keeps its notes in a red box", "notes")
            async with http_client(serve.url("beta")) as beta:
                stats = body(await beta.call_tool("lambo_stats", {"agent_id": "agent-a"}))
                assert stats["concept_count"] == 0
                recalled = body(
                    await beta.call_tool("lambo_recall", {"agent_id": "agent-a", "query": "notes"})
                )
                assert recalled["hits"] == []
            # /mcp is the first session's
            async with http_client(serve.url()) as default:
                stats = body(await default.call_tool("lambo_stats", {"agent_id": "agent-a"}))
                assert stats["concept_count"] == 1
                assert default.instructions and "alpha" in default.instructions

        anyio.run(scenario)
        assert serve.stop() == 0
    # both sessions embedded (a derive, a recall): one model load served them
    assert serve.log.count("loaded model minilm") == 1, serve.log


def test_a_stdio_serve_and_a_cli_call_of_an_http_held_session_forward_to_it(
    served_home: Path, tmp_path: Path
) -> None:
    store = tmp_path / "m.db"
    with HttpServe(served_home, store, ("shared",)) as serve:
        url = serve.url("shared")
        stdio = StdioServerParameters(
            command=lambo_argv()[0],
            args=[*lambo_argv()[1:], "serve", "--session", "shared", "--store", str(store)],
            env=serve_env(served_home),
            cwd=str(served_home),
        )

        async def scenario() -> None:
            async with Client(stdio) as forwarded:
                await _derive_wait_recall(forwarded, "the cache is flushed at midnight", "cache")
                stats = body(await forwarded.call_tool("lambo_stats", {"agent_id": "agent-a"}))
            async with http_client(url) as direct:
                held = body(await direct.call_tool("lambo_stats", {"agent_id": "agent-a"}))
            assert held["concept_count"] == 1
            assert stats["holder_pid"] == held["holder_pid"] == serve.proc.pid

        anyio.run(scenario)

        def shell(*args: str) -> dict[str, Any]:
            ran = subprocess.run(
                [*lambo_argv(), *args, "--session", "shared", "--store", str(store), "--json"],
                capture_output=True,
                text=True,
                env=serve_env(served_home),
                cwd=served_home,
                timeout=120,
            )
            assert ran.returncode == 0, ran.stderr
            return dict(json.loads(ran.stdout))

        recalled = shell("recall", "--query", "when is the cache flushed")
        assert recalled["hits"][0]["content"] == "the cache is flushed at midnight"
        assert shell("stats")["holder_pid"] == serve.proc.pid  # answered by the HTTP serve
        assert serve.stop() == 0


def test_a_session_held_elsewhere_refuses_the_start_and_frees_the_others(
    served_home: Path, tmp_path: Path
) -> None:
    store = tmp_path / "m.db"
    argv = lambo_argv()

    def stdio(session: str) -> StdioServerParameters:
        return StdioServerParameters(
            command=argv[0],
            args=[*argv[1:], "serve", "--session", session, "--store", str(store)],
            env=serve_env(served_home),
            cwd=str(served_home),
        )

    async def scenario() -> None:
        async with Client(stdio("taken")) as holder:
            held = body(await holder.call_tool("lambo_stats", {"agent_id": "a"}))
            with HttpServe(served_home, store, ("free", "taken")) as serve:
                assert await anyio.to_thread.run_sync(serve.wait_exit) == 1
            last = serve.lines[-1]
            assert last.startswith("lambo: conflict: session 'taken' is already held by"), last
            assert f"pid {held['holder_pid']}" in last
            assert serve.base is None  # it never listened
        # "free" was taken first, then given back (not left to lapse with the process)
        leases = SqliteStore(store)
        try:
            lease = leases.get_lease("free")
            assert lease is not None and lease.pid == serve.proc.pid
            assert lease.expires_at == 0
        finally:
            leases.close()

    anyio.run(scenario)


def test_an_idle_mcp_session_expires_and_frees_its_place(served_home: Path, tmp_path: Path) -> None:
    serve_settings(served_home, session_idle_timeout_s=1.0)
    with HttpServe(served_home, tmp_path / "m.db") as serve:
        url = serve.url("web")
        base = serve.wait_listening()
        with httpx2.Client(timeout=30) as http:
            opened = http.post(url, json=initialize(), headers=MCP_HEADERS)
            assert opened.status_code == 200
            session_id = opened.headers["mcp-session-id"]
            assert http.get(f"{base}/healthz").json()["mcp_sessions"] == 1
            deadline = time.monotonic() + 60  # a failure bound, not a pacing
            while http.get(f"{base}/healthz").json()["mcp_sessions"]:
                assert time.monotonic() < deadline, "the idle session never expired"
                time.sleep(0.2)
            listed = http.post(
                url,
                json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                headers={**MCP_HEADERS, "mcp-session-id": session_id},
            )
            assert listed.status_code == 404  # the client must start a new session
        assert serve.stop() == 0
