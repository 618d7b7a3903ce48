"""Every refusal of `lambo serve --transport http`, over real HTTP on 127.0.0.1 to real serve
processes: a bind off loopback without a credential, 401, the generic 404 of a session a
credential does not reach, an MCP session used by another credential, 429, 503, 413 (and the
serve going on), Origin and Host, /healthz, and the request log.

Raw httpx2 where a client library would hide the status; one serve per scenario."""

from __future__ import annotations

import hashlib
import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters

from tests.e2e.conftest import body, derive, lambo_argv, serve_env
from tests.e2e.http_serve import HttpServe, http_client
from tests.http_requests import MCP_HEADERS, initialize

TOKEN = "e2e-auth-token-0123456789abcdef"
TOKEN_A = "alpha-credential-0123456789abcd"
TOKEN_B = "bravo-credential-0123456789abcd"
TOKEN_C = "every-credential-0123456789abcd"
FIVE_MIB = 5 * 1024 * 1024
REQUEST_LINE = re.compile(
    r"http method=(?P<method>\S+) session=(?P<session>\S+) status=(?P<status>\d+) "
    r"ms=(?P<ms>\d+\.\d) credential=(?P<credential>\S+)$"
)


def configure(home: Path, text: str) -> None:
    """Add ``text`` to the serve's lambo.toml (the fixture wrote its [embedder])."""
    config = home / "config" / "lambo.toml"
    config.write_text(config.read_text() + "\n" + text)


