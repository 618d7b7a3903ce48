"""Clients nobody here wrote, over real HTTP on 127.0.0.1: MCP Inspector's CLI and mcporter
(npm, pinned in .ci/run, installed into .npm-tools/) against `lambo serve --transport http`.

Each lists the tools, derives, waits on the receipt with lambo_stats and recalls, and must see
what the SDK's own client sees over stdio: the same tools, receipt states and texts (ids and
scores aside). Then with a bearer token, and with a wrong or missing one: the client fails
and the serve logs the 401. Outside CI a machine without the tools skips these tests; under
CI a missing one fails. Every client run gets a HOME of its own under tmp_path, so neither
reads nor writes the real one (mcporter would import editors' configs from it and keep an
OAuth vault there; the Inspector keeps ~/.mcp-inspector/).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.types import TextContent

from lambo_core.embed.importer import import_model
from lambo_core.service import SERVED_TOOLS
from tests.e2e.conftest import ROOT, lambo_argv, serve_env
from tests.e2e.http_serve import HttpServe
from tests.embed_fixtures import minilm_source_dir

NPM_BIN = ROOT / ".npm-tools" / "node_modules" / ".bin"
CLIENT_BOUND_S = 120  # one client run past this is a failure, not a slow machine
WAIT_MS = 30_000
SESSION = "web"
AGENT = "third-party"
CONTENT = "the release notes are drafted in docs/releases.md"
QUERY = "where are the release notes drafted"
TOKEN = "e2e-right-token-0123456789abcdef"
WRONG_TOKEN = "e2e-wrong-token-0123456789abcdef"
RECEIPT = re.compile(r"lwr1\.[0-9a-f]+\.[0-9a-f]+\.\d+")
REQUEST_LINE = re.compile(r"http method=(\w+) session=(\S+) status=(\d+) ms=\S+ credential=(\S+)")


def npm_bin(name: str) -> Path:
    tool = NPM_BIN / name
    if not tool.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed at {tool} (see .ci/run)")
        pytest.skip(f"{name} is not installed (npm install --prefix .npm-tools ..., see .ci/run)")
    return tool


def run_client(argv: list[str], where: Path, env: dict[str, str] | None = None) -> Answered:
    """One client run, its HOME and config paths under ``where``."""
    home = where / "client-home"
    home.mkdir(exist_ok=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MCP_", "MCPORTER_"))}
    base.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_CACHE_HOME=str(home / ".cache"),
        MCP_CATALOG_PATH=str(home / "inspector-catalog.json"),
        MCP_CLIENT_CONFIG_PATH=str(home / "inspector-client.json"),
    )
    out = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env={**base, **(env or {})},
        cwd=where,
        timeout=CLIENT_BOUND_S,
    )
    return Answered(out.returncode, out.stdout, out.stderr)


@dataclass(frozen=True)
class Answered:
    code: int
    stdout: str
    stderr: str

    def json(self) -> dict[str, Any]:
        """The JSON object the client printed (stdout, else its error envelope on stderr)."""
        text = self.stdout.strip() or self.stderr.strip().splitlines()[-1]
        return dict(json.loads(text))

    def __str__(self) -> str:
        return f"exit {self.code}\n{self.stdout}\n{self.stderr}"


@dataclass(frozen=True)
class Reply:
    """A tool's answer: its structured content, and its text when the client shows it."""

    structured: dict[str, Any]
    text: str | None


class ToolClient(Protocol):
    def tools(self) -> list[dict[str, Any]]: ...

    def call(self, tool: str, arguments: dict[str, Any]) -> Reply: ...


