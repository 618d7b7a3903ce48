"""Run an MCP server over one connection's pair of streams, and let a stop answer first.

``serve_connection`` relays the client's messages to the server and its
answers back, counting the requests not answered yet (``Outstanding``). The
end of input asks for the stop but keeps the server's input open, so the
calls in flight are still answered while the caller's ``on_stop`` runs. Any
transport that yields the SDK's pair of streams can use it (stdio today).
Spec: "Transports".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server import Server
from mcp.shared.message import SessionMessage

ReadStream = MemoryObjectReceiveStream[SessionMessage | Exception]
WriteStream = MemoryObjectSendStream[SessionMessage]


class Outstanding:
    """Ids of the client's requests not answered yet, so a stop can let them be answered.

    Used from one event loop only.
    """

    def __init__(self) -> None:
        self._ids: set[object] = set()
        self._none = anyio.Event()
        self._none.set()

    def asked(self, message: object) -> None:
        if isinstance(message, types.JSONRPCRequest):
            self._ids.add(message.id)
            self._none = anyio.Event() if self._none.is_set() else self._none

    def answered(self, message: object) -> None:
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            self._ids.discard(message.id)
            if not self._ids:
                self._none.set()

    async def drained(self) -> None:
        await self._none.wait()


async def serve_connection(
    server: Server[Any],
    read_stream: ReadStream,
    write_stream: WriteStream,
    stop: anyio.Event,
    on_stop: Callable[[Outstanding], Awaitable[None]],
) -> None:
    """Serve until ``stop`` is set (the end of input sets it), then run ``on_stop`` shielded
    while the server still answers, then end the connection."""
    outstanding = Outstanding()
    to_server, server_in = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    server_out, from_server = anyio.create_memory_object_stream[SessionMessage](0)
    async with anyio.create_task_group() as conn:
        conn.start_soon(_relay_in, read_stream, to_server, outstanding, stop)
        conn.start_soon(_relay_out, from_server, write_stream, outstanding)
        conn.start_soon(server.run, server_in, server_out, server.create_initialization_options())
        await stop.wait()
        with anyio.CancelScope(shield=True):
            await on_stop(outstanding)
        conn.cancel_scope.cancel()


async def _relay_in(
    source: ReadStream,
    sink: MemoryObjectSendStream[SessionMessage | Exception],
    outstanding: Outstanding,
    stop: anyio.Event,
) -> None:
    """Client messages to the server; at the end of input ask for the stop, but keep the
    server's input open, so the calls in flight are still answered while the stop runs."""
    async with source:
        async for item in source:
            if isinstance(item, SessionMessage):
                outstanding.asked(item.message)
            try:
                await sink.send(item)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return
    stop.set()


async def _relay_out(
    source: MemoryObjectReceiveStream[SessionMessage], sink: WriteStream, outstanding: Outstanding
) -> None:
    async with source, sink:
        async for item in source:
            await sink.send(item)
            outstanding.answered(item.message)
