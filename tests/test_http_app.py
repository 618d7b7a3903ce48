"""The HTTP serve's ASGI app in-process: real SDK session managers (built as the serve builds
them) over lambo's MCP server, driven through httpx2's ASGITransport or raw ASGI calls.

Every refusal in the app's order: unknown path, credential (401), session (404, the same
bytes for one not served and one the credential does not reach), rates (429), the live
session ceiling (503, an opening request counted), the body limit (413, before the body is
read), Host (421) and Origin (403); /healthz; and the one log line per request."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
import pytest

from lambo_core.credentials import Credential, Verifier, digest_of
from lambo_core.mcp.http.app import Endpoint, HttpApp, idle_for, live_transports
from lambo_core.mcp.http.limits import RateLimits
from lambo_core.mcp.http.serve import HttpSettings, session_manager
from lambo_core.mcp.server import build_server
from tests.http_requests import MCP_HEADERS, call, initialize

PORT = 7700
BASE = f"http://127.0.0.1:{PORT}"
TOKEN_A = "alpha-token-0123456789abcdef"
TOKEN_B = "bravo-token-0123456789abcdef"
UNAUTHORIZED = (
    b'{"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "unauthorized"}}'
)
NOT_FOUND = b'{"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "not found"}}'


class Clock:
    def __init__(self) -> None:
        self.now = 50.0
        self.per_call = 0.0  # how far each tool call moves it (a call that takes time)

    def __call__(self) -> float:
        return self.now


@dataclass
class Served:
    """The app, a client on it, the tool calls each session's handler saw, and the clock."""

    app: HttpApp
    http: httpx2.AsyncClient
    clock: Clock
    calls: dict[str, list[tuple[str, dict[str, Any]]]] = field(default_factory=dict)

    async def open(self, path: str = "/mcp", token: str | None = None) -> str:
        """An MCP session at ``path``: initialize, then the initialized notification."""
        headers = {**MCP_HEADERS, **_auth(token)}
        opened = await self.http.post(path, json=initialize(), headers=headers)
        assert opened.status_code == 200, opened.text
        sid = opened.headers["mcp-session-id"]
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        done = await self.http.post(path, json=note, headers={**headers, "mcp-session-id": sid})
        assert done.status_code == 202, done.text
        return sid

    async def call(
        self, sid: str, path: str = "/mcp", token: str | None = None, **headers: str
    ) -> httpx2.Response:
        return await self.http.post(
            path,
            json=call("lambo_stats", {"agent_id": "agent-a"}),
            headers={**MCP_HEADERS, **_auth(token), "mcp-session-id": sid, **headers},
        )


