"""The MCP server: the SDK's low-level ``Server`` over lambo's tool handler.

The low-level server publishes our hand-written schemas and leaves argument
validation to us, which is what we want: lambo refuses in the spec's order
and words. The handler is either the local ``MemoryService`` (this process
holds the session) or a forwarder to the hub that does; the server cannot
tell the difference.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import mcp.types as types
from mcp.server import Server
from mcp.shared.exceptions import MCPError

from ..reach import REACH_SCOPE_KEY, reach_of, reaching
from ..version import __version__
from .refusals import UNKNOWN_TOOL
from .tools import DESCRIPTIONS, SCHEMAS, instructions

log = logging.getLogger(__name__)

# (tool, arguments) -> CallToolResult as its JSON wire form.
CallHandler = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


def tool_list(names: list[str]) -> list[types.Tool]:
    """The published tools, in the order ``names`` gives."""
    return [
        types.Tool(name=name, description=DESCRIPTIONS[name], input_schema=SCHEMAS[name])
        for name in names
    ]


def request_reach(ctx: Any) -> frozenset[str] | None:
    """The sessions the HTTP request behind ``ctx`` may reach (its credential's, put in the
    ASGI scope by the HTTP app); None over stdio, or for a caller reaching every session."""
    scope = getattr(getattr(ctx, "request", None), "scope", None)
    if not isinstance(scope, dict):
        return None
    return reach_of(scope.get(REACH_SCOPE_KEY))


def build_server(
    session: str,
    handler: CallHandler,
    tool_names: Callable[[], list[str]],
    layers: Sequence[str] = (),
) -> Server[Any]:
    """An MCP server for ``session`` whose tool calls go to ``handler``; its instructions
    name ``layers``, the shared sessions it reads beside its own."""

    async def on_list_tools(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tool_list(tool_names()))

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        name = params.name
        if name not in tool_names():
            raise MCPError(types.INVALID_PARAMS, UNKNOWN_TOOL)
        with reaching(request_reach(ctx)):
            result = await handler(name, dict(params.arguments or {}))
        return types.CallToolResult.model_validate(result)

    return Server(
        "lambo",
        version=__version__,
        instructions=instructions(session, layers),
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
    )
