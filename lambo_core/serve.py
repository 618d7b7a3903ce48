"""`lambo serve`: hold a session (or forward to the serve that does) and answer MCP over stdio.

The first serve of a session and store takes the session lease and is its hub:
the only writer, the only process that loads the embedding model. Every later
serve forwards each tool call to the hub over a private Unix socket; if the
hub dies, a forwarder takes the lease over and becomes the hub as soon as a
call needs it (``hub.py``), so one whose client is leaving exits at once.

The handshake and ``tools/list`` answer at once: the election, opening the
session and loading the model all run in the background, and a tool call
waits only for the election (writes wait for the model on their receipts).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread
from mcp.shared.exceptions import MCPError

from .clock import SystemClock
from .config import Config
from .daemon import Daemon
from .errors import ConfigError, LamboError, internal_fault
from .hub import LeaseKeeper, SessionHub, http_refusal, lease_free
from .mcp.refusals import ProtocolRefusal
from .mcp.server import build_server
from .scoring import start_summary_warm
from .service import SERVED_TOOLS, MemoryService, ToolResult
from .session import EmbedderPlan, Session
from .store import open_store
from .store.base import Store
from .writes import WritePipeline

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServeOptions:
    session: str
    agent: str = "lambo-serve"
    allow_embedding_mismatch: bool = False


def open_service(store: Store, config: Config, options: ServeOptions) -> MemoryService:
    """Open the session on ``store`` and start its apply worker: the hub's service."""
    plan = EmbedderPlan.from_config(config)
    session = Session.open(
        store,
        options.session,
        plan,
        allow_embedding_mismatch=options.allow_embedding_mismatch,
    )
    pipeline = WritePipeline(
        session, edge_min_age_s=float(config.get("canonization.edge_min_age_s"))
    ).start()
    # The daemon's cycles run on the pipeline's writer thread, every cycle_interval_s.
    daemon = Daemon(session, config).attach(pipeline)
    return MemoryService(session, pipeline, config, daemon)


def stop_service(service: MemoryService, timeout: float = 15.0) -> None:
    """Apply what is queued, and let a model still loading finish before the process exits
    (onnxruntime aborts the process if it is torn down mid-load)."""
    service.pipeline.close(timeout)
    lazy = service.session.plan.lazy
    if lazy is not None:
        lazy.wait(timeout)


def tool_names() -> list[str]:
    return list(SERVED_TOOLS)


class Serve:
    """One serve process: its store handle, its role in the session, and its tool handler."""

    def __init__(self, config: Config, options: ServeOptions) -> None:
        self.config = config
        self.options = options
        sqlite = config.store_kind == "sqlite"
        self.store = open_store(config.store_kind, config.store_path if sqlite else None)
        self.service: MemoryService | None = None
        self.hub = SessionHub(
            self.store,
            options.session,
            config.store_path if sqlite else None,
            options.agent,
            self._become_hub,
            on_stop_hub=self._stop_hub,
            tool_names=tool_names,  # the hub socket refuses any other name as stdio does
        )
        self._elected = anyio.Event()
        self.error: LamboError | None = None

    async def _become_hub(self, keeper: LeaseKeeper) -> Any:
        self.service = await anyio.to_thread.run_sync(
            open_service, self.store, self.config, self.options
        )
        service = self.service
        start_summary_warm(service.session.index.graph)  # this process serves from now on

        async def handle(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
            return (await service.call(tool, arguments)).to_json()

        return handle

    async def _stop_hub(self) -> None:
        service, self.service = self.service, None
        if service is not None:
            await anyio.to_thread.run_sync(stop_service, service)

    async def start(self) -> None:
        try:
            role = await self.hub.start()
            log.info("session %s: this serve is the %s", self.options.session, role)
        except LamboError as exc:
            # The operator's log gets the whole refusal (it names local paths such as the
            # socket directory); a caller's tool result gets its class and the pointer.
            log.error("%s", exc.render())
            self.error = type(exc)(
                "this lambo serve could not join its session, so nothing was read or "
                "written; the reason and the fix are in the serve's log (stderr)"
            )
        except Exception as exc:
            log.exception("joining the session failed")
            self.error = internal_fault(repr(exc))
        finally:
            self._elected.set()

    async def __call__(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        await self._elected.wait()
        if self.error is not None:
            return ToolResult.error(self.error.render()).to_json()
        try:
            return await self.hub.call(tool, arguments)
        except ProtocolRefusal as exc:
            # refused by the hub before any tool ran: the JSON-RPC error stdio would give
            raise MCPError(exc.code, exc.message) from None

    async def close(self) -> None:
        await self.hub.close()
        await self._stop_hub()
        self.store.close()


def refuse_http(config: Config, options: ServeOptions) -> None:
    """``--transport http``: a held session is refused naming its holder; HTTP itself is
    not in this version yet, which is said plainly."""
    path = config.store_path if config.store_kind == "sqlite" else None
    store = open_store(config.store_kind, path)
    try:
        lease = store.get_lease(options.session)
        if lease is not None and not lease_free(lease, SystemClock().now()):
            raise http_refusal(options.session, lease)
    finally:
        store.close()
    raise ConfigError(
        "the HTTP transport is not available in this version yet; serve over stdio (the default)"
    )


async def serve_stdio(config: Config, options: ServeOptions) -> None:
    from .mcp.stdio import bounded_stdio_server

    serve = Serve(config, options)
    server = build_server(options.session, serve, tool_names)
    try:
        # The election is not cancelled when the client leaves: it may be opening the
        # session in a thread, which must finish before the serve can close cleanly.
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve.start)
            async with bounded_stdio_server() as (read_stream, write_stream):
                await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        with anyio.CancelScope(shield=True):
            await serve.close()