def _auth(token: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"} if token else {}


def settings(**overrides: Any) -> HttpSettings:
    values: dict[str, Any] = {
        "bind": "127.0.0.1",
        "port": PORT,
        "credentials": (),
        "allowed_hosts": (),
        "allowed_origins": (),
        "per_credential_rps": 1000.0,
        "per_session_rps": 1000.0,
        "max_live_sessions": 32,
        "evict_idle_after_s": 60.0,
        "session_idle_timeout_s": 1800.0,
        "max_request_bytes": 4 * 1024 * 1024,
    }
    values.update(overrides)
    return HttpSettings(**values)


@contextlib.asynccontextmanager
async def served(
    sessions: tuple[str, ...] = ("web",),
    serving: bool = True,
    evict_idle_after_s: float | None = None,
    **overrides: Any,
) -> AsyncIterator[Served]:
    """An HttpApp as ``serve_http`` wires it, each session's handler recording its calls."""
    config = settings(**overrides)
    clock = Clock()
    calls: dict[str, list[tuple[str, dict[str, Any]]]] = {s: [] for s in sessions}

    def handler_of(session: str) -> Any:
        async def handler(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            calls[session].append((name, arguments))
            clock.now += clock.per_call
            text = json.dumps({"session": session})
            return {"content": [{"type": "text", "text": text}], "isError": False}

        return handler

    endpoints = [
        Endpoint(
            s,
            session_manager(
                build_server(s, handler_of(s), lambda: ["lambo_stats"]),
                config,
                config.security(PORT),
            ),
            lambda: serving,
        )
        for s in sessions
    ]
    app = HttpApp(
        endpoints,
        Verifier(config.credentials),
        RateLimits(config.per_credential_rps, config.per_session_rps, clock=clock),
        config.max_live_sessions,
        clock=clock,
        evict_idle_after_s=evict_idle_after_s,
    )
    async with contextlib.AsyncExitStack() as stack:
        for endpoint in endpoints:
            await stack.enter_async_context(endpoint.manager.run())
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url=BASE) as http:
            yield Served(app, http, clock, calls)


def two_credentials() -> tuple[Credential, ...]:
    return (
        Credential("ci", digest_of(TOKEN_A), frozenset({"web"})),
        Credential("bot", digest_of(TOKEN_B), frozenset({"notes"})),
    )


def run(scenario: Any) -> None:
    anyio.run(scenario)


# -- /healthz and unknown paths ---------------------------------------------------------


def test_healthz_needs_no_credential_and_says_nothing_of_content() -> None:
    async def scenario() -> None:
        async with served(("web", "notes"), credentials=two_credentials()) as s:
            health = await s.http.get("/healthz")
            assert health.status_code == 200
            counts = {"mcp_sessions": 0, "max_mcp_sessions": 32}
            assert health.json() == {"status": "ok", "sessions": 2, **counts}
            assert (await s.http.head("/healthz")).status_code == 200
            post = await s.http.post("/healthz")
            assert post.status_code == 405
            assert post.headers["allow"] == "GET, HEAD"
            s.app.stopping = True
            stopping = await s.http.get("/healthz")
            assert (stopping.status_code, stopping.json()) == (
                503,
                {"status": "stopping", "sessions": 2, **counts},
            )
        async with served(serving=False) as s:
            starting = await s.http.get("/healthz")
            assert (starting.status_code, starting.json()) == (
                503,
                {"status": "starting", "sessions": 1, "mcp_sessions": 0, "max_mcp_sessions": 32},
            )

    run(scenario)


@pytest.mark.parametrize("path", ["/", "/mcpx", "/mcp/s/", "/mcp/s/web/x", "/healthz/x", "/s/web"])
def test_a_path_the_serve_does_not_answer_is_404_before_any_credential(path: str) -> None:
    async def scenario() -> None:
        async with served(credentials=two_credentials()) as s:
            answer = await s.http.post(path, json=initialize(), headers=MCP_HEADERS)
            assert (answer.status_code, answer.content) == (404, NOT_FOUND)

    run(scenario)


def test_a_websocket_is_closed() -> None:
    async def scenario() -> None:
        async with served() as s:
            sent: list[dict[str, Any]] = []

            async def receive() -> dict[str, Any]:
                return {"type": "websocket.connect"}

            async def send(message: Any) -> None:
                sent.append(message)

            await s.app({"type": "websocket", "path": "/mcp", "headers": []}, receive, send)
            assert sent == [{"type": "websocket.close", "code": 1008}]

    run(scenario)


# -- credentials -------------------------------------------------------------------------


def test_no_wrong_or_malformed_credential_gets_the_same_401_naming_nothing() -> None:
    async def scenario() -> None:
        async with served(("web", "notes"), credentials=two_credentials()) as s:
            answers = [
                await s.http.post(path, json=initialize(), headers={**MCP_HEADERS, **extra})
                for path in ("/mcp", "/mcp/s/notes", "/mcp/s/nosuch")
                for extra in (
                    {},
                    {"authorization": "Bearer wrong-token-0123456789abc"},
                    {"authorization": f"Basic {TOKEN_A}"},
                    {"authorization": TOKEN_A},
                )
            ]
            for answer in answers:
                assert answer.status_code == 401
                assert answer.content == UNAUTHORIZED
                assert answer.headers["www-authenticate"] == "Bearer"
            assert s.app.open_sessions() == 0
            assert s.calls == {"web": [], "notes": []}

    run(scenario)


def test_the_right_token_works_and_reaches_only_its_sessions() -> None:
    async def scenario() -> None:
        async with served(("web", "notes"), credentials=two_credentials()) as s:
            sid = await s.open("/mcp/s/web", TOKEN_A)
            answer = await s.call(sid, "/mcp/s/web", TOKEN_A)
            assert answer.status_code == 200
            assert '\\"session\\": \\"web\\"' in answer.text
            # /mcp is the first session: ci reaches it too
            await s.open("/mcp", TOKEN_A)
            # bot does not reach web: the same bytes as a session not served at all
            unreached = await s.http.post(
                "/mcp/s/web", json=initialize(), headers={**MCP_HEADERS, **_auth(TOKEN_B)}
            )
            default = await s.http.post(
                "/mcp", json=initialize(), headers={**MCP_HEADERS, **_auth(TOKEN_B)}
            )
            unknown = await s.http.post(
                "/mcp/s/nosuch", json=initialize(), headers={**MCP_HEADERS, **_auth(TOKEN_B)}
            )
            for answer in (unreached, default, unknown):
                assert (answer.status_code, answer.content) == (404, NOT_FOUND)
                assert dict(answer.headers) == dict(unknown.headers)
            assert [c for c in s.calls["web"]] == [("lambo_stats", {"agent_id": "agent-a"})]

    run(scenario)


def test_an_mcp_session_opened_by_one_credential_is_refused_to_another() -> None:
    both = (
        Credential("ci", digest_of(TOKEN_A), None),
        Credential("bot", digest_of(TOKEN_B), None),
    )

    async def scenario() -> None:
        async with served(("web", "notes"), credentials=both) as s:
            sid = await s.open("/mcp/s/web", TOKEN_A)
            stolen = await s.call(sid, "/mcp/s/web", TOKEN_B)
            made_up = await s.call("0" * 32, "/mcp/s/web", TOKEN_B)
            # the SDK answers as if the session did not exist
            assert stolen.status_code == made_up.status_code == 404
            assert stolen.content == made_up.content
            assert json.loads(stolen.content)["error"]["message"] == "Session not found"
            # nor does an MCP session of one lambo session mean anything at another
            elsewhere = await s.call(sid, "/mcp/s/notes", TOKEN_A)
            assert (elsewhere.status_code, elsewhere.content) == (404, made_up.content)
            assert (await s.call(sid, "/mcp/s/web", TOKEN_A)).status_code == 200
            assert len(s.calls["web"]) == 1 and s.calls["notes"] == []

    run(scenario)


def test_without_credentials_an_unknown_session_is_named_with_what_is_served() -> None:
    async def scenario() -> None:
        async with served(("web", "notes")) as s:
            answer = await s.http.post("/mcp/s/nosuch", json=initialize(), headers=MCP_HEADERS)
            assert answer.status_code == 404
            assert answer.json()["error"]["message"] == (
                "no such session is served here; this serve holds /mcp/s/web, /mcp/s/notes"
            )
            # a loopback serve without credentials lets a request with any header in
            sid = await s.open("/mcp/s/notes", token="anything-at-all-here")
            assert (await s.call(sid, "/mcp/s/notes")).status_code == 200

    run(scenario)


# -- rates -------------------------------------------------------------------------------


def test_past_the_credential_rate_429_with_retry_after() -> None:
    async def scenario() -> None:
        async with served(
            ("web", "notes"), credentials=two_credentials(), per_credential_rps=1.0
        ) as s:
            sid = await s.open("/mcp/s/web", TOKEN_A)  # two requests: the burst
            refused = await s.call(sid, "/mcp/s/web", TOKEN_A)
            assert refused.status_code == 429
            assert refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["message"] == "too many requests from this credential"
            # bot has its own rate
            await s.open("/mcp/s/notes", TOKEN_B)
            s.clock.now += 1.0
            assert (await s.call(sid, "/mcp/s/web", TOKEN_A)).status_code == 200
            # a refused request reached no session
            assert len(s.calls["web"]) == 1

    run(scenario)


def test_past_the_session_rate_429_whoever_asks() -> None:
    both = (
        Credential("ci", digest_of(TOKEN_A), None),
        Credential("bot", digest_of(TOKEN_B), None),
    )

    async def scenario() -> None:
        async with served(("web", "notes"), credentials=both, per_session_rps=2.0) as s:
            a = await s.open("/mcp/s/web", TOKEN_A)
            b = await s.open("/mcp/s/web", TOKEN_B)  # web's burst of 4 is spent
            refused = await s.call(a, "/mcp/s/web", TOKEN_A)
            assert refused.status_code == 429
            assert refused.json()["error"]["message"] == "too many requests to this session"
            assert refused.headers["retry-after"] == "1"
            assert (await s.call(b, "/mcp/s/web", TOKEN_B)).status_code == 429
            # notes has its own rate
            assert (
                await s.http.post(
                    "/mcp/s/notes", json=initialize(), headers={**MCP_HEADERS, **_auth(TOKEN_A)}
                )
            ).status_code == 200
            s.clock.now += 0.5
            assert (await s.call(a, "/mcp/s/web", TOKEN_A)).status_code == 200

    run(scenario)


def test_unauthenticated_callers_of_a_loopback_serve_meet_only_the_session_rate() -> None:
    async def scenario() -> None:
        # no credential configured: per_credential_rps has nothing to count against
        async with served(per_credential_rps=0.1) as s:
            for _ in range(3):
                await s.open("/mcp")
        async with served(per_session_rps=1.0) as s:
            await s.open("/mcp")  # initialize and its notification: the burst of two
            refused = await s.http.post("/mcp", json=initialize(), headers=MCP_HEADERS)
            assert refused.status_code == 429
            assert refused.json()["error"]["message"] == "too many requests to this session"
            assert int(refused.headers["retry-after"]) >= 1

    run(scenario)


# -- the live-session ceiling ----------------------------------------------------------


def test_past_the_ceiling_503_and_a_delete_frees_a_place() -> None:
    async def scenario() -> None:
        async with served(("web", "notes"), max_live_sessions=2) as s:
            first = await s.open("/mcp/s/web")
            await s.open("/mcp/s/notes")  # the ceiling is over every session together
            refused = await s.http.post("/mcp/s/web", json=initialize(), headers=MCP_HEADERS)
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["message"] == "too many open MCP sessions; retry later"
            # the sessions already open go on
            assert (await s.call(first, "/mcp/s/web")).status_code == 200
            gone = await s.http.delete(
                "/mcp/s/web", headers={**MCP_HEADERS, "mcp-session-id": first}
            )
            assert gone.status_code == 200
            assert s.app.open_sessions() == 1
            await s.open("/mcp/s/web")
            assert s.app.open_sessions() == 2

    run(scenario)


def test_at_the_ceiling_the_session_idle_longest_makes_room() -> None:
    """A one-shot client never sends DELETE: past evict_idle_after_s of idleness its session
    gives its place to a new one, and its id then answers 404."""

    async def scenario() -> None:
        async with served(("web", "notes"), max_live_sessions=2, evict_idle_after_s=0.0) as s:
            older = await s.open("/mcp/s/web")
            newer = await s.open("/mcp/s/notes")
            assert (await s.call(newer, "/mcp/s/notes")).status_code == 200  # newer is fresher
            third = await s.open("/mcp/s/web")  # no 503: the idlest one was closed
            assert s.app.open_sessions() == 2
            assert (await s.call(older, "/mcp/s/web")).status_code == 404
            assert (await s.call(newer, "/mcp/s/notes")).status_code == 200
            assert (await s.call(third, "/mcp/s/web")).status_code == 200

    run(scenario)


def test_a_session_in_use_or_idle_too_briefly_is_never_closed_for_room() -> None:
    async def scenario() -> None:
        # idle for less than evict_idle_after_s: the ceiling refuses as before
        async with served(max_live_sessions=1, evict_idle_after_s=3600.0) as s:
            await s.open("/mcp")
            refused = await s.http.post("/mcp", json=initialize(), headers=MCP_HEADERS)
            assert refused.status_code == 503
        # an open GET stream holds its session in use, however long ago it began
        async with served(max_live_sessions=1, evict_idle_after_s=0.0) as s:
            sid = await s.open("/mcp")
            (transport,) = live_transports(s.app.endpoints["web"].manager)
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(asgi, s.app, "GET", "/mcp", [b""], sid=sid))
                await wait_until(lambda: idle_for(transport, 1800.0) is None)
                refused = await s.http.post("/mcp", json=initialize(), headers=MCP_HEADERS)
                assert refused.status_code == 503
                assert s.app.open_sessions() == 1
                tg.cancel_scope.cancel()

    run(scenario)


