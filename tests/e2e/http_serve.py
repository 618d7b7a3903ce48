"""A `lambo serve --transport http` process for e2e tests: started on a free port (--port 0,
read back from its log line), its stderr kept, stopped with SIGTERM, and MCP clients over
real HTTP on 127.0.0.1 (the SDK's own client, with or without a bearer token)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.announced import AnnouncedProcess
from tests.e2e.conftest import lambo_argv, serve_env

LISTENING = re.compile(r"listening on (http://[^;\s]+)")


def serve_settings(home: Path, **settings: object) -> None:
    """Add a [serve] table to the LAMBO_HOME's lambo.toml (served_home writes [embedder])."""
    import tomli_w

    config = home / "config" / "lambo.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    with config.open("a", encoding="utf-8") as fh:
        fh.write("\n" + tomli_w.dumps({"serve": settings}))


class HttpServe(AnnouncedProcess):
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
        super().__init__(argv, home, {**serve_env(home), **(env or {})}, LISTENING)

    def wait_listening(self) -> str:
        """The base URL, once the serve says where it listens (it has taken its sessions)."""
        return self.wait_announced("the serve")

    def url(self, session: str | None = None) -> str:
        base = self.wait_listening()
        return f"{base}/mcp" if session is None else f"{base}/mcp/s/{session}"

    def __enter__(self) -> HttpServe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