class Inspector:
    """MCP Inspector's CLI against one URL (``--transport http``), read from --format json.
    ``--stored-auth-only``: on a 401 fail with auth_required instead of starting OAuth."""

    def __init__(self, url: str, where: Path, *, era: str = "legacy", token: str | None = None):
        self.where = where
        self.argv = [str(npm_bin("mcp-inspector")), "--cli", url, "--transport", "http"]
        self.argv += ["--protocol-era", era, "--format", "json", "--stored-auth-only"]
        if token is not None:
            self.argv += ["--header", f"Authorization: Bearer {token}"]

    def run(self, *args: str) -> Answered:
        return run_client([*self.argv, *args], self.where)

    def result(self, *args: str) -> dict[str, Any]:
        out = self.run(*args)
        assert out.code == 0, str(out)
        return dict(out.json()["result"])

    def tools(self) -> list[dict[str, Any]]:
        return list(self.result("--method", "tools/list")["tools"])

    def call(self, tool: str, arguments: dict[str, Any]) -> Reply:
        args = ["--method", "tools/call", "--tool-name", tool]
        result = self.result(*args, "--tool-args-json", json.dumps(arguments))
        assert result["isError"] is False, result
        return Reply(result["structuredContent"], result["content"][0]["text"])


class Mcporter:
    """mcporter against one URL. Without a token the URL is named ad hoc (``--http-url``);
    mcporter 0.9.0 has no header flag for that, so with one the URL is a server of a config
    file whose header reads the token from the environment (never written in the file)."""

    def __init__(self, url: str, where: Path, *, token: str | None = None) -> None:
        self.where = where
        server: dict[str, Any] = {"baseUrl": url}
        self.env: dict[str, str] = {}
        if token is not None:
            server["headers"] = {"Authorization": "Bearer ${LAMBO_E2E_TOKEN}"}
            self.env["LAMBO_E2E_TOKEN"] = token
            self.target = ["lambo"]
        else:
            self.target = ["--http-url", url, "--allow-http"]
        # imports: [] so no editor's config (Cursor, Claude, Codex...) joins the run
        config = where / "mcporter.json"
        config.write_text(json.dumps({"mcpServers": {"lambo": server}, "imports": []}))
        self.argv = [str(npm_bin("mcporter")), "--config", str(config)]

    def run(self, *args: str) -> Answered:
        return run_client([*self.argv, *args], self.where, self.env)

    def selector(self, tool: str) -> list[str]:
        return [f"lambo.{tool}"] if self.target == ["lambo"] else [*self.target, tool]

    def tools(self) -> list[dict[str, Any]]:
        out = self.run("list", *self.target, "--json")
        assert out.code == 0, str(out)
        listed = out.json()
        assert listed["status"] == "ok", listed
        return list(listed["tools"])

    def invoke(self, tool: str, arguments: dict[str, Any], output: str) -> Answered:
        return self.run(
            "call", *self.selector(tool), "--args", json.dumps(arguments), "--output", output
        )

    def call(self, tool: str, arguments: dict[str, Any]) -> Reply:
        # --output json prints the structured content alone, or the whole result on isError,
        # or a connection-issue envelope {"server", "tool", "error", "issue"}
        out = self.invoke(tool, arguments, "json")
        assert out.code == 0, str(out)
        structured = out.json()
        assert "isError" not in structured and "issue" not in structured, structured
        return Reply(structured, None)


# -- what a client sees, with the parts that differ between stores (ids, scores) named ---


def tool_shapes(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: t.get(k) for k in ("name", "description", "inputSchema")} for t in tools]


def plain(text: str) -> str:
    text = RECEIPT.sub("<receipt>", text)
    text = re.sub(r"\bid [0-9a-f]{8}\b", "id <id>", text)
    text = re.sub(r"flush_lag_ms \d+", "flush_lag_ms <ms>", text)  # a measured age
    return re.sub(r"score \d+\.\d+", "score <score>", text)


def store_free(value: Any) -> Any:
    """``value`` with receipts, node ids and scores replaced by what they are."""
    if isinstance(value, str):
        return plain(value)
    if isinstance(value, list):
        return [store_free(v) for v in value]
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            # created / matched list node ids: which ones differs by store, how many does not
            if key in ("node_id", "score") or (key in ("created", "matched") and item):
                out[key] = f"<{key}>"
            else:
                out[key] = store_free(item)
        return out
    return value


