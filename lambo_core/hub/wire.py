"""The hub socket's wire: newline-delimited JSON, one request or answer per line.

A request is ``{"id", "tool", "arguments", "meta"}``; its answer is ``{"id",
"result"}`` or, when refused before any tool ran, ``{"id", "error": {"code",
"message"}}`` with the code and text stdio gives (``mcp/refusals.py``). Lines
are split by the shared framer. Spec: "More than one client on one machine".
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from ..framing import Line, LineSplitter, OversizedLine
from ..mcp.refusals import too_large_text

#: (tool, arguments) -> CallToolResult as its JSON dict
Handler = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
ToolNames = Callable[[], Collection[str]]

MAX_REQUEST = 4 * 1024 * 1024
#: one forwarded request line: the 4 MiB request plus room for the envelope
MAX_LINE = MAX_REQUEST + 64 * 1024
#: one answer line read by a forwarder (answers are bounded by the tools' own limits)
MAX_ANSWER_LINE = 64 * 1024 * 1024
TOO_LARGE = too_large_text(MAX_REQUEST)
CHUNK = 64 * 1024


def valid_id(value: object) -> bool:
    return value is None or (isinstance(value, int | str) and not isinstance(value, bool))


class StreamLines:
    """The lines of a stream, split by the shared framer (``framing.LineSplitter``).

    ``next()`` returns a ``Line`` or an ``OversizedLine`` (discarded unread
    past ``max_line``); it raises ``EOFError`` at the end of input (a line cut
    off by the end is dropped). A chunk is read only when no line is waiting.
    """

    def __init__(self, reader: asyncio.StreamReader, max_line: int) -> None:
        self._reader = reader
        self._splitter = LineSplitter(max_line)
        self._ready: deque[Line | OversizedLine] = deque()

    async def next(self) -> Line | OversizedLine:
        while not self._ready:
            chunk = await self._reader.read(CHUNK)
            if not chunk:
                raise EOFError
            self._ready.extend(self._splitter.feed(chunk))
        return self._ready.popleft()


def refusal(rid: object, code: int, text: str) -> dict[str, Any]:
    """An answer refusing a request before any tool ran: the JSON-RPC error stdio gives."""
    return {"id": rid, "error": {"code": code, "message": text}}


def encode(message: dict[str, Any]) -> bytes:
    try:
        return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
    except UnicodeEncodeError:
        # A lone surrogate a client sent has no UTF-8 form: ASCII JSON escapes it (\\ud800),
        # so the call still reaches the hub, whose text rule refuses the field by name.
        return json.dumps(message, ensure_ascii=True, separators=(",", ":")).encode() + b"\n"
