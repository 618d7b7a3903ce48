"""Two projects at /mcp/s/a and /mcp/s/b over one general, in one `lambo serve --transport http`.

A write scoped to general through a is recalled from general through b; its receipt answers
only through a (forbidden through b and through /mcp/s/general, where general is served
unlayered). general is held once for the whole process, whether it has an address of its own
or not, and a stop leaves no lease held. A call scoped to general spends general's own rate
(429 naming the layer), a merged recall only the project's. A credential that does not reach
general is refused as for an unknown scope and reads only what it reaches."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client

from lambo_core.clock import SystemClock
from lambo_core.hub import lease_free
from lambo_core.store import SqliteStore
from tests.e2e.conftest import body
from tests.e2e.http_serve import HttpServe, http_client, serve_settings

AGENT = "agent-a"
PREFERENCE = "worktree branches are always rebased onto origin main first"
PROJECT_FACT = "the widgets release tarball is built by cargo xtask dist"
TOKEN_PROJECTS = "projects-token-0123456789abcdef"  # reaches a and b, not general
TOKEN_ALL = "everything-token-0123456789abcd"  # reaches every session


def text_of(result: Any) -> str:
    return str(result.content[0].text)


async def derive(client: Client, content: str, **extra: Any) -> dict[str, Any]:
    arguments = {"agent_id": AGENT, "concepts": [{"content": content, "concept_type": "logic"}]}
    return body(await client.call_tool("lambo_derive", {**arguments, **extra}))


async def receipt_state(client: Client, receipt: str) -> str:
    answer = body(
        await client.call_tool(
            "lambo_stats", {"agent_id": AGENT, "receipt": receipt, "wait_ms": 30_000}
        )
    )
    return str(answer["receipt"]["state"])


async def recall(client: Client, query: str, **extra: Any) -> Any:
    return await client.call_tool("lambo_recall", {"agent_id": AGENT, "query": query, **extra})


def leases_free(store_path: Path, sessions: tuple[str, ...]) -> bool:
    store = SqliteStore(store_path)
    try:
        now = SystemClock().now()
        return all(lease_free(store.get_lease(s), now) for s in sessions)
    finally:
        store.close()


@pytest.mark.parametrize("general_served", [True, False], ids=["at-its-url", "no-url"])
def test_a_general_write_through_a_is_recalled_through_b(
    served_home: Path, tmp_path: Path, general_served: bool
) -> None:
    sessions = ("a", "b", "general") if general_served else ("a", "b")
    store = tmp_path / "m.db"
    with HttpServe(served_home, store, sessions, extra=("--layer", "general")) as serve:

        async def scenario() -> None:
            async with http_client(serve.url("a")) as a:
                assert "also searches its shared layers: general" in (a.instructions or "")
                written = await derive(a, PREFERENCE, scope="general")
                assert written["session"] == "general"
                receipt = str(written["receipt"])
                assert await receipt_state(a, receipt) == "applied"
                fact = await derive(a, PROJECT_FACT)
                assert await receipt_state(a, str(fact["receipt"])) == "applied"
            async with http_client(serve.url("b")) as b:
                merged = await recall(b, "how are worktree branches rebased")
                hits = body(merged)["hits"]
                assert hits and hits[0]["content"] == PREFERENCE
                assert hits[0]["session"] == "general"
                assert "from general" in text_of(merged)
                # a's own fact stays in a
                facts = body(await recall(b, "widgets release tarball cargo xtask"))["hits"]
                assert PROJECT_FACT not in [h["content"] for h in facts]
                # the receipt belongs to a: forbidden through b
                assert await receipt_state(b, receipt) == "forbidden"
            if general_served:
                async with http_client(serve.url("general")) as general:
                    assert "shared layers" not in (general.instructions or "")
                    direct = body(await recall(general, "how are worktree branches rebased"))
                    assert direct["hits"][0]["content"] == PREFERENCE
                    assert "session" not in direct["hits"][0]  # unlayered: no session field
                    assert await receipt_state(general, receipt) == "forbidden"

        anyio.run(scenario)
        assert serve.stop() == 0
    # one holder of general for the whole process: nothing fenced another out
    assert "fenced" not in serve.log and "lost its lease" not in serve.log, serve.log
    assert "session general: this serve holds it" in serve.log or not general_served
    assert leases_free(store, ("a", "b", "general"))


def _tool_call(tool: str, arguments: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    """One 2026-07-28 tools/call: a single POST, no MCP session to open (so each request is
    exactly one of the session's rate)."""
    version = "2026-07-28"
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": version,
        "mcp-method": "tools/call",
        "mcp-name": tool,
    }
    meta = {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    params = {"name": tool, "arguments": {"agent_id": AGENT, **arguments}, "_meta": meta}
    return headers, {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}


def test_a_call_scoped_to_general_spends_generals_rate(served_home: Path, tmp_path: Path) -> None:
    # the lowest rate: a burst of one request, the next 10 s later (well past these calls)
    serve_settings(served_home, per_session_rps=0.1)
    with HttpServe(
        served_home, tmp_path / "m.db", ("a", "b", "general"), extra=("--layer", "general")
    ) as serve:
        base = serve.wait_listening()
        with httpx2.Client(base_url=base, timeout=60) as http:

            def post(path: str, tool: str, **arguments: Any) -> httpx2.Response:
                headers, message = _tool_call(tool, arguments)
                return http.post(path, json=message, headers=headers)

            direct = post("/mcp/s/general", "lambo_recall", query="rebased")
            assert direct.status_code == 200, direct.text
            # general's one request is spent: a call scoped to it through a project is refused
            for project in ("a", "b"):
                refused = post(f"/mcp/s/{project}", "lambo_recall", query="q", scope="general")
                assert refused.status_code == 429
                assert int(refused.headers["retry-after"]) >= 1
                assert refused.json()["error"]["message"] == "too many requests to layer general"
            # ... and spent nothing of a's: a merged recall reads general all the same
            merged = post("/mcp/s/a", "lambo_recall", query="rebased")
            assert merged.status_code == 200, merged.text
            assert "layer general is unavailable" not in merged.text
            # a's own one request is now spent too
            assert post("/mcp/s/a", "lambo_recall", query="q").status_code == 429
        assert serve.stop() == 0


def test_a_credential_that_does_not_reach_general(served_home: Path, tmp_path: Path) -> None:
    digest = hashlib.sha256(TOKEN_PROJECTS.encode()).hexdigest()
    with (served_home / "config" / "lambo.toml").open("a") as fh:
        fh.write(
            f'\n[[serve.credential]]\nname = "projects"\nsessions = ["a", "b"]\n'
            f'token_sha256 = "{digest}"\n'
            '[[serve.credential]]\nname = "ops"\nsessions = ["*"]\ntoken_env = "OPS_TOKEN"\n'
        )
    with HttpServe(
        served_home,
        tmp_path / "m.db",
        ("a", "b", "general"),
        extra=("--layer", "general"),
        env={"OPS_TOKEN": TOKEN_ALL},
    ) as serve:

        async def scenario() -> None:
            async with http_client(serve.url("a"), token=TOKEN_ALL) as a:
                written = await derive(a, PREFERENCE, scope="general")
                receipt = str(written["receipt"])
                assert await receipt_state(a, receipt) == "applied"
                full = body(await recall(a, "how are worktree branches rebased"))
                assert [h["session"] for h in full["hits"]][:1] == ["general"]
            async with http_client(serve.url("a"), token=TOKEN_PROJECTS) as a:
                write = await a.call_tool(
                    "lambo_derive",
                    {"agent_id": AGENT, "scope": "general", "concepts": [{"content": "x"}]},
                )
                assert write.is_error
                assert text_of(write).endswith(
                    "scope must name this session or one of its layers: a"
                )
                read = await recall(a, "rebased", scope="general")
                assert read.is_error
                assert text_of(read).endswith(
                    'scope "general" is not a scope of this session; its scopes are: a'
                )
                # the same words as for a scope no serve has
                unknown = await recall(a, "rebased", scope="team")
                assert text_of(unknown) == text_of(read).replace('"general"', '"team"')
                # its merged recall reads only a, without a word about general
                merged = body(await recall(a, "how are worktree branches rebased"))
                assert PREFERENCE not in [h["content"] for h in merged["hits"]]
                assert not any("general" in w for w in merged.get("warnings", []))
                # nor does the receipt of the write into general answer it
                assert await receipt_state(a, receipt) == "restart_lost"
            async with httpx2.AsyncClient(timeout=60) as http:
                headers, message = _tool_call("lambo_stats", {})
                headers["authorization"] = f"Bearer {TOKEN_PROJECTS}"
                direct = await http.post(serve.url("general"), json=message, headers=headers)
                assert direct.status_code == 404
                assert direct.json()["error"]["message"] == "not found"

        anyio.run(scenario)
        assert serve.stop() == 0