@dataclass(frozen=True)
class Seen:
    """What one client saw of the scenario, store-free; ``receipt`` is the raw one."""

    tools: list[dict[str, Any]]
    ack: Any
    waited: Any
    recalled: Any
    texts: list[str | None]
    receipt: str = field(compare=False)


def derive_args() -> dict[str, Any]:
    return {"agent_id": AGENT, "concepts": [{"content": CONTENT, "concept_type": "entity"}]}


def scenario(client: ToolClient) -> Seen:
    """List, derive, wait on the receipt, recall: what the client saw, store-free."""
    tools = client.tools()
    assert [t["name"] for t in tools] == list(SERVED_TOOLS)
    ack = client.call("lambo_derive", derive_args())
    receipt = ack.structured["receipt"]
    assert RECEIPT.fullmatch(receipt), receipt
    waited = client.call("lambo_stats", {"agent_id": AGENT, "receipt": receipt, "wait_ms": WAIT_MS})
    assert waited.structured["receipt"]["state"] == "applied", waited.structured
    recalled = client.call("lambo_recall", {"agent_id": AGENT, "query": QUERY})
    assert recalled.structured["hits"][0]["content"] == CONTENT
    return Seen(
        tool_shapes(tools),
        store_free(ack.structured),
        store_free(waited.structured["receipt"]),
        store_free(recalled.structured),
        [None if r.text is None else plain(r.text) for r in (ack, waited, recalled)],
        receipt,
    )


async def sdk_over_stdio(home: Path, store: Path) -> Seen:
    params = StdioServerParameters(
        command=lambo_argv()[0],
        args=[*lambo_argv()[1:], "serve", "--session", SESSION, "--store", str(store)],
        env=serve_env(home),
        cwd=str(home),
    )
    async with Client(params) as client:
        tools = [
            t.model_dump(mode="json", by_alias=True, exclude_none=True)
            for t in (await client.list_tools()).tools
        ]
        replies: dict[str, Reply] = {}

        async def call(tool: str, arguments: dict[str, Any]) -> Reply:
            result = await client.call_tool(tool, arguments)
            assert not result.is_error, result.content
            first = result.content[0]
            assert isinstance(first, TextContent), first
            replies[tool] = Reply(dict(result.structured_content or {}), first.text)
            return replies[tool]

        ack = await call("lambo_derive", derive_args())
        await call(
            "lambo_stats",
            {"agent_id": AGENT, "receipt": ack.structured["receipt"], "wait_ms": WAIT_MS},
        )
        await call("lambo_recall", {"agent_id": AGENT, "query": QUERY})

    class Replayed:
        def tools(self) -> list[dict[str, Any]]:
            return tools

        def call(self, tool: str, arguments: dict[str, Any]) -> Reply:
            return replies[tool]

    return scenario(Replayed())


@pytest.fixture(scope="module")
def over_stdio(tmp_path_factory: pytest.TempPathFactory) -> Seen:
    """What the SDK's client sees over stdio, once per module: its own home (MiniLM, as
    served_home sets one up, which is per test) and store."""
    root = tmp_path_factory.mktemp("stdio-reference")
    home = root / "lambo-home"
    import_model(
        minilm_source_dir(root / "minilm-src"), "minilm", home / "cache" / "models", pooling="mean"
    )
    (home / "config").mkdir(parents=True)
    (home / "config" / "lambo.toml").write_text('[embedder]\nmodel = "minilm"\nthreads = 1\n')
    seen: list[Seen] = []

    async def run() -> None:
        seen.append(await sdk_over_stdio(home, root / "m.db"))

    anyio.run(run)
    return seen[0]


def requests(log: str) -> Iterator[tuple[str, str, int, str]]:
    """The serve's request lines: (method, session, status, credential)."""
    for found in REQUEST_LINE.finditer(log):
        method, session, status, credential = found.groups()
        yield method, session, int(status), credential


