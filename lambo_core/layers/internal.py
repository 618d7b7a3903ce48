"""The hub's internal tools: what a layered session asks of a layer beyond the public tools.

They are answered only through the hub (the serve that holds a session, in process or over
its private socket); the MCP layer never lists them and refuses them as unknown tools. Each
takes and returns JSON, so a layer answers alike wherever it runs:

- ``lambo.layer_call``: a public read tool, answered without the layer's own receipts
  (those belong to the layer's own address);
- ``lambo.layer_recall``: one recall's parts before rendering, for the merged recall;
- ``lambo.layer_write``: a write through another session (``via``), whose receipt only
  that session hands out;
- ``lambo.layer_resolve``: which of some references name one concept here;
- ``lambo.layer_receipts`` / ``lambo.layer_receipt``: the receipts of writes made through
  another session, for its piggyback and its lambo_stats;
- ``lambo.layer_accessed``: which of its concepts a merged recall showed (their access
  counts feed the base score, as a recall of the layer itself would).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from ..admin_tools import ADMIN_TOOLS
from ..derive_image import TOOL as IMAGE_TOOL
from ..errors import LamboError, ParameterError
from ..receipts import render_line, to_structured
from ..service import SERVED_TOOLS, ToolResult
from ..writes.cross_session import resolve_refs
from .texts import stopped_during_call

if TYPE_CHECKING:
    from ..service import MemoryService

LAYER_CALL = "lambo.layer_call"
LAYER_RECALL = "lambo.layer_recall"
LAYER_WRITE = "lambo.layer_write"
LAYER_RESOLVE = "lambo.layer_resolve"
LAYER_RECEIPTS = "lambo.layer_receipts"
LAYER_RECEIPT = "lambo.layer_receipt"
LAYER_ACCESSED = "lambo.layer_accessed"
INTERNAL_TOOLS = (
    LAYER_CALL,
    LAYER_RECALL,
    LAYER_WRITE,
    LAYER_RESOLVE,
    LAYER_RECEIPTS,
    LAYER_RECEIPT,
    LAYER_ACCESSED,
)
WRITE_TOOLS = ("lambo_derive", IMAGE_TOOL, "lambo_record_action")


def socket_tool_names() -> list[str]:
    """What a hub's socket answers: the public tools, the internal ones and the admin ones
    (``admin_tools.py``)."""
    return [*SERVED_TOOLS, IMAGE_TOOL, *INTERNAL_TOOLS, *ADMIN_TOOLS]


def _text(args: Mapping[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str):
        raise ParameterError(f"{key} must be a string")
    return value


def _object(args: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = args.get(key)
    if not isinstance(value, dict):
        raise ParameterError(f"{key} must be an object")
    return value


async def answer_internal(
    service: MemoryService, tool: str, args: Mapping[str, Any]
) -> dict[str, Any]:
    """One internal tool's answer (a CallToolResult dict), from this hub's ``service``.

    Only a session attached as another's layer is asked these: a holder that opened it
    as a plain session marks it a shared layer on the first one (so its writes refuse
    bare relative paths from then on, whoever attached it)."""
    try:
        if not service.session.shared_layer:
            await anyio.to_thread.run_sync(service.session.mark_shared_layer)
        if tool == LAYER_CALL:
            name = _text(args, "tool")
            if name not in SERVED_TOOLS or name in WRITE_TOOLS:
                raise ParameterError("tool must name a read tool")
            result = await service.call(name, _object(args, "arguments"), piggyback=False)
            return result.to_json(ledger=True)  # on to the layered session's serve
        if tool == LAYER_WRITE:
            name = _text(args, "tool")
            if name not in WRITE_TOOLS:
                raise ParameterError("tool must name a write tool")
            foreign = args.get("foreign") or {}
            if not isinstance(foreign, dict):
                raise ParameterError("foreign must be an object")
            via = _text(args, "via")
            receipts = service.session.receipts
            if receipts.closing:  # this layer is stopping: nothing can be admitted
                raise stopped_during_call(service.session.name, via)
            written = await service.write(
                name, _object(args, "arguments"), via=via, foreign=foreign
            )
            dropped = (written.structured or {}).get("receipt_state") == "dropped"
            if dropped and receipts.closing:  # it began stopping while this write was admitted
                raise stopped_during_call(service.session.name, via)
            return written.to_json()
        structured = await _structured(service, tool, args)
    except LamboError as exc:
        return ToolResult.error(exc.render()).to_json()
    return ToolResult(texts=[""], structured=structured).to_json()


async def _structured(service: MemoryService, tool: str, args: Mapping[str, Any]) -> dict[str, Any]:
    if tool == LAYER_RECALL:
        parts = await service.recall_parts(_object(args, "arguments"))
        return parts.to_json()
    if tool == LAYER_RESOLVE:
        refs = args.get("refs")
        if not isinstance(refs, list):
            raise ParameterError("refs must be an array")
        session = service.session

        def found() -> list[str]:
            with session.index.lock:
                return resolve_refs(session.index.graph, refs)

        return {"found": await anyio.to_thread.run_sync(found)}
    if tool == LAYER_ACCESSED:
        node_ids = args.get("node_ids")
        if not isinstance(node_ids, list) or not all(isinstance(n, str) for n in node_ids):
            raise ParameterError("node_ids must be an array of strings")
        session = service.session

        def record() -> None:
            with session.index.lock:  # the graph is read under its lock, off the event loop
                graph = session.index.graph
                session.access_counts.record(n for n in node_ids if graph.concept(n) is not None)

        await anyio.to_thread.run_sync(record)
        return {"recorded": True}
    book = service.session.receipts
    agent, via = _text(args, "agent_id"), _text(args, "via")
    if tool == LAYER_RECEIPTS:
        limit = args.get("limit", 0)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            raise ParameterError("limit must be a nonnegative integer")
        exclude = args.get("exclude")
        exclude = exclude if isinstance(exclude, str) else None
        views = book.take_piggyback(agent, via, limit, exclude=exclude) if limit else []
        return {
            "waiting": book.waiting(agent, via, exclude=exclude),
            "receipts": [{"line": render_line(v), "receipt": to_structured(v)} for v in views],
        }
    if tool == LAYER_RECEIPT:
        receipt_id = _text(args, "receipt")
        if not book.issued_here(receipt_id):
            return {"receipt": None}
        wait_ms = args.get("wait_ms", 0)
        if not isinstance(wait_ms, int) or isinstance(wait_ms, bool) or wait_ms < 0:
            raise ParameterError("wait_ms must be a nonnegative integer")
        if wait_ms:
            view = await book.wait_async(receipt_id, agent, via, wait_ms)
        else:
            view = await anyio.to_thread.run_sync(book.lookup, receipt_id, agent, via)
        return {"receipt": {"line": render_line(view), "receipt": to_structured(view)}}
    raise ParameterError(f"unknown internal tool {tool}")
