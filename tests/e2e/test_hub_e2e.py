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


class RawServe:
    """A `lambo serve` driven over raw JSON-RPC lines, so the test owns its stdin."""

    def __init__(self, home: Path, name: str, env: dict[str, str] | None = None) -> None:
        import subprocess

        self.log = home / f"{name}.log"
        self._log_file = self.log.open("wb")
        self.proc = subprocess.Popen(
            [*lambo_argv(), "serve", "--session", "shared"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log_file,
            env={**serve_env(home), **(env or {})},
            cwd=home,
        )
        self._next = 0
        self._buffer = b""

    def _line(self, deadline: float) -> bytes:
        import select

        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            assert left > 0, f"no answer in time; the serve's log:\n{self.log.read_text()}"
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 65536)
                assert chunk, f"the serve closed its output; its log:\n{self.log.read_text()}"
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        import json

        self._next += 1
        message = {"jsonrpc": "2.0", "id": self._next, "method": method, "params": params}
        return self.request_line(json.dumps(message).encode(), self._next)

    def request_line(self, line: bytes, rid: object) -> dict[str, Any]:
        """Send one raw line (its newline added) and return the answer carrying ``rid``."""
        import json

        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + 60
        while True:
            answer = json.loads(self._line(deadline))
            if answer.get("id") == rid:
                return dict(answer)

    def handshake(self) -> None:
        import json

        self.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "e2e", "version": "0"},
            },
        )
        assert self.proc.stdin is not None
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        self.proc.stdin.write(json.dumps(note).encode() + b"\n")
        self.proc.stdin.flush()

    def stats(self) -> dict[str, Any]:
        answer = self.request(
            "tools/call", {"name": "lambo_stats", "arguments": {"agent_id": "agent-a"}}
        )
        result = answer["result"]
        assert not result["isError"], result
        return dict(result["structuredContent"])

    def wait_for_log(self, text: str, within: float) -> None:
        deadline = time.monotonic() + within
        while text not in self.log.read_text():
            assert time.monotonic() < deadline, f"no {text!r} in the log:\n{self.log.read_text()}"
            time.sleep(0.02)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None and not stream.closed:
                stream.close()
        self._log_file.close()


SLOW_MODEL_LOAD = """
import sys, time
import lambo_core.embed.loader as loader

_load = loader.LazyEmbedder._run

def _slow_load(self):
    time.sleep(30)
    _load(self)

loader.LazyEmbedder._run = _slow_load
print("e2e: every model load in this process takes 30 s longer", file=sys.stderr, flush=True)
"""


def test_a_forwarder_whose_hub_was_killed_exits_promptly_when_its_client_leaves(
    served_home: Path, tmp_path: Path
) -> None:
    """SIGKILL the hub, then close the forwarder's stdin: it exits at once, because no call
    asked it to take the session over (which would open the session and start loading the
    model, and a serve lets a model load finish before it exits, up to 15 s). Model loads
    are made slow (as a large model or a first run of the .pyz makes them) so that an
    unasked takeover would show in the time, not only in the log and the lease."""
    from lambo_core.paths import resolve_paths
    from lambo_core.store import SqliteStore

    slow = tmp_path / "slow-model-load"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text(SLOW_MODEL_LOAD)
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(slow), os.environ.get("PYTHONPATH")]))}
    hub = RawServe(served_home, "hub", env)
    forwarder: RawServe | None = None
    try:
        hub.handshake()
        hub_pid = hub.stats()["holder_pid"]
        assert "every model load in this process takes 30 s longer" in hub.log.read_text()
        forwarder = RawServe(served_home, "forwarder", env)
        forwarder.handshake()
        assert forwarder.stats()["holder_pid"] == hub_pid  # answered through the hub
        os.kill(hub_pid, signal.SIGKILL)
        hub.proc.wait()
        forwarder.wait_for_log("is gone; electing a new one", within=5.0)
        time.sleep(0.5)  # room for a takeover to start, were one to start unasked
        assert forwarder.proc.stdin is not None
        left = time.monotonic()
        forwarder.proc.stdin.close()
        code = forwarder.proc.wait(timeout=30)
        took = time.monotonic() - left
        print(f"the forwarder exited {took:.2f} s after its stdin closed")
        assert code == 0, forwarder.log.read_text()
        assert took < 5.0, forwarder.log.read_text()
        assert "holding session" not in forwarder.log.read_text()
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


def test_a_call_after_the_hub_was_killed_is_served_by_a_takeover_within_two_seconds(
    served_home: Path,
) -> None:
    hub = RawServe(served_home, "hub")
    forwarder: RawServe | None = None
    try:
        hub.handshake()
        hub_pid = hub.stats()["holder_pid"]
        forwarder = RawServe(served_home, "forwarder")
        forwarder.handshake()
        assert forwarder.stats()["holder_pid"] == hub_pid
        os.kill(hub_pid, signal.SIGKILL)
        hub.proc.wait()
        forwarder.wait_for_log("is gone; electing a new one", within=5.0)
        asked = time.monotonic()
        while True:
            answer = forwarder.request(
                "tools/call", {"name": "lambo_stats", "arguments": {"agent_id": "agent-a"}}
            )
            result = answer["result"]
            if not result["isError"]:
                break
            assert "nothing was read and nothing was written" in result["content"][0]["text"]
            assert time.monotonic() - asked < 2.0, forwarder.log.read_text()
            time.sleep(0.1)
        took = time.monotonic() - asked
        print(f"the forwarder answered as the new hub {took:.2f} s after the first call")
        assert result["structuredContent"]["holder_pid"] == forwarder.proc.pid
        assert took < 2.0
    finally:
        if forwarder is not None:
            forwarder.stop()
        hub.stop()
