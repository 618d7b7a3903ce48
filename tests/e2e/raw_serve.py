"""A `lambo serve` process spoken to in raw JSON-RPC lines: fast enough for hundreds of calls,
and free to close stdin, send a signal or leave requests in flight, as a client may."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from tests.e2e.conftest import lambo_argv, serve_env


class RawServe:
    def __init__(
        self,
        home: Path,
        store: Path,
        *,
        session: str = "crash",
        stderr: IO[bytes] | int | None = subprocess.DEVNULL,
        env: dict[str, str] | None = None,
        preexec: Callable[[], None] | None = None,
    ) -> None:
        argv = [*lambo_argv(), "serve", "--session", session, "--store", str(store)]
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env={**serve_env(home), **(env or {})},
            cwd=home,
            preexec_fn=preexec,  # a test's resource limit, set in the child before exec
        )
        self.next_id = 0
        self.answers: dict[int, dict[str, Any]] = {}  # read while waiting for another id
        self.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw-test", "version": "1"},
            },
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def read(self) -> dict[str, Any] | None:
        """The next message, or None once the serve has closed its stdout."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        return dict(json.loads(line)) if line else None

    def start(self, method: str, params: dict[str, Any]) -> int:
        """Send a request without waiting for its answer; its id."""
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        return self.next_id

    def answer(self, request_id: int) -> dict[str, Any]:
        while request_id not in self.answers:
            message = self.read()
            assert message is not None, "serve closed its stdout"
            if isinstance(message.get("id"), int):
                self.answers[message["id"]] = message
        return self.answers.pop(request_id)

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return self.answer(self.start(method, params))

    def start_call(self, tool: str, arguments: dict[str, Any]) -> int:
        return self.start("tools/call", {"name": tool, "arguments": arguments})

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        reply = self.request("tools/call", {"name": tool, "arguments": arguments})
        result = reply["result"]
        assert not result["isError"], result
        return dict(result["structuredContent"])
