"""Two real serves of one session: the second forwards to the first; SIGKILL the hub."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from tests.e2e.conftest import lambo_argv, serve_env


def params(home: Path) -> StdioServerParameters:
    argv = lambo_argv()
    return StdioServerParameters(
        command=argv[0],
        args=[*argv[1:], "serve", "--session", "shared"],
        env=serve_env(home),
        cwd=str(home),
    )


def body(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    return dict(result.structured_content)


async def derive(client: Client, content: str) -> str:
    ack = body(
        await client.call_tool(
            "lambo_derive",
            {"agent_id": "agent-a", "concepts": [{"content": content, "concept_type": "logic"}]},
        )
    )
    return str(ack["receipt"])


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
                started = time.monotonic()
                errors = 0
                while True:
                    result = await second.call_tool("lambo_stats", {"agent_id": "agent-a"})
                    if not result.is_error:
                        break
                    errors += 1
                    text = result.content[0].text  # type: ignore[union-attr]
                    assert "nothing was read and nothing was written" in text, text
                    assert "returns once a lambo serve holds the session" in text
                    assert time.monotonic() - started < 10
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


def test_unsafe_socket_dir_refuses_without_leaking_the_path(served_home: Path) -> None:
    import tempfile

    runtime = Path(tempfile.mkdtemp(dir="/tmp"))
    (runtime / "lambo").mkdir(mode=0o755)
    (runtime / "lambo").chmod(0o755)
    env = {**serve_env(served_home), "XDG_RUNTIME_DIR": str(runtime)}
    argv = lambo_argv()
    unsafe = StdioServerParameters(
        command=argv[0],
        args=[*argv[1:], "serve", "--session", "unsafe"],
        env=env,
        cwd=str(served_home),
    )

    async def scenario() -> None:
        async with Client(unsafe) as client:
            result = await client.call_tool("lambo_stats", {"agent_id": "a"})
            assert result.is_error
            text = result.content[0].text  # type: ignore[union-attr]
            assert text.startswith("configuration error: this lambo serve could not join")
            assert str(runtime) not in text

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
