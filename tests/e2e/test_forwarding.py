"""Forwarding between real serves: the holder is found from any environment, a wait on a
dead hub's receipt carries across the takeover, and refusals read the same on both paths."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from lambo_core.hub import HUB_GONE_TEXT, MAX_LINE, socket_name
from lambo_core.mcp.refusals import INVALID_PARAMS, INVALID_REQUEST, UNKNOWN_TOOL
from lambo_core.paths import resolve_paths
from lambo_core.store import SqliteStore
from tests.e2e.conftest import body, derive, lambo_argv, serve_env, sitecustomize
from tests.e2e.raw_serve import LoggedServe

SESSION = "shared"

# Every store.apply in a process started with this waits while the gate file exists, so
# writes it acked stay pending in the store until the gate is removed (or the process dies).
GATED_APPLY = """
import os, sys, time
from lambo_core.store.sqlite import SqliteStore

_apply = SqliteStore.apply
_gate = os.environ["LAMBO_E2E_APPLY_GATE"]

def _gated_apply(self, batch):
    while os.path.exists(_gate):
        time.sleep(0.01)
    _apply(self, batch)

SqliteStore.apply = _gated_apply
print("e2e: applies wait while the gate file exists", file=sys.stderr, flush=True)
"""

# A serve that lists one tool more than the hub serves, as a newer lambo forwarding to an
# older hub would: the hub refuses the name, and this serve's client must see that refusal
# exactly as the hub's own stdio client sees it.
FUTURE_TOOL = """
import lambo_core.serve as serve
from lambo_core.mcp import tools

tools.DESCRIPTIONS["lambo_future"] = "a tool only a newer lambo serves"
tools.SCHEMAS["lambo_future"] = {"type": "object", "properties": {}}
_names = serve.tool_names
serve.tool_names = lambda *args: [*_names(*args), "lambo_future"]
"""


@pytest.fixture
def runtime_dirs() -> Iterator[tuple[Path, Path]]:
    """Two short XDG_RUNTIME_DIRs (socket paths must stay under 104 bytes)."""
    a = Path(tempfile.mkdtemp(dir="/tmp", prefix="lfa-"))
    b = Path(tempfile.mkdtemp(dir="/tmp", prefix="lfb-"))
    try:
        yield a, b
    finally:
        shutil.rmtree(a, ignore_errors=True)
        shutil.rmtree(b, ignore_errors=True)


def params(home: Path, env: dict[str, str], *, xdg: Path | None) -> StdioServerParameters:
    argv = lambo_argv()
    environment = {**serve_env(home), **env}
    environment.pop("XDG_RUNTIME_DIR", None)
    if xdg is not None:
        environment["XDG_RUNTIME_DIR"] = str(xdg)
    return StdioServerParameters(
        command=argv[0],
        args=[*argv[1:], "serve", "--session", SESSION],
        env=environment,
        cwd=str(home),
    )


def text_of(result: Any) -> str:
    return str(result.content[0].text)


async def receipt_state(client: Client, receipt: str, wait_ms: int = 30_000) -> dict[str, Any]:
    return body(
        await client.call_tool(
            "lambo_stats", {"agent_id": "agent-a", "receipt": receipt, "wait_ms": wait_ms}
        )
    )


async def recalled(client: Client, query: str) -> list[str]:
    found = body(await client.call_tool("lambo_recall", {"agent_id": "agent-a", "query": query}))
    return [str(hit["content"]) for hit in found["hits"]]


async def until_served(client: Client, arguments: dict[str, Any], allowed: set[str]) -> Any:
    """Call lambo_stats until a hub answers; every error on the way must be one of
    ``allowed``. Each refused call waits for the election itself, so no sleep is needed."""
    for _ in range(30):
        result = await client.call_tool("lambo_stats", arguments)
        if not result.is_error:
            return result
        assert text_of(result) in allowed, text_of(result)
    raise AssertionError("no hub answered in 30 calls")


def test_forwarders_in_any_environment_and_a_wait_across_a_takeover(
    served_home: Path, tmp_path: Path, runtime_dirs: tuple[Path, Path]
) -> None:
    """The holder under XDG_RUNTIME_DIR=A, one serve under B and one with none: both
    forward. SIGKILL the hub with acked writes still pending; a forwarded lambo_stats with
    wait_ms on one of them waits until it is applied_after_restart."""
    dir_a, dir_b = runtime_dirs
    gate = tmp_path / "apply-gate"
    hub_env = {
        **sitecustomize(tmp_path / "gated", GATED_APPLY),
        "LAMBO_E2E_APPLY_GATE": str(gate),
    }
    db = resolve_paths(serve_env(served_home)).default_store

    async def scenario() -> None:
        async with Client(params(served_home, hub_env, xdg=dir_a)) as hub:
            hub_pid = body(await hub.call_tool("lambo_stats", {"agent_id": "agent-a"}))[
                "holder_pid"
            ]
            # the holder published under A and recorded where with its lease
            store = SqliteStore(db)
            try:
                lease = store.get_lease(SESSION)
            finally:
                store.close()
            assert lease is not None and lease.pid == hub_pid
            assert lease.socket == str(dir_a / "lambo" / socket_name(SESSION, db))
            async with (
                Client(params(served_home, {}, xdg=dir_b)) as second,
                Client(params(served_home, {}, xdg=None)) as third,
            ):
                for forwarder in (second, third):
                    seen = body(await forwarder.call_tool("lambo_stats", {"agent_id": "agent-a"}))
                    assert seen["holder_pid"] == hub_pid  # the hub's figures: it forwards
                # a derive through each is recallable through the others
                contents = [
                    (hub, "the release branch is cut on mondays"),
                    (second, "the staging database lives on port 6543"),
                    (third, "the deploy key rotates every ninety days"),
                ]
                for client, content in contents:
                    receipt = await derive(client, content)
                    assert (await receipt_state(client, receipt))["receipt"]["state"] == "applied"
                assert contents[0][1] in await recalled(third, "release branch mondays")
                assert contents[1][1] in await recalled(hub, "staging database port")
                assert contents[2][1] in await recalled(second, "deploy key rotates")
                assert not (dir_b / "lambo" / socket_name(SESSION, db)).exists()

                # writes acked by the hub and left pending in the store
                gate.write_text("closed")
                pending = [
                    await derive(hub if n % 2 else second, f"pending write number {n}")
                    for n in range(6)
                ]
                for receipt in pending:
                    state = await receipt_state(hub, receipt, wait_ms=0)
                    assert state["receipt"]["state"] == "pending"
                os.kill(hub_pid, signal.SIGKILL)

                # the forwarder answers the clear error, takes the session over, and the
                # wait on the dead hub's receipt lasts until the replay applied it
                waited = body(
                    await until_served(
                        second,
                        {"agent_id": "agent-a", "receipt": pending[-1], "wait_ms": 30_000},
                        {HUB_GONE_TEXT},
                    )
                )
                assert waited["receipt"]["state"] == "applied_after_restart", waited
                new_hub = waited["holder_pid"]
                assert new_hub != hub_pid
                # the serve with no XDG_RUNTIME_DIR finds the new holder (published under B)
                first_seen = body(
                    await until_served(third, {"agent_id": "agent-a"}, {HUB_GONE_TEXT})
                )
                assert first_seen["holder_pid"] == new_hub
                for receipt in pending:
                    state = await receipt_state(third, receipt)
                    assert state["receipt"]["state"] == "applied_after_restart", state
                final = body(await third.call_tool("lambo_stats", {"agent_id": "agent-a"}))
                assert final["concept_count"] == 3 + len(pending)  # each write exactly once

    anyio.run(scenario)


# --------------------------------------------------------------------------- refusals


def _without_id(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in answer.items() if k != "id"}


def _hub_socket_answer(db: Path, line: bytes) -> dict[str, Any]:
    """One request on the hub's socket, found where its lease says it published."""
    store = SqliteStore(db)
    try:
        lease = store.get_lease(SESSION)
    finally:
        store.close()
    assert lease is not None and lease.socket
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(lease.socket)
        sock.sendall(line + b"\n")
        reader = sock.makefile("rb")
        return dict(json.loads(reader.readline()))


