"""Tool calls from a shell command: forwarded to the session's hub, or served locally.

When a serve holds the session, the CLI forwards to it, so a CLI write is
neither refused nor a second writer and `lambo stats` shows the writer's real
figures. Otherwise the CLI takes the session lease itself, opens the session,
answers its calls, lets any write it admitted apply, and gives the lease back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.to_thread

from .config import Config
from .errors import ConflictError
from .hub import LeaseKeeper, connect_to_hub, holder_description
from .serve import ServeOptions, open_service, stop_service
from .store import open_store

Call = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


@asynccontextmanager
async def open_client(config: Config, session: str, agent: str) -> AsyncIterator[Call]:
    """A ``call(tool, arguments) -> CallToolResult JSON`` bound to ``session``."""
    sqlite = config.store_kind == "sqlite"
    if sqlite:
        forwarder = await connect_to_hub(session, config.store_path)
        if forwarder is not None:
            try:
                yield forwarder.call
            finally:
                await forwarder.close()
            return
    store = open_store(config.store_kind, config.store_path if sqlite else None)
    keeper = LeaseKeeper(store, session, agent)
    try:
        if keeper.try_acquire() is None:
            current = keeper.current()
            holder = holder_description(current) if current else "another process"
            raise ConflictError(
                f"session {session!r} is held by {holder}, which is not answering on its "
                "socket; nothing was read or written; try again once it answers or exits"
            )
        service = await anyio.to_thread.run_sync(
            open_service, store, config, ServeOptions(session=session, agent=agent)
        )

        async def call(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
            return (await service.call(tool, arguments)).to_json()

        try:
            yield call
        finally:
            # A write admitted here is applied before the lease is given back.
            await anyio.to_thread.run_sync(stop_service, service)
    finally:
        keeper.release()
        store.close()
