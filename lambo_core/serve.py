"""`lambo serve`: hold a session and answer MCP over stdio.

The handshake and ``tools/list`` answer at once: opening the session
(rebuilding its indices) and loading the embedding model both run in the
background, and a tool call waits only for the session, never for the model
(writes wait for the model on their receipts; reads run without the vector
leg until it is ready).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread

from .config import Config
from .errors import LamboError, internal_fault
from .mcp.server import build_server
from .mcp.tools import TOOL_ORDER
from .service import SERVED_TOOLS, MemoryService, ToolResult
from .session import EmbedderPlan, Session
from .store import open_store
from .writes import WritePipeline

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServeOptions:
    session: str
    agent: str = "lambo-serve"
    allow_embedding_mismatch: bool = False


def open_service(config: Config, options: ServeOptions) -> MemoryService:
    """Open the store and the session, start the apply worker: the local service."""
    path = config.store_path if config.store_kind == "sqlite" else None
    store = open_store(config.store_kind, path)
    plan = EmbedderPlan.from_config(config)
    session = Session.open(
        store,
        options.session,
        plan,
        allow_embedding_mismatch=options.allow_embedding_mismatch,
    )
    pipeline = WritePipeline(session).start()
    return MemoryService(session, pipeline, config)


def close_service(service: MemoryService) -> None:
    service.pipeline.close()
    service.session.store.close()


class LocalHandler:
    """Tool calls against a service that opens in the background."""

    def __init__(self, config: Config, options: ServeOptions) -> None:
        self._config = config
        self._options = options
        self._ready = anyio.Event()
        self.service: MemoryService | None = None
        self.error: LamboError | None = None

    async def open(self) -> None:
        try:
            self.service = await anyio.to_thread.run_sync(open_service, self._config, self._options)
        except LamboError as exc:
            log.error("%s", exc.render())
            if exc.detail:
                log.warning("%s", exc.detail)
            self.error = exc
        except Exception as exc:
            log.exception("opening the session failed")
            self.error = internal_fault(repr(exc))
        finally:
            self._ready.set()

    def tool_names(self) -> list[str]:
        return [t for t in TOOL_ORDER if t in SERVED_TOOLS]

    async def __call__(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        await self._ready.wait()
        if self.service is None:
            assert self.error is not None
            return ToolResult.error(self.error.render()).to_json()
        return (await self.service.call(tool, arguments)).to_json()


async def serve_stdio(config: Config, options: ServeOptions) -> None:
    from .mcp.stdio import bounded_stdio_server

    handler = LocalHandler(config, options)
    server = build_server(options.session, handler, handler.tool_names)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(handler.open)
            async with bounded_stdio_server() as (read_stream, write_stream):
                await server.run(read_stream, write_stream, server.create_initialization_options())
            tg.cancel_scope.cancel()
    finally:
        if handler.service is not None:
            close_service(handler.service)