def test_refusals_read_the_same_through_a_forwarder_and_the_hub_socket_as_on_stdio(
    lambo_home: Path, tmp_path: Path, runtime_dirs: tuple[Path, Path]
) -> None:
    dir_a, dir_b = runtime_dirs
    lambo_home.mkdir(parents=True, exist_ok=True)  # no model: refusals need none
    db = resolve_paths(serve_env(lambo_home)).default_store
    hub = LoggedServe(lambo_home, "hub", {"XDG_RUNTIME_DIR": str(dir_a)})
    newer: LoggedServe | None = None
    try:
        hub.handshake()
        hub_pid = hub.stats()["holder_pid"]
        newer = LoggedServe(
            lambo_home,
            "newer",
            {**sitecustomize(tmp_path / "future", FUTURE_TOOL), "XDG_RUNTIME_DIR": str(dir_b)},
        )
        newer.handshake()
        assert newer.stats()["holder_pid"] == hub_pid  # it forwards

        unknown = {"code": INVALID_PARAMS, "message": UNKNOWN_TOOL}
        direct = hub.request("tools/call", {"name": "lambo_future", "arguments": {}})
        assert direct["error"] == unknown
        # the newer serve lists lambo_future, forwards it, and the hub refuses the name:
        # the newer serve's client sees exactly what the hub's own client sees
        forwarded = newer.request("tools/call", {"name": "lambo_future", "arguments": {}})
        assert _without_id(forwarded) == _without_id(direct)
        # a name neither serves: refused by the forwarding serve itself, in the same words
        neither = newer.request("tools/call", {"name": "lambo_nope", "arguments": {}})
        assert _without_id(neither) == _without_id(direct)
        # and on the hub socket itself
        on_socket = _hub_socket_answer(
            db, b'{"id": 5, "tool": "lambo_future", "arguments": {"agent_id": "a"}}'
        )
        assert on_socket == {"id": 5, "error": unknown}

        # a line over 4 MiB: -32600 with the same text everywhere
        padding = b"a" * (5 * 1024 * 1024)
        big = (
            b'{"jsonrpc": "2.0", "id": 77, "method": "tools/call", "params": {"name": '
            b'"lambo_stats", "arguments": {"agent_id": "' + padding + b'"}}}'
        )
        direct_big = hub.request_line(big, 77)
        assert direct_big["error"]["code"] == INVALID_REQUEST
        assert newer.request_line(big, 77) == direct_big
        socket_big = _hub_socket_answer(
            db, b'{"id": 6, "tool": "lambo_stats", "arguments": {"x": "' + b"a" * MAX_LINE + b'"}}'
        )
        assert socket_big == {"id": 6, "error": direct_big["error"]}
        # every serve goes on serving after the refusals
        assert newer.stats()["holder_pid"] == hub_pid
        assert hub.stats()["holder_pid"] == hub_pid
    finally:
        if newer is not None:
            newer.stop()
        hub.stop()