def test_a_session_being_opened_holds_its_place() -> None:
    """Two initializes at once for the last place: the one still being read holds it."""

    async def scenario() -> None:
        async with served(max_live_sessions=1) as s:
            body = json.dumps(initialize()).encode()
            release = anyio.Event()
            answers: list[int] = []

            async def slow() -> None:
                answers.append((await asgi(s.app, "POST", "/mcp", [body], gate=release))[0])

            async with anyio.create_task_group() as tg:
                tg.start_soon(slow)
                await wait_until(lambda: s.app.live.opening == 1)
                second = await s.http.post("/mcp", json=initialize(), headers=MCP_HEADERS)
                assert second.status_code == 503
                release.set()
            assert answers == [200]
            assert s.app.live.opening == 0 and s.app.open_sessions() == 1

    run(scenario)


def test_a_request_that_opens_no_session_is_not_held_to_the_ceiling() -> None:
    async def scenario() -> None:
        async with served(max_live_sessions=1) as s:
            sid = await s.open("/mcp")
            # a request of an open session, and a GET, open nothing: no 503
            assert (await s.call(sid)).status_code == 200
            bogus = await s.call("f" * 32)
            assert bogus.status_code == 404  # the SDK's: an unknown MCP session id
            assert s.app.live.opening == 0

    run(scenario)


