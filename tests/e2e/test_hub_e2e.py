"""Two real serves of one session: the second forwards to the first; SIGKILL the hub."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

from tests.e2e.conftest import body, derive, lambo_argv, serve_env, sitecustomize
from tests.e2e.raw_serve import LoggedServe


def params(home: Path) -> StdioServerParameters:
    argv = lambo_argv()
    return StdioServerParameters(
        command=argv[0],
        args=[*argv[1:], "serve", "--session", "shared"],
        env=serve_env(home),
        cwd=str(home),
    )


def test_forwarding_read_your_writes_and_takeover(served_home: Path) -> None:
    async def scenario() -> None:
        async with Client(params(served_home)) as first:
            hub = body(await first.call_tool("lambo_stats", {"agent_id": "agent-a"}))
            async with Client(params(served_home)) as second:
                # A write through the second serve is applied by the hub...
                receipt = await derive(second, "written through the forwarder")
                waited = body(
                    await second.call_tool(
                        "lambo_stats",
                        {"agent_id": "agent-a", "receipt": receipt, "wait_ms": 30_000},
                    )
                )
                assert waited["receipt"]["state"] == "applied"
                assert waited["holder_pid"] == hub["holder_pid"]  # the hub's figures
                # ...and read through the first with read-your-writes.
                seen = body(await first.call_tool("lambo_stats", {"agent_id": "agent-a"}))
                assert seen["concept_count"] == 1

                acked = await derive(first, "acked just before the hub dies")
                os.kill(hub["holder_pid"], signal.SIGKILL)

                # The forwarder answers the clear error, then takes the session over.
                started = time.monotonic()  # a bound for a stuck takeover, not a target
                errors = 0
                while True:
                    result = await second.call_tool("lambo_stats", {"agent_id": "agent-a"})
                    if not result.is_error:
                        break
                    errors += 1
                    text = result.content[0].text  # type: ignore[union-attr]
                    assert "nothing was read and nothing was written" in text, text
                    assert "returns once a lambo serve holds the session" in text
                    assert time.monotonic() - started < TAKEOVER_BOUND_S
                    await anyio.sleep(0.2)
                took_over = body(result)
                assert took_over["holder_pid"] != hub["holder_pid"]
                # Nothing acked is lost: the hub's last write is replayed or already applied.
                deadline = time.monotonic() + 60
                while took_over["concept_count"] < 2:
                    assert time.monotonic() < deadline, took_over
                    await anyio.sleep(0.2)
                    took_over = body(await second.call_tool("lambo_stats", {"agent_id": "agent-a"}))
                assert took_over["concept_count"] == 2
                assert acked  # its receipt belonged to the dead hub

    anyio.run(scenario)


def test_http_serve_on_a_held_session_names_the_holder(served_home: Path) -> None:
    import subprocess

    async def scenario() -> None:
        async with Client(params(served_home)) as client:
            hub = body(await client.call_tool("lambo_stats", {"agent_id": "a"}))
            out = await anyio.to_thread.run_sync(
                lambda: subprocess.run(
                    [*lambo_argv(), "serve", "--session", "shared", "--transport", "http"],
                    capture_output=True,
                    text=True,
                    env=serve_env(served_home),
                    cwd=served_home,
                    timeout=60,
                )
            )
            assert out.returncode == 1
            last = out.stderr.splitlines()[-1]
            assert last.startswith("lambo: conflict: session 'shared' is already held by")
            assert f"pid {hub['holder_pid']}" in last

    anyio.run(scenario)


def test_a_squatted_socket_dir_leaves_the_client_its_memory_and_a_second_serve_forwarding(
    served_home: Path,
) -> None:
    """A socket directory another account made loose (755): the holder keeps memory for its
    own client and publishes in a private directory of its own; a second serve in the same
    environment finds it through the lease and forwards. Nothing goes in the loose one."""
    import tempfile

    runtime = Path(tempfile.mkdtemp(dir="/tmp"))
    (runtime / "lambo").mkdir(mode=0o755)
    (runtime / "lambo").chmod(0o755)
    env = {**serve_env(served_home), "XDG_RUNTIME_DIR": str(runtime)}
    argv = lambo_argv()
    squatted = StdioServerParameters(
        command=argv[0],
        args=[*argv[1:], "serve", "--session", "squatted"],
        env=env,
        cwd=str(served_home),
    )

    async def scenario() -> None:
        async with Client(squatted) as holder:
            ack = body(
                await holder.call_tool(
                    "lambo_derive",
                    {
                        "agent_id": "agent-a",
                        "concepts": [
                            {"content": "the squatted dir keeps memory", "concept_type": "logic"}
                        ],
                    },
                )
            )
            waited = body(
                await holder.call_tool(
                    "lambo_stats",
                    {"agent_id": "agent-a", "receipt": ack["receipt"], "wait_ms": 30_000},
                )
            )
            assert waited["receipt"]["state"] == "applied"
            assert list((runtime / "lambo").iterdir()) == []  # nothing in their directory
            async with Client(squatted) as second:
                stats = body(await second.call_tool("lambo_stats", {"agent_id": "agent-a"}))
                assert stats["holder_pid"] == waited["holder_pid"]  # forwarded to the holder
                found = body(
                    await second.call_tool(
                        "lambo_recall", {"agent_id": "agent-a", "query": "squatted dir memory"}
                    )
                )
                assert [h["content"] for h in found["hits"]] == ["the squatted dir keeps memory"]

    try:
        anyio.run(scenario)
    finally:
        (runtime / "lambo").rmdir()
        runtime.rmdir()


def test_a_reservation_through_a_forwarder_is_a_conflict_line_on_the_hub(
    served_home: Path,
) -> None:
    """Locks live in the hub's RAM: one taken through a forwarder shows on every recall."""

    async def scenario() -> None:
        async with Client(params(served_home)) as first, Client(params(served_home)) as second:
            receipt = await derive(first, "the deploy script lives in ops/deploy.sh")
            await first.call_tool(
                "lambo_stats", {"agent_id": "agent-a", "receipt": receipt, "wait_ms": 30_000}
            )
            found = body(
                await first.call_tool(
                    "lambo_recall", {"agent_id": "agent-a", "query": "deploy script"}
                )
            )
            node_id = found["hits"][0]["node_id"]
            body(
                await second.call_tool("lambo_reserve", {"agent_id": "agent-b", "node_id": node_id})
            )
            seen = body(
                await first.call_tool(
                    "lambo_recall", {"agent_id": "agent-a", "query": "deploy script"}
                )
            )
            [line] = seen["warnings"]
            assert line.startswith("⚡ Conflict: reserved by agent-b until "), line
            assert line in seen["context"]
            body(
                await second.call_tool(
                    "lambo_reserve", {"agent_id": "agent-b", "node_id": node_id, "release": True}
                )
            )
            after = body(
                await first.call_tool(
                    "lambo_recall", {"agent_id": "agent-a", "query": "deploy script"}
                )
            )
            assert after["warnings"] == []

    anyio.run(scenario)


