"""Refusals answered as JSON-RPC errors (not tool results), one text each.

A request refused before any tool runs (an unknown tool, a line over the size limit,
a line that is not a request) gets the same code and text on stdio (``stdio``,
``server``) and on the hub socket (``hub.server``), so a forwarded client sees what
the hub's own client sees. Spec: Errors, Limits.
"""

from __future__ import annotations

import mcp_types as types

from ..errors import ParameterError

MIB = 1024 * 1024

INVALID_PARAMS = types.INVALID_PARAMS
INVALID_REQUEST = types.INVALID_REQUEST
PARSE_ERROR = types.PARSE_ERROR

UNKNOWN_TOOL = "unknown tool; call tools/list for the tools"
PARSE_ERROR_TEXT = "Parse error"
INVALID_REQUEST_TEXT = "Invalid Request"
#: a request whose id is a float, a boolean, null, an object or an array (answered with id null)
INVALID_ID_TEXT = "Invalid Request: id must be a string or an integer"
#: a JSON array of messages: the MCP versions served have no JSON-RPC batches
BATCH_TEXT = "Invalid Request: batches are not supported; send one request per line"
#: JSON nested deeper than the parser reads (no tool argument nests past a few levels)
TOO_DEEP_TEXT = "Invalid Request: nested too deeply to read"


def too_large_text(max_line: int) -> str:
    """The refusal of a request line over ``max_line`` bytes."""
    if max_line % MIB == 0:
        return f"request too large (over {max_line // MIB} MiB)"
    return f"request too large (over {max_line} bytes)"


class ProtocolRefusal(ParameterError):
    """A request refused as a JSON-RPC error ``code`` with ``message``.

    Raised by the hub's forwarder; the MCP layer answers it as that JSON-RPC
    error, and anything else that catches a ``LamboError`` (the CLI) prints
    the message like any other parameter refusal.
    """

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