def auth(token: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"} if token else {}


def open_session(http: httpx2.Client, url: str, token: str | None = None) -> str:
    opened = http.post(url, json=initialize(), headers={**MCP_HEADERS, **auth(token)})
    assert opened.status_code == 200, opened.text
    sid = opened.headers["mcp-session-id"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    headers = {**MCP_HEADERS, **auth(token), "mcp-session-id": sid}
    assert http.post(url, json=note, headers=headers).status_code == 202
    return sid


def ping(http: httpx2.Client, url: str, sid: str, token: str | None = None) -> httpx2.Response:
    headers = {**MCP_HEADERS, **auth(token), "mcp-session-id": sid}
    return http.post(url, json={"jsonrpc": "2.0", "id": 9, "method": "ping"}, headers=headers)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def request_lines(log: str) -> list[dict[str, str]]:
    found = (REQUEST_LINE.search(line) for line in log.splitlines())
    return [m.groupdict() for m in found if m]


# -- fails closed ------------------------------------------------------------------------


def test_binding_off_loopback_without_a_credential_refuses_to_start(
    served_home: Path, tmp_path: Path
) -> None:
    store = tmp_path / "m.db"
    port = free_port()
    serve = HttpServe(
        served_home, store, ("web",), extra=("--bind", "0.0.0.0", "--port", str(port))
    )
    with serve:
        # 2: a configuration refusal, nothing ran (the CLI's exit codes: 1 is a run-time failure)
        assert serve.wait_exit() == 2
    assert serve.base is None
    said = [line for line in serve.lines if line.strip()]
    assert len(said) == 1, said
    assert said[0].startswith("lambo: configuration error: serve.bind 0.0.0.0 is not a loopback")
    assert "--auth-token or LAMBO_AUTH_TOKEN" in said[0]
    assert "[[serve.credential]]" in said[0] and "bind 127.0.0.1" in said[0]
    assert "Traceback" not in serve.log
    with socket.socket() as probe:  # nothing listens
        assert probe.connect_ex(("127.0.0.1", port)) != 0
    # no lease was taken (the lease lives in the store, never opened) ...
    assert not store.exists()
    # ... and a stdio serve of the session holds it at once
    stdio = StdioServerParameters(
        command=lambo_argv()[0],
        args=[*lambo_argv()[1:], "serve", "--session", "web", "--store", str(store)],
        env=serve_env(served_home),
        cwd=str(served_home),
    )

    async def scenario() -> dict[str, Any]:
        async with Client(stdio) as client:
            return body(await client.call_tool("lambo_stats", {"agent_id": "agent-a"}))

    stats = anyio.run(scenario)
    assert stats["holder_pid"] not in (None, serve.proc.pid)
    assert stats["concept_count"] == 0


# -- one bearer token: 401, the token working, /healthz, 413, Origin, Host, the log --------


@pytest.fixture
def token_serve(served_home: Path, tmp_path: Path) -> Iterator[HttpServe]:
    configure(served_home, '[serve]\nallowed_origins = ["https://app.example"]\n')
    with HttpServe(
        served_home, tmp_path / "m.db", ("web",), env={"LAMBO_AUTH_TOKEN": TOKEN}
    ) as serve:
        serve.wait_listening()
        yield serve


def test_a_bearer_token_is_required_and_the_401_names_nothing(token_serve: HttpServe) -> None:
    url = token_serve.url("web")
    with httpx2.Client(timeout=30) as http:
        answers = [
            http.post(target, json=initialize(), headers={**MCP_HEADERS, **extra})
            for target in (url, token_serve.url(), token_serve.url("nosuch"))
            for extra in (
                {},
                auth("wrong-token-0123456789abcdef"),
                auth(TOKEN + "x"),
                {"authorization": f"Basic {TOKEN}"},
            )
        ]
        for answer in answers:
            assert answer.status_code == 401
            assert answer.headers["www-authenticate"] == "Bearer"
            assert answer.content == answers[0].content
        assert answers[0].json() == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32600, "message": "unauthorized"},
        }
        # /healthz needs none, and says nothing of content
        health = http.get(f"{token_serve.base}/healthz")
        assert health.status_code == 200
        assert health.json() == {
            "status": "ok",
            "sessions": 1,
            "mcp_sessions": 0,
            "max_mcp_sessions": 32,
        }

    async def scenario() -> None:
        async with http_client(url, token=TOKEN) as client:
            receipt = await derive(client, "the release train leaves on thursdays")
            waited = body(
                await client.call_tool(
                    "lambo_stats", {"agent_id": "agent-a", "receipt": receipt, "wait_ms": 30_000}
                )
            )
            assert waited["receipt"]["state"] == "applied"
            recalled = body(
                await client.call_tool(
                    "lambo_recall", {"agent_id": "agent-a", "query": "release train"}
                )
            )
            assert recalled["hits"][0]["content"] == "the release train leaves on thursdays"

    anyio.run(scenario)
    assert token_serve.stop() == 0
    lines = request_lines(token_serve.log)
    assert {"method": "POST", "session": "-", "status": "401", "credential": "-"} in [
        {k: v for k, v in line.items() if k != "ms"} for line in lines
    ]
    worked = [line for line in lines if line["credential"] == "auth-token"]
    assert worked and all(line["session"] == "web" for line in worked)
    assert {line["status"] for line in worked} <= {"200", "202"}
    assert any(line["method"] == "GET" and line["session"] == "-" for line in lines)  # healthz
    # never a token, never an argument
    for secret in (TOKEN, "release train", "thursdays", "agent-a"):
        assert secret not in token_serve.log


def test_a_5_mib_body_is_413_and_the_serve_goes_on(token_serve: HttpServe) -> None:
    url = token_serve.url("web")
    port = int(url.split(":")[2].split("/")[0])
    big = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping", "pad": "x" * FIVE_MIB})
    with httpx2.Client(timeout=60) as http:
        sid = open_session(http, url, TOKEN)
    headers = {**MCP_HEADERS, **auth(TOKEN), "mcp-session-id": sid}
    ping_body = json.dumps({"jsonrpc": "2.0", "id": 9, "method": "ping"}).encode()
    # one raw connection: each refusal, then a normal call on that same connection
    with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
        status, answer = exchange(conn, port, "/mcp/s/web", headers, big.encode())
        assert (status, answer) == (413, b"Request body too large")
        status, answer = exchange(conn, port, "/mcp/s/web", headers, ping_body)
        assert status == 200 and b'"id":9' in answer
        status, answer = exchange(conn, port, "/mcp/s/web", headers, big.encode(), chunked=True)
        assert (status, answer) == (413, b"Request body too large")
        status, answer = exchange(conn, port, "/mcp/s/web", headers, ping_body)
        assert status == 200 and b'"id":9' in answer
    with httpx2.Client(timeout=60) as fresh:  # and on a new connection
        assert ping(fresh, url, sid, TOKEN).status_code == 200
        assert open_session(fresh, url, TOKEN)
        declared = fresh.post(url, content=big.encode(), headers=headers)  # as a client sends it
        assert (declared.status_code, declared.text) == (413, "Request body too large")
        assert ping(fresh, url, sid, TOKEN).status_code == 200
    lines = request_lines(token_serve.log)
    assert [line["status"] for line in lines].count("413") == 3


