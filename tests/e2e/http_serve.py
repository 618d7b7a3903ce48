"""A `lambo serve --transport http` process for e2e tests: started on a free port (--port 0,
read back from its log line), its stderr kept, stopped with SIGTERM, and MCP clients over
real HTTP on 127.0.0.1 (the SDK's own client, with or without a bearer token)."""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.conftest import lambo_argv, serve_env

LISTENING = re.compile(r"listening on (http://[^;\s]+)")
START_BOUND_S = 120.0  # a start past this is a failure, not a slow machine


def serve_settings(home: Path, **settings: object) -> None:
    """Add a [serve] table to the LAMBO_HOME's lambo.toml (served_home writes [embedder])."""
    import tomli_w

    config = home / "config" / "lambo.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    with config.open("a", encoding="utf-8") as fh:
        fh.write("\n" + tomli_w.dumps({"serve": settings}))


class HttpServe:
    """One HTTP serve. ``base`` is ``http://127.0.0.1:<port>`` once it listens; ``exited``
    holds its exit status (or a failure to start) with its stderr in ``log``."""

    def __init__(
        self,
        home: Path,
        store: Path,
        sessions: tuple[str, ...] = ("web",),
        *,
        extra: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        argv = [*lambo_argv(), "serve", "--transport", "http", "--port", "0"]
        for session in sessions:
            argv += ["--session", session]
        argv += ["--store", str(store), *extra]
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**serve_env(home), **(env or {})},
            cwd=home,
        )
        self.lines: list[str] = []
        self.base: str | None = None
        self._listening = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            found = LISTENING.search(line)
            if found and self.base is None:
                self.base = found.group(1)
                self._listening.set()
        self._listening.set()  # the process ended: whoever waits hears it

    @property
    def log(self) -> str:
        return "\n".join(self.lines)

    def wait_listening(self) -> str:
        """The base URL, once the serve says where it listens (it has taken its sessions)."""
        assert self._listening.wait(START_BOUND_S), "the serve did not start in time"
        assert self.base is not None, f"the serve ended before listening:\n{self.log}"
        return self.base

    def url(self, session: str | None = None) -> str:
        base = self.wait_listening()
        return f"{base}/mcp" if session is None else f"{base}/mcp/s/{session}"

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, then the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        self._reader.join(10)
        return code

    def wait_exit(self, timeout: float = 120.0) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(10)
        return code

    def __enter__(self) -> HttpServe:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self.stop()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._reader.join(10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


@contextlib.asynccontextmanager
async def http_client(
    url: str, *, token: str | None = None, mode: str = "auto"
) -> AsyncIterator[Client]:
    """The SDK's client over Streamable HTTP (``mode="legacy"``: the 2025-11-25 handshake;
    ``"auto"``: 2026-07-28 when the server speaks it)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode=mode) as client:
            yield client
