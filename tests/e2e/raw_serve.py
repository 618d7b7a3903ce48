"""`lambo serve` processes spoken to in raw JSON-RPC lines: fast enough for hundreds of calls,
and free to close stdin, send a signal or leave requests in flight, as a client may."""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from tests.e2e.conftest import lambo_argv, serve_env


class RawServe:
    def __init__(
        self,
        home: Path,
        store: Path | None,
        *,
        session: str = "crash",
        stderr: IO[bytes] | int | None = subprocess.DEVNULL,
        env: dict[str, str] | None = None,
        preexec: Callable[[], None] | None = None,
    ) -> None:
        # None: the store the configuration names
        flags = ["--store", str(store)] if store is not None else []
        argv = [*lambo_argv(), "serve", "--session", session, *flags]
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

    def close(self) -> None:
        """Reap the serve (killed if it still runs) and close our ends of its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(60)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                with contextlib.suppress(BrokenPipeError):
                    pipe.close()


class LoggedServe:
    """A `lambo serve` of session "shared" whose log goes to ``home/<name>.log``, driven over
    raw JSON-RPC lines with a deadline on every answer, so the test owns its stdin."""

    def __init__(self, home: Path, name: str, env: dict[str, str] | None = None) -> None:
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
        self._next += 1
        message = {"jsonrpc": "2.0", "id": self._next, "method": method, "params": params}
        return self.request_line(json.dumps(message).encode(), self._next)

    def request_line(self, line: bytes, rid: object) -> dict[str, Any]:
        """Send one raw line (its newline added) and return the answer carrying ``rid``."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + 60
        while True:
            answer = json.loads(self._line(deadline))
            if answer.get("id") == rid:
                return dict(answer)

    def handshake(self) -> None:
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