# -- the body limit, Host and Origin ---------------------------------------------------


def test_a_body_over_the_limit_is_413_before_it_is_read() -> None:
    async def scenario() -> None:
        async with served(max_request_bytes=4096) as s:
            sid = await s.open("/mcp")
            big = b'{"jsonrpc": "2.0", "id": 3, "method": "ping", "pad": "' + b"x" * 8000 + b'"}'
            # declared by Content-Length: refused without reading any of it
            status, _, text, reads = await asgi(
                s.app, "POST", "/mcp", [big], content_length=len(big), sid=sid
            )
            assert (status, text, reads) == (413, b"Request body too large", 0)
            # chunked, no Content-Length: refused at the chunk that crosses the limit
            chunks = [big[i : i + 1024] for i in range(0, len(big), 1024)]
            status, _, text, reads = await asgi(s.app, "POST", "/mcp", chunks, sid=sid)
            assert (status, text) == (413, b"Request body too large")
            assert reads == 5 < len(chunks)  # 5 KiB read of an 8 KiB body, never the rest
            # the session goes on
            assert (await s.call(sid)).status_code == 200
            just_under = {**call("lambo_stats", {"agent_id": "a" * 100}), "pad": "y" * 3800}
            fits = await s.http.post(
                "/mcp", json=just_under, headers={**MCP_HEADERS, "mcp-session-id": sid}
            )
            assert len(fits.request.content) <= 4096
            assert fits.status_code == 200

    run(scenario)