# -- the tests ---------------------------------------------------------------------------


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_the_inspector_over_http_sees_what_stdio_sees(
    served_home: Path, tmp_path: Path, over_stdio: Seen, era: str
) -> None:
    with HttpServe(served_home, tmp_path / "m.db", (SESSION,)) as serve:
        seen = scenario(Inspector(serve.url(SESSION), tmp_path, era=era))
        assert serve.stop() == 0
    assert seen == over_stdio
    statuses = {status for _, session, status, _ in requests(serve.log) if session == SESSION}
    assert statuses <= {200, 202}, serve.log


def test_mcporter_over_http_sees_what_stdio_sees(
    served_home: Path, tmp_path: Path, over_stdio: Seen
) -> None:
    with HttpServe(served_home, tmp_path / "m.db", (SESSION,)) as serve:
        porter = Mcporter(serve.url(SESSION), tmp_path)
        seen = scenario(porter)
        # its JSON output carries no text blocks: the receipt's text, as --output text shows it
        as_text = porter.invoke("lambo_stats", {"agent_id": AGENT, "receipt": seen.receipt}, "text")
        assert as_text.code == 0, str(as_text)
        assert serve.stop() == 0
    assert seen.texts == [None, None, None]
    assert replace(seen, texts=over_stdio.texts) == over_stdio
    stdio_waited = over_stdio.texts[1]
    assert stdio_waited is not None
    assert plain(as_text.stdout).splitlines()[0] == stdio_waited.splitlines()[0]


def assert_refused_with_401(log: str) -> None:
    """Every refusal was a 401 before any session was reached; every answer had the token."""
    seen = list(requests(log))
    refused = {(session, credential) for _, session, status, credential in seen if status == 401}
    answered = {(session, credential) for _, session, status, credential in seen if status < 300}
    assert refused == {("-", "-")}, log
    assert answered == {(SESSION, "auth-token")}, log
    assert TOKEN not in log and WRONG_TOKEN not in log  # a credential is never logged


def test_the_inspector_with_a_bearer_token(served_home: Path, tmp_path: Path) -> None:
    env = {"LAMBO_AUTH_TOKEN": TOKEN}
    with HttpServe(served_home, tmp_path / "m.db", (SESSION,), env=env) as serve:
        url = serve.url(SESSION)
        right = Inspector(url, tmp_path, token=TOKEN)
        assert [t["name"] for t in right.tools()] == list(SERVED_TOOLS)
        assert right.call("lambo_stats", {"agent_id": AGENT}).structured["session"] == SESSION
        for token in (WRONG_TOKEN, None):
            out = Inspector(url, tmp_path, token=token).run("--method", "tools/list")
            # exit 3 is the CLI's AUTH_REQUIRED; --stored-auth-only keeps it from OAuth
            assert out.code == 3, str(out)
            assert out.json()["error"]["code"] == "auth_required", str(out)
        assert serve.stop() == 0
    assert_refused_with_401(serve.log)


def test_mcporter_with_a_bearer_token(served_home: Path, tmp_path: Path) -> None:
    env = {"LAMBO_AUTH_TOKEN": TOKEN}
    with HttpServe(served_home, tmp_path / "m.db", (SESSION,), env=env) as serve:
        url = serve.url(SESSION)
        right = Mcporter(url, tmp_path, token=TOKEN)
        assert [t["name"] for t in right.tools()] == list(SERVED_TOOLS)
        assert right.call("lambo_stats", {"agent_id": AGENT}).structured["session"] == SESSION
        for token in (WRONG_TOKEN, None):
            out = Mcporter(url, tmp_path, token=token).invoke(
                "lambo_stats", {"agent_id": AGENT}, "json"
            )
            # mcporter 0.9.0 exits 0 here (its forced exit after cleanup overrides the 1 it
            # set): the envelope is what says the call failed
            failed = out.json()
            assert set(failed) >= {"error", "issue"} and "session" not in failed, str(out)
        assert serve.stop() == 0
    assert_refused_with_401(serve.log)
