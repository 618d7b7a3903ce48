"""Raw MCP requests over Streamable HTTP, for the tests that must see statuses and headers a
client library would hide: the headers a handshake-era request carries, and its bodies."""

from __future__ import annotations

from typing import Any

VERSION = "2025-11-25"
MCP_HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "mcp-protocol-version": VERSION,
}


def initialize(n: int = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": n,
        "method": "initialize",
        "params": {
            "protocolVersion": VERSION,
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }


def call(tool: str, arguments: dict[str, Any], n: int = 2) -> dict[str, Any]:
    params = {"name": tool, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}