def test_a_host_not_the_serves_is_421_and_a_bad_origin_403() -> None:
    async def scenario() -> None:
        async with served(allowed_origins=("https://app.example",)) as s:
            for host in ("evil.example", f"evil.example:{PORT}", "127.0.0.1:9999"):
                answer = await s.http.post(
                    "/mcp", json=initialize(), headers={**MCP_HEADERS, "host": host}
                )
                assert (answer.status_code, answer.text) == (421, "Invalid Host header")
            for origin in ("http://evil.example", "https://app.example.evil", "null"):
                answer = await s.http.post(
                    "/mcp", json=initialize(), headers={**MCP_HEADERS, "origin": origin}
                )
                assert (answer.status_code, answer.text) == (403, "Invalid Origin header")
            assert s.app.open_sessions() == 0 and s.app.live.opening == 0
            for host in (f"localhost:{PORT}", f"127.0.0.1:{PORT}", f"[::1]:{PORT}"):
                ok = await s.http.post(
                    "/mcp", json=initialize(), headers={**MCP_HEADERS, "host": host}
                )
                assert ok.status_code == 200, host
            for origin in ("https://app.example", "http://localhost:3000"):
                ok = await s.http.post(
                    "/mcp", json=initialize(), headers={**MCP_HEADERS, "origin": origin}
                )
                assert ok.status_code == 200, origin

    run(scenario)


