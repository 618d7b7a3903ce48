"""A layered endpoint's rates and reach in the HTTP app: a call scoped to a layer draws one
request from the layer's own per_session_rps (the bucket its own address draws on), a merged
recall only from the addressed session's; over the layer's rate the same 429 as a session's,
naming the layer. A credential that does not reach the layer spends none of its rate, and the
tool handler sees what the credential reaches. Body reading for this keeps the SDK's 413."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
import pytest

from lambo_core.credentials import Credential, Verifier, digest_of
from lambo_core.mcp.http.app import Endpoint, HttpApp
from lambo_core.mcp.http.limits import RateLimits
from lambo_core.mcp.http.scoped import buffered_body, scoped_layer
from lambo_core.mcp.http.serve import session_manager
from lambo_core.mcp.server import build_server
from lambo_core.reach import current_reach
from tests.http_requests import MCP_HEADERS, call, initialize
from tests.test_http_app import BASE, PORT, Clock, asgi, settings

TOKEN_A = "alpha-token-0123456789abcdef"  # reaches a only
TOKEN_B = "bravo-token-0123456789abcdef"  # reaches a and general
TOKEN_C = "charl-token-0123456789abcdef"  # reaches every session
TOOLS = ["lambo_recall", "lambo_stats", "lambo_derive"]


def credentials() -> tuple[Credential, ...]:
    return (
        Credential("ci", digest_of(TOKEN_A), frozenset({"a"})),
        Credential("bot", digest_of(TOKEN_B), frozenset({"a", "general"})),
        Credential("ops", digest_of(TOKEN_C), None),
    )


@dataclass
class Served:
    app: HttpApp
    http: httpx2.AsyncClient
    clock: Clock
    #: each session's calls: (tool, arguments, the reach the handler saw)
    calls: dict[str, list[tuple[str, dict[str, Any], frozenset[str] | None]]] = field(
        default_factory=dict
    )

    async def open(self, path: str, token: str | None = None) -> str:
        headers = {**MCP_HEADERS, **_auth(token)}
        opened = await self.http.post(path, json=initialize(), headers=headers)
        assert opened.status_code == 200, opened.text
        sid = opened.headers["mcp-session-id"]
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        done = await self.http.post(path, json=note, headers={**headers, "mcp-session-id": sid})
        assert done.status_code == 202, done.text
        return sid

    async def tool(
        self, sid: str, path: str, tool: str, token: str | None = None, **arguments: Any
    ) -> httpx2.Response:
        return await self.http.post(
            path,
            json=call(tool, {"agent_id": "agent-a", **arguments}),
            headers={**MCP_HEADERS, **_auth(token), "mcp-session-id": sid},
        )


def _auth(token: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"} if token else {}


@contextlib.asynccontextmanager
async def served(**overrides: Any) -> AsyncIterator[Served]:
    """Project ``a`` layered over ``general``, and ``general`` at its own address."""
    config = settings(**overrides)
    clock = Clock()
    calls: dict[str, list[tuple[str, dict[str, Any], frozenset[str] | None]]] = {
        "a": [],
        "general": [],
    }

    def handler_of(session: str) -> Any:
        async def handler(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            calls[session].append((name, arguments, current_reach()))
            text = json.dumps({"session": session})
            return {"content": [{"type": "text", "text": text}], "isError": False}

        return handler

    def endpoint(session: str, layers: tuple[str, ...]) -> Endpoint:
        server = build_server(session, handler_of(session), lambda: TOOLS, layers)
        manager = session_manager(server, config, config.security(PORT))
        return Endpoint(session, manager, lambda: True, layers=layers)

    endpoints = [endpoint("a", ("general",)), endpoint("general", ())]
    app = HttpApp(
        endpoints,
        Verifier(config.credentials),
        RateLimits(config.per_credential_rps, config.per_session_rps, clock=clock),
        config.max_live_sessions,
        clock=clock,
    )
    async with contextlib.AsyncExitStack() as stack:
        for e in endpoints:
            await stack.enter_async_context(e.manager.run())
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url=BASE) as http:
            yield Served(app, http, clock, calls)


def run(scenario: Any) -> None:
    anyio.run(scenario)


# -- which layer a body scopes -----------------------------------------------------------


def _body(message: object) -> bytes:
    return json.dumps(message).encode()


@pytest.mark.parametrize(
    ("message", "layer"),
    [
        (call("lambo_recall", {"query": "q", "scope": "general"}), "general"),
        (call("lambo_derive", {"concepts": [], "scope": "general"}), "general"),
        (call("lambo_inspect", {"focus": "x", "scope": "general"}), "general"),
        (call("lambo_recall", {"query": "q"}), None),  # merged: the session's rate only
        (call("lambo_recall", {"query": "q", "scope": "a"}), None),  # the session itself
        (call("lambo_recall", {"query": "q", "scope": "team"}), None),  # not a layer here
        (call("lambo_recall", {"query": "q", "scope": " general"}), None),  # refused by tool
        (call("lambo_recall", {"query": "q", "scope": None}), None),  # null = omitted
        (call("lambo_stats", {"scope": "general"}), None),  # stats takes no scope
        (call("lambo_nope", {"scope": "general"}), None),
        ({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"scope": "general"}}, None),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": ["x"]}, None),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": ["x"]}}, None),
        (
            {"method": "tools/call", "params": {"name": "lambo_recall", "arguments": "s"}},
            None,
        ),
        ([call("lambo_recall", {"query": "q", "scope": "general"})], None),  # a batch
    ],
)
def test_the_scoped_layer_of_a_body(message: object, layer: str | None) -> None:
    assert scoped_layer(_body(message), ("general",)) == layer


def test_a_body_that_is_not_json_or_nests_too_deep_scopes_nothing() -> None:
    assert scoped_layer(b"{not json", ("general",)) is None
    assert scoped_layer(b"[" * 100_000 + b"]" * 100_000, ("general",)) is None
    assert scoped_layer(_body(call("lambo_recall", {"scope": "general"})), ()) is None


def test_buffered_body_replays_every_message_it_read() -> None:
    async def scenario() -> None:
        sent: list[dict[str, Any]] = [
            {"type": "http.request", "body": b"ab", "more_body": True},
            {"type": "http.request", "body": b"cd", "more_body": False},
            {"type": "http.disconnect"},
        ]
        queue = list(sent)

        async def receive() -> dict[str, Any]:
            return queue.pop(0)

        body, replay = await buffered_body(receive, 10, None)
        assert body == b"abcd"
        assert [await replay() for _ in sent] == sent  # the read ones, then the rest

    run(scenario)


def test_buffered_body_stops_at_the_limit_and_reads_nothing_declared_over_it() -> None:
    async def scenario() -> None:
        reads = 0

        async def receive() -> dict[str, Any]:
            nonlocal reads
            reads += 1
            return {"type": "http.request", "body": b"x" * 4, "more_body": True}

        body, replay = await buffered_body(receive, 10, None)
        assert (body, reads) == (None, 3)  # the chunk that crossed the limit, not past it
        assert (await replay())["body"] == b"xxxx"
        body, same = await buffered_body(receive, 10, 11)
        assert (body, reads, same) == (None, 3, receive)
        # a client gone before its whole body was sent: nothing to scope

        async def gone() -> dict[str, Any]:
            return {"type": "http.disconnect"}

        assert (await buffered_body(gone, 10, None))[0] is None

    run(scenario)


# -- rates -------------------------------------------------------------------------------


def test_a_scoped_call_spends_the_layers_rate_and_a_merged_recall_does_not() -> None:
    async def scenario() -> None:
        async with served(per_session_rps=2.0) as s:  # bursts of 4
            g = await s.open("/mcp/s/general")  # general: 2 spent
            a = await s.open("/mcp/s/a")  # a: 2 spent
            assert (
                await s.tool(a, "/mcp/s/a", "lambo_recall", query="q", scope="general")
            ).status_code == 200
            assert (await s.tool(g, "/mcp/s/general", "lambo_stats")).status_code == 200
            # general's burst is spent, by its own callers and a's scoped call together
            refused = await s.tool(a, "/mcp/s/a", "lambo_derive", concepts=[], scope="general")
            assert refused.status_code == 429
            assert refused.headers["retry-after"] == "1"
            assert refused.json() == {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": -32600, "message": "too many requests to layer general"},
            }
            direct = await s.tool(g, "/mcp/s/general", "lambo_stats")
            assert direct.status_code == 429
            assert direct.json()["error"]["message"] == "too many requests to this session"
            # a refused call spent none of a's rate: a merged recall and a call scoped to a
            # itself still go through, on a's bucket alone
            assert (await s.tool(a, "/mcp/s/a", "lambo_recall", query="q")).status_code == 200
            assert (
                await s.tool(a, "/mcp/s/a", "lambo_recall", query="q", scope="a")
            ).status_code == 429  # a's own burst: 2 + scoped + merged = 4, now spent
            assert [c[0] for c in s.calls["a"]] == ["lambo_recall", "lambo_recall"]
            s.clock.now += 0.5  # one request of each back
            again = await s.tool(a, "/mcp/s/a", "lambo_derive", concepts=[], scope="general")
            assert again.status_code == 200
            assert s.calls["a"][-1][1]["scope"] == "general"

    run(scenario)


def test_a_refused_layer_call_spends_no_credential_rate() -> None:
    async def scenario() -> None:
        async with served(
            credentials=credentials(), per_session_rps=1.0, per_credential_rps=1.0
        ) as s:
            a = await s.open("/mcp/s/a", TOKEN_B)  # bot and a: their bursts of 2 spent
            s.clock.now += 2.0  # both full again
            g = await s.open("/mcp/s/general", TOKEN_C)  # general: 2 of 2
            refused = await s.tool(
                a, "/mcp/s/a", "lambo_recall", TOKEN_B, query="q", scope="general"
            )
            assert refused.json()["error"]["message"] == "too many requests to layer general"
            # neither a's nor bot's rate was spent by it: two more of a's go through
            assert (
                await s.tool(a, "/mcp/s/a", "lambo_recall", TOKEN_B, query="q")
            ).status_code == 200
            assert (
                await s.tool(a, "/mcp/s/a", "lambo_recall", TOKEN_B, query="q")
            ).status_code == 200
            assert g

    run(scenario)


# -- reach -------------------------------------------------------------------------------


def test_the_handler_sees_what_the_credential_reaches() -> None:
    async def scenario() -> None:
        async with served(credentials=credentials()) as s:
            for token in (TOKEN_A, TOKEN_B, TOKEN_C):
                sid = await s.open("/mcp/s/a", token)
                answer = await s.tool(sid, "/mcp/s/a", "lambo_recall", token, query="q")
                assert answer.status_code == 200
            reaches = [c[2] for c in s.calls["a"]]
            assert reaches == [frozenset({"a"}), frozenset({"a", "general"}), None]

    run(scenario)


def test_without_credentials_the_handler_reaches_everything() -> None:
    async def scenario() -> None:
        async with served() as s:
            sid = await s.open("/mcp/s/a")
            assert (await s.tool(sid, "/mcp/s/a", "lambo_stats")).status_code == 200
            assert s.calls["a"][-1][2] is None

    run(scenario)


def test_a_credential_not_reaching_the_layer_spends_none_of_its_rate() -> None:
    async def scenario() -> None:
        async with served(credentials=credentials(), per_session_rps=1.0) as s:
            g = await s.open("/mcp/s/general", TOKEN_C)  # general: its burst of 2 spent
            a = await s.open("/mcp/s/a", TOKEN_A)  # a: its burst of 2 spent
            s.clock.now += 1.0  # a and general: one each back
            # ci does not reach general: its scope is refused by the tool (generically),
            # so the app does not take general's rate for it, nor name general in a 429
            answer = await s.tool(
                a, "/mcp/s/a", "lambo_recall", TOKEN_A, query="q", scope="general"
            )
            assert answer.status_code == 200
            assert s.calls["a"][-1][1]["scope"] == "general"
            assert (await s.tool(g, "/mcp/s/general", "lambo_stats", TOKEN_C)).status_code == 200

    run(scenario)


def test_a_layered_endpoint_keeps_the_sdks_body_limit() -> None:
    async def scenario() -> None:
        async with served(max_request_bytes=4096) as s:
            sid = await s.open("/mcp/s/a")
            scoped = call("lambo_recall", {"query": "q", "scope": "general", "pad": "x" * 8000})
            big = _body(scoped)
            status, _, text, reads = await asgi(
                s.app, "POST", "/mcp/s/a", [big], content_length=len(big), sid=sid
            )
            assert (status, text, reads) == (413, b"Request body too large", 0)
            chunks = [big[i : i + 1024] for i in range(0, len(big), 1024)]
            status, _, text, reads = await asgi(s.app, "POST", "/mcp/s/a", chunks, sid=sid)
            assert (status, text) == (413, b"Request body too large")
            assert reads == 5 < len(chunks)
            assert s.calls["a"] == []

    run(scenario)