# --------------------------------------------------------------------------- shutdown


#: how long a takeover may take before the test calls it stuck (a hang guard, far above the
#: medians tests/bench/takeover.py prints; the lease TTL is 45 s)
TAKEOVER_BOUND_S = 30.0
TAKEOVER_BY_DEATH = "which no longer runs on this host; taking the lease over"

# Says in the serve's log when a model load starts, so a test can tell an unasked takeover
# (which opens the session and loads the model) from none.
MODEL_LOAD_MARKER = """
import sys
import lambo_core.embed.loader as loader

_load = loader.LazyEmbedder._run

def _marked_load(self):
    print("e2e: a model load started", file=sys.stderr, flush=True)
    _load(self)

loader.LazyEmbedder._run = _marked_load
"""


def test_a_forwarder_whose_hub_was_killed_exits_promptly_when_its_client_leaves(
    served_home: Path, tmp_path: Path
) -> None:
    """SIGKILL the hub, let the forwarder's election decline the session, then close its
    stdin: it exits without taking the session over, because no call asked it to (a
    takeover would open the session and load the model, and a serve lets a model load
    finish before it exits). The lease, still the dead hub's, and the log, with no model
    load, show it; how long the exit takes is tests/bench/takeover.py's."""
    from lambo_core.paths import resolve_paths
    from lambo_core.store import SqliteStore

    env = sitecustomize(tmp_path / "marked-model-load", MODEL_LOAD_MARKER)
    hub = LoggedServe(served_home, "hub", env)
    forwarder: LoggedServe | None = None
    try:
        hub.handshake()
        hub_pid = hub.stats()["holder_pid"]
        hub.wait_for_log("e2e: a model load started", within=TAKEOVER_BOUND_S)
        forwarder = LoggedServe(served_home, "forwarder", env)
        forwarder.handshake()
        assert forwarder.stats()["holder_pid"] == hub_pid  # answered through the hub
        os.kill(hub_pid, signal.SIGKILL)
        hub.proc.wait()
        forwarder.wait_for_log("is gone; electing a new one", within=TAKEOVER_BOUND_S)
        # an election round looked at the dead hub's lease and left it: no call asked
        forwarder.wait_for_log("takes the session over when a call needs it", TAKEOVER_BOUND_S)
        assert forwarder.proc.stdin is not None
        forwarder.proc.stdin.close()
        code = forwarder.proc.wait(timeout=TAKEOVER_BOUND_S)
        log = forwarder.log.read_text()
        assert code == 0, log
        assert "holding session" not in log and TAKEOVER_BY_DEATH not in log
        assert "e2e: a model load started" not in log
        # the lease is still the dead hub's: the next serve takes it over at once
        store = SqliteStore(resolve_paths(serve_env(served_home)).default_store)
        try:
            lease = store.get_lease("shared")
        finally:
            store.close()
        assert lease is not None and lease.pid == hub_pid
    finally:
        if forwarder is not None:
            forwarder.stop()
        hub.stop()