def test_a_foreign_request_spends_no_rate_and_pushes_no_session_out() -> None:
    """A page the user opens may POST to the loopback serve: refused by Host, Origin or
    Content-Type before any limit, it neither throttles nor evicts the local clients."""

    async def scenario() -> None:
        async with served(per_session_rps=1.0) as s:  # bursts of two requests
            for _ in range(4):
                answer = await s.http.post(
                    "/mcp",
                    json=initialize(),
                    headers={**MCP_HEADERS, "origin": "http://evil.example"},
                )
                assert answer.status_code == 403
            await s.open("/mcp")  # initialize and its notification: the whole burst
        async with served(max_live_sessions=1, evict_idle_after_s=0.0) as s:
            sid = await s.open("/mcp")
            junk = await s.http.post(
                "/mcp",
                content=b"x",
                headers={"origin": "http://evil.example", "content-type": "text/plain"},
            )
            assert junk.status_code in (400, 403)
            assert (await s.call(sid)).status_code == 200  # still open

    run(scenario)


# -- the request log ---------------------------------------------------------------------


def test_one_line_per_request_naming_no_argument_and_no_token(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        async with served(("web", "notes"), credentials=two_credentials()) as s:
            sid = await s.open("/mcp/s/web", TOKEN_A)
            s.clock.per_call = 0.0123
            await s.http.post(
                "/mcp/s/web",
                json=call("lambo_stats", {"agent_id": "secret-argument-agent"}),
                headers={**MCP_HEADERS, **_auth(TOKEN_A), "mcp-session-id": sid},
            )
            await s.http.post("/mcp/s/web", json=initialize(), headers=MCP_HEADERS)
            await s.http.post(
                "/mcp/s/web", json=initialize(), headers={**MCP_HEADERS, **_auth(TOKEN_B)}
            )
            await s.http.get("/healthz")

    with caplog.at_level(logging.INFO, logger="lambo_core.mcp.http.requests"):
        run(scenario)
    lines = [r.getMessage() for r in caplog.records if r.name == "lambo_core.mcp.http.requests"]
    assert lines == [
        "http method=POST session=web status=200 ms=0.0 credential=ci",
        "http method=POST session=web status=202 ms=0.0 credential=ci",
        "http method=POST session=web status=200 ms=12.3 credential=ci",  # the tool call
        "http method=POST session=- status=401 ms=0.0 credential=-",
        # a credential that does not reach the session: the session is not named
        "http method=POST session=- status=404 ms=0.0 credential=bot",
        "http method=GET session=- status=200 ms=0.0 credential=-",
    ]
    everything = "\n".join(r.getMessage() for r in caplog.records)
    for secret in (TOKEN_A, TOKEN_B, "secret-argument-agent"):
        assert secret not in everything


# -- helpers -----------------------------------------------------------------------------


async def wait_until(condition: Any) -> None:
    with anyio.fail_after(10):
        while not condition():
            await anyio.sleep(0)


async def asgi(
    app: HttpApp,
    method: str,
    path: str,
    chunks: list[bytes],
    *,
    content_length: int | None = None,
    sid: str | None = None,
    gate: anyio.Event | None = None,
) -> tuple[int, list[tuple[bytes, bytes]], bytes, int]:
    """One raw ASGI request: its body in ``chunks`` (``gate``: the first chunk waits for
    it); the status, headers, body, and how many chunks the app read."""
    headers = [(k.encode(), v.encode()) for k, v in MCP_HEADERS.items()]
    headers.append((b"host", f"127.0.0.1:{PORT}".encode()))
    if content_length is not None:
        headers.append((b"content-length", str(content_length).encode()))
    else:
        headers.append((b"transfer-encoding", b"chunked"))
    if sid is not None:
        headers.append((b"mcp-session-id", sid.encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 5555),
        "server": ("127.0.0.1", PORT),
    }
    reads = 0
    answer: dict[str, Any] = {"status": 0, "headers": [], "body": b""}
    finished = anyio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal reads
        if gate is not None and reads == 0:
            await gate.wait()
        if reads < len(chunks):
            reads += 1
            return {
                "type": "http.request",
                "body": chunks[reads - 1],
                "more_body": reads < len(chunks),
            }
        await finished.wait()  # the client stays connected until the answer is complete
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
            answer["headers"] = message.get("headers", [])
        elif message["type"] == "http.response.body":
            answer["body"] += message.get("body", b"")
            if not message.get("more_body", False):
                finished.set()

    await app(scope, receive, send)
    finished.set()
    return answer["status"], answer["headers"], answer["body"], reads
