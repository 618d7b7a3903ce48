"""The hub's admin tools: what an operator's command asks of the serve that holds a session.

Like the internal tools (``layers/internal.py``) they are answered only through the hub (in
process, or over its private socket, whose owner-only directory is the gate); the MCP layer
never lists them and refuses them as unknown tools. Unlike those, asking one does not mark
the session a shared layer: the operator is not another session.

- ``lambo.forget``: remove concepts and their edges (``writes/forget.py``); acked once its
  intent is in the store, applied in order on the writer thread; the ack carries a receipt
  that ``lambo_stats`` waits on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .forget import FORGET_TOOL

if TYPE_CHECKING:
    from .service import MemoryService

ADMIN_TOOLS = (FORGET_TOOL,)


async def answer_admin(
    service: MemoryService, tool: str, args: Mapping[str, Any]
) -> dict[str, Any]:
    """One admin tool's answer (a CallToolResult dict), from this hub's ``service``."""
    if tool == FORGET_TOOL:
        return (await service.write(FORGET_TOOL, args)).to_json()
    raise ValueError(f"not an admin tool: {tool}")  # pragma: no cover - callers route