def test_a_call_after_the_hub_was_killed_is_served_by_taking_the_dead_holders_lease(
    served_home: Path,
) -> None:
    """The first calls get the clear error; then the forwarder serves as the new hub,
    having taken the lease by the rule for a dead local holder (not by waiting out its
    45 s TTL). The takeover's latency is tests/bench/takeover.py's."""
    hub = LoggedServe(served_home, "hub")
    forwarder: LoggedServe | None = None
    try:
        hub.handshake()
        hub_pid = hub.stats()["holder_pid"]
        forwarder = LoggedServe(served_home, "forwarder")
        forwarder.handshake()
        assert forwarder.stats()["holder_pid"] == hub_pid
        os.kill(hub_pid, signal.SIGKILL)
        hub.proc.wait()
        forwarder.wait_for_log("is gone; electing a new one", within=TAKEOVER_BOUND_S)
        asked = time.monotonic()  # a bound for a stuck takeover, not a target
        while True:
            answer = forwarder.request(
                "tools/call", {"name": "lambo_stats", "arguments": {"agent_id": "agent-a"}}
            )
            result = answer["result"]
            if not result["isError"]:
                break
            assert "nothing was read and nothing was written" in result["content"][0]["text"]
            assert time.monotonic() - asked < TAKEOVER_BOUND_S, forwarder.log.read_text()
            time.sleep(0.1)  # the next poll
        assert result["structuredContent"]["holder_pid"] == forwarder.proc.pid
        assert TAKEOVER_BY_DEATH in forwarder.log.read_text()
    finally:
        if forwarder is not None:
            forwarder.stop()
        hub.stop()