def exchange(
    conn: socket.socket,
    port: int,
    path: str,
    headers: dict[str, str],
    payload: bytes,
    *,
    chunked: bool = False,
) -> tuple[int, bytes]:
    """One HTTP/1.1 request on an open connection (kept alive); the status and the body."""
    lines = [f"POST {path} HTTP/1.1", f"host: 127.0.0.1:{port}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    if chunked:
        lines.append("transfer-encoding: chunked")
        step = 64 * 1024
        data = b"".join(
            b"%x\r\n%s\r\n" % (len(payload[i : i + step]), payload[i : i + step])
            for i in range(0, len(payload), step)
        )
        data += b"0\r\n\r\n"
    else:
        lines.append(f"content-length: {len(payload)}")
        data = payload
    conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + data)
    reader = conn.makefile("rb")
    status = int(reader.readline().split()[1])
    length, chunked_answer = None, False
    while (line := reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        if name.lower() == "content-length":
            length = int(value)
        if name.lower() == "transfer-encoding" and "chunked" in value:
            chunked_answer = True
    if length is not None:
        return status, reader.read(length)
    assert chunked_answer, "a kept-alive answer has a length or chunks"
    answer = b""
    while size := int(reader.readline().strip(), 16):
        answer += reader.read(size)
        reader.readline()
    reader.readline()
    return status, answer


def test_a_bad_origin_is_403_a_foreign_host_421_and_an_allowed_origin_passes(
    token_serve: HttpServe,
) -> None:
    url = token_serve.url("web")
    port = url.split(":")[2].split("/")[0]
    headers = {**MCP_HEADERS, **auth(TOKEN)}
    with httpx2.Client(timeout=30) as http:
        evil = http.post(
            url, json=initialize(), headers={**headers, "origin": "http://evil.example"}
        )
        assert (evil.status_code, evil.text) == (403, "Invalid Origin header")
        for host in ("evil.example", f"evil.example:{port}", "127.0.0.1:1"):
            foreign = http.post(url, json=initialize(), headers={**headers, "host": host})
            assert (foreign.status_code, foreign.text) == (421, "Invalid Host header")
        allowed = http.post(
            url, json=initialize(), headers={**headers, "origin": "https://app.example"}
        )
        assert allowed.status_code == 200
        local = http.post(
            url, json=initialize(), headers={**headers, "origin": "http://localhost:5173"}
        )
        assert local.status_code == 200
        assert (
            http.post(
                url, json=initialize(), headers={**headers, "host": f"localhost:{port}"}
            ).status_code
            == 200
        )


# -- several credentials: the generic 404, a session bound to its credential, 503 ----------


def test_credentials_reach_only_their_sessions_and_the_ceiling_holds(
    served_home: Path, tmp_path: Path
) -> None:
    token_file = tmp_path / "bravo.token"
    token_file.write_text(TOKEN_B + "\n")
    token_file.chmod(0o600)
    configure(
        served_home,
        "[serve]\nmax_live_sessions = 2\n"
        f'[[serve.credential]]\nname = "alpha-ci"\nsessions = ["alpha"]\n'
        f'token_sha256 = "{hashlib.sha256(TOKEN_A.encode()).hexdigest()}"\n'
        f'[[serve.credential]]\nname = "bravo-bot"\nsessions = ["beta"]\n'
        f'token_file = "{token_file}"\n'
        '[[serve.credential]]\nname = "ops"\nsessions = ["*"]\ntoken_env = "OPS_TOKEN"\n',
    )
    with (
        HttpServe(
            served_home, tmp_path / "m.db", ("alpha", "beta"), env={"OPS_TOKEN": TOKEN_C}
        ) as serve,
        httpx2.Client(timeout=30) as http,
    ):
        alpha, beta = serve.url("alpha"), serve.url("beta")
        # bravo's token on alpha: byte for byte the answer for a session not served
        unreached = http.post(alpha, json=initialize(), headers={**MCP_HEADERS, **auth(TOKEN_B)})
        default = http.post(
            serve.url(), json=initialize(), headers={**MCP_HEADERS, **auth(TOKEN_B)}
        )
        unknown = http.post(
            serve.url("gamma"), json=initialize(), headers={**MCP_HEADERS, **auth(TOKEN_B)}
        )
        for answer in (unreached, default, unknown):
            assert answer.status_code == 404
            assert answer.content == unknown.content
            assert answer.headers.get("content-type") == unknown.headers.get("content-type")
        assert "alpha" not in unknown.text and "beta" not in unknown.text
        # an MCP session alpha-ci opened, used by ops (who reaches alpha): the SDK's 404
        sid = open_session(http, alpha, TOKEN_A)
        stolen = ping(http, alpha, sid, TOKEN_C)
        made_up = ping(http, alpha, "0" * 32, TOKEN_C)
        assert stolen.status_code == made_up.status_code == 404
        assert stolen.content == made_up.content
        assert ping(http, alpha, sid, TOKEN_A).status_code == 200
        # the ceiling: two MCP sessions open over both sessions, the third refused
        second = open_session(http, beta, TOKEN_B)
        refused = http.post(beta, json=initialize(), headers={**MCP_HEADERS, **auth(TOKEN_C)})
        assert refused.status_code == 503
        assert int(refused.headers["retry-after"]) >= 1
        assert ping(http, beta, second, TOKEN_B).status_code == 200  # the open ones go on
        gone = http.delete(beta, headers={**MCP_HEADERS, **auth(TOKEN_B), "mcp-session-id": second})
        assert gone.status_code == 200
        assert open_session(http, beta, TOKEN_C)
        assert serve.stop() == 0
    lines = request_lines(serve.log)
    assert {"bravo-bot", "alpha-ci", "ops"} <= {line["credential"] for line in lines}
    assert "503" in [line["status"] for line in lines]
    for secret in (TOKEN_A, TOKEN_B, TOKEN_C):
        assert secret not in serve.log


# -- rates -----------------------------------------------------------------------------------


def test_past_either_rate_429_with_a_whole_retry_after(served_home: Path, tmp_path: Path) -> None:
    configure(
        served_home,
        "[serve]\nper_credential_rps = 1\nper_session_rps = 1\n"
        + "".join(
            f'[[serve.credential]]\nname = "{n}"\nsessions = ["*"]\ntoken_env = "{n.upper()}"\n'
            for n in ("one", "two", "three")
        ),
    )
    tokens = {"ONE": TOKEN_A, "TWO": TOKEN_B, "THREE": TOKEN_C}
    with (
        HttpServe(served_home, tmp_path / "m.db", ("web", "notes"), env=tokens) as serve,
        httpx2.Client(timeout=30) as http,
    ):
        web, notes = serve.url("web"), serve.url("notes")

        def burst(url: str, token: str) -> httpx2.Response:
            return ping(http, url, "f" * 32, token)  # no such MCP session: admitted, then 404

        # a burst of three from one credential: its rate of 1/s bursts to two
        first = [burst(notes, TOKEN_A) for _ in range(3)]
        assert [r.status_code for r in first] == [404, 404, 429]
        assert first[2].json()["error"]["message"] == "too many requests from this credential"
        # two spends web's burst; three, with its own rate whole, is refused by web's
        assert [burst(web, TOKEN_B).status_code for _ in range(2)] == [404, 404]
        by_session = burst(web, TOKEN_C)
        assert by_session.status_code == 429
        assert by_session.json()["error"]["message"] == "too many requests to this session"
        for refused in (first[2], by_session):
            assert re.fullmatch(r"[1-9][0-9]*", refused.headers["retry-after"])
        assert serve.stop() == 0
    lines = request_lines(serve.log)
    assert [line["status"] for line in lines].count("429") == 2
    assert {"one", "two", "three"} <= {line["credential"] for line in lines}
