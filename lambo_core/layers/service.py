"""A layered session: its own service and the layers it reads and writes, by ``scope``.

Every public call of a layered session comes here. ``scope`` is checked against the
session and its layers and removed; the call then goes to the session's own service or to
a layer (through the internal tools, wherever the layer's holder runs). A recall without
scope reads the session and every layer and merges them. Each response carries the
caller's settled receipts from the session and from the writes it sent into layers, at
most 8 in all. Spec: lambo_recall, "Layered sessions"; lambo_derive, "Writing to a layer".
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from ..args import check_scope
from ..context import TRUNCATED_SCOPED_LINE
from ..derive_image import TOOL as IMAGE_TOOL
from ..errors import LamboError, internal_fault
from ..hub.answers import HUB_SILENT_TEXT, tool_error
from ..reach import reachable
from ..recall.by_vector import recall_by
from ..recall.merge import NOT_SEARCHED_WARNING, merge_recall, shown_ids
from ..recall.parts import PartsError, RecallParts
from ..receipts import PIGGYBACK_MAX, render_line, to_structured
from ..receipts.layered import fair_shares, layer_down_view
from ..receipts.states import ReceiptState, not_ours
from ..service import SERVED_TOOLS, ToolResult, UnknownTool, stats_arguments
from ..writes.cross_session import references_of, resolve_refs
from .handle import LayerHandle, LayerUnavailable
from .internal import (
    LAYER_ACCESSED,
    LAYER_CALL,
    LAYER_RECALL,
    LAYER_RECEIPT,
    LAYER_RECEIPTS,
    LAYER_RESOLVE,
    LAYER_WRITE,
    WRITE_TOOLS,
)
from .texts import layer_hit_warning, not_serving, stopped_during_call

if TYPE_CHECKING:
    from ..service import MemoryService

log = logging.getLogger(__name__)

#: the tools that take scope: every one but lambo_stats (its receipt finds a layer's write)
SCOPED_TOOLS = (frozenset(SERVED_TOOLS) | {IMAGE_TOOL}) - {"lambo_stats"}


class LayeredService:
    """The session's own ``MemoryService`` and its attached ``LayerHandle``s."""

    def __init__(
        self,
        service: MemoryService,
        layers: Sequence[LayerHandle],
        *,
        floors: Mapping[str, float],
    ) -> None:
        self.service = service
        self.name = service.session.name
        self.layers = {handle.name: handle for handle in layers}
        self.order = tuple(handle.name for handle in layers)
        self.floors = dict(floors)

    @property
    def visible(self) -> tuple[str, ...]:
        """The layers this call may reach: every one, unless the caller's HTTP credential
        reaches fewer. The others are as if not configured: a scope naming one is refused
        as unknown, and merged recall, receipts and references never look into it."""
        return reachable(self.order)

    async def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """One public call's answer (a CallToolResult dict); a fault is an internal error
        result with the detail logged, as the session's own service answers one."""
        try:
            return await self._call(tool, arguments)
        except (UnknownTool, anyio.get_cancelled_exc_class()):
            raise
        except Exception as exc:
            log.exception("%s failed in layered session %s", tool, self.name)
            return ToolResult.error(internal_fault(repr(exc)).render()).to_json()

    async def _call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(arguments, dict):
            return (await self.service.call(tool, arguments)).to_json()
        if tool == "lambo_stats":
            result = await self._stats(arguments)
        elif tool not in SCOPED_TOOLS:
            return (await self.service.call(tool, arguments)).to_json()
        else:
            try:
                target = check_scope(
                    arguments.get("scope"),
                    self.name,
                    layers=self.visible,
                    writing=tool in WRITE_TOOLS,
                )
            except LamboError as exc:
                return ToolResult.error(exc.render()).to_json()
            args = {k: v for k, v in arguments.items() if k != "scope"}
            try:
                if target is None or target == self.name:
                    result = await self._own(tool, args, scoped=target is not None)
                else:
                    result = await self._in_layer(self.layers[target], tool, args)
            except LamboError as exc:
                return ToolResult.error(exc.render()).to_json()
        if not result.get("isError"):
            await self._piggyback(arguments, result)
        return result

    # -- the session itself -------------------------------------------------------------
    async def _own(self, tool: str, args: dict[str, Any], *, scoped: bool) -> dict[str, Any]:
        service = self.service
        if tool == "lambo_recall":
            by = recall_by(args)
            if scoped or by is not None:  # the session alone, its hits still naming it
                answer = await service.call(tool, args, piggyback=False)
                result = answer.to_json(ledger=True)  # the serve pops the ledger's part
                result = _with_session(result, self.name)
                if not scoped and by is not None:
                    _not_searched(result, by, self.name, self.visible)
                return result
            return await self._merged_recall(args)
        if tool in WRITE_TOOLS:
            foreign = await self._held_by_layers(tool, args)
            return (await service.write(tool, args, foreign=foreign)).to_json()
        return (await service.call(tool, args, piggyback=False)).to_json()

    async def _held_elsewhere(self, target: str, tool: str, args: dict[str, Any]) -> dict[str, str]:
        """Which of a write into layer ``target``'s references this session or another
        layer holds: the session first, then the layers in order."""
        refs = references_of(tool, args)
        if not refs:
            return {}
        session = self.service.session

        def ours() -> list[str]:
            with session.index.lock:
                return resolve_refs(session.index.graph, refs)

        held = dict.fromkeys(await anyio.to_thread.run_sync(ours), self.name)
        for ref, name in (await self._held_by_layers(tool, args, skip=target)).items():
            held.setdefault(ref, name)
        return held

    async def _held_by_layers(
        self, tool: str, args: dict[str, Any], *, skip: str | None = None
    ) -> dict[str, str]:
        """Which of this write's references a layer holds (so that one matching nothing
        here is refused as cross-session rather than as unknown)."""
        refs = references_of(tool, args)
        if not refs:
            return {}
        held: dict[str, str] = {}
        for name in self.visible:
            if name == skip:
                continue
            try:
                answer = await self.layers[name].call(LAYER_RESOLVE, {"refs": refs}, probe=True)
            except LayerUnavailable:
                continue  # a layer not serving holds nothing this call can see
            for ref in _structured(answer).get("found", []):
                held.setdefault(ref, name)
        return held

    async def _merged_recall(self, args: dict[str, Any]) -> dict[str, Any]:
        own: RecallParts | None = None
        own_error: dict[str, Any] | None = None
        layer_parts: dict[str, RecallParts | None] = {}
        refused: dict[str, str] = {}  # what a layer refused, said once the session accepted

        async def read_own() -> None:
            nonlocal own, own_error
            try:
                own = await self.service.recall_parts(args)
            except LamboError as exc:
                own_error = ToolResult.error(exc.render()).to_json()

        async def read_layer(name: str) -> None:
            layer_parts[name] = await self._layer_parts(name, args, refused)

        order = self.visible
        async with anyio.create_task_group() as group:
            group.start_soon(read_own)
            for name in order:
                group.start_soon(read_layer, name)
        if own_error is not None:
            return own_error
        for name, text in refused.items():
            log.warning("layer %s refused a merged recall: %s", name, text)
        assert own is not None
        merged = merge_recall(
            self.name,
            own,
            [(name, layer_parts.get(name)) for name in order],
            top_k=own.top_k,
            max_tokens=own.max_tokens,
            floors=self.floors,
        )
        # each session counts the accesses of its hits shown, as its own recall would
        self.service.session.access_counts.record(shown_ids(merged, self.name))
        for name in order:
            shown = shown_ids(merged, name)
            if shown and layer_parts.get(name) is not None:
                with contextlib.suppress(LayerUnavailable):
                    await self.layers[name].call(LAYER_ACCESSED, {"node_ids": shown}, probe=True)
        answer = ToolResult(
            texts=[merged.context], structured=merged.structured(), ledger=merged.ledger()
        )
        return answer.to_json(ledger=True)

    async def _layer_parts(
        self, name: str, args: dict[str, Any], refused: dict[str, str]
    ) -> RecallParts | None:
        try:
            answer = await self.layers[name].call(LAYER_RECALL, {"arguments": args}, probe=True)
        except LayerUnavailable:
            return None
        if answer.get("isError"):  # the session's own refusal of the call says why
            refused[name] = _first_text(answer)
            return None
        try:
            return RecallParts.from_json(_structured(answer))
        except PartsError as exc:  # a holder of another build: its parts are not ours
            log.warning("layer %s answered recall parts this serve cannot read: %s", name, exc)
            return None

    # -- a layer ----------------------------------------------------------------------
    async def _in_layer(
        self, handle: LayerHandle, tool: str, args: dict[str, Any]
    ) -> dict[str, Any]:
        if tool in WRITE_TOOLS:
            return await self._write_layer(handle, tool, args)
        try:
            result = await handle.call(LAYER_CALL, {"tool": tool, "arguments": args})
        except LayerUnavailable as exc:
            raise not_serving(handle.name, self.name, exc.state) from None
        if tool == "lambo_recall" and not result.get("isError"):
            result = _with_session(result, handle.name)
            structured = result.get("structuredContent")
            if isinstance(structured, dict):
                structured.setdefault("warnings", []).insert(0, layer_hit_warning(handle.name))
                _scope_the_marker(result, handle.name)
        return result

    async def _write_layer(
        self, handle: LayerHandle, tool: str, args: dict[str, Any]
    ) -> dict[str, Any]:
        foreign = await self._held_elsewhere(handle.name, tool, args)
        serving = handle.state == "serving"
        try:
            result = await handle.call(
                LAYER_WRITE, {"tool": tool, "arguments": args, "via": self.name, "foreign": foreign}
            )
        except LayerUnavailable as exc:
            if exc.may_have_acted:
                return tool_error(HUB_SILENT_TEXT.format(secs=handle.serve.hub.forward_timeout_s))
            if serving:
                raise stopped_during_call(handle.name, self.name) from None
            raise not_serving(handle.name, self.name, exc.state) from None
        return result

    # -- receipts ---------------------------------------------------------------------
    async def _piggyback(self, arguments: Mapping[str, Any], result: dict[str, Any]) -> None:
        """At most 8 settled receipts across the session and its layers, each with
        receipts waiting getting at least one; the rest wait for the next response."""
        agent = arguments.get("agent_id")
        if not isinstance(agent, str):
            return
        own_receipt = _receipt_of(result)
        book = self.service.session.receipts
        sources = [self.name]
        waiting = [book.waiting(agent, self.name, exclude=own_receipt)]
        # Every serving layer is asked, not only those written into through this service:
        # a layer's book outlives this session's hub (a restart, a takeover), and what it
        # holds for this session is still owed on the next response here.
        for name in self.visible:
            if self.layers[name].state == "serving":
                answer = await self._receipts(name, agent, 0, own_receipt)
                sources.append(name)
                waiting.append(int(answer.get("waiting", 0)) if answer else 0)
        lines: list[str] = []
        entries: list[dict[str, Any]] = []
        for name, share in zip(sources, fair_shares(waiting, PIGGYBACK_MAX), strict=True):
            if not share:
                continue
            if name == self.name:
                views = book.take_piggyback(agent, self.name, share, exclude=own_receipt)
                lines.extend(render_line(v) for v in views)
                entries.extend(to_structured(v) for v in views)
                continue
            answer = await self._receipts(name, agent, share, own_receipt)
            for item in (answer or {}).get("receipts", []):
                lines.append(str(item["line"]))
                entries.append(dict(item["receipt"]))
        if not lines:
            return
        result.setdefault("content", []).append(
            {"type": "text", "text": "\n".join(["write receipts:", *lines])}
        )
        structured = result.get("structuredContent")
        if isinstance(structured, dict):
            structured["write_receipts"] = entries

    async def _receipts(
        self, layer: str, agent: str, limit: int, exclude: str | None
    ) -> dict[str, Any] | None:
        args: dict[str, Any] = {"agent_id": agent, "via": self.name, "limit": limit}
        if exclude is not None:
            args["exclude"] = exclude
        try:
            return _structured(await self.layers[layer].call(LAYER_RECEIPTS, args, probe=True))
        except LayerUnavailable:
            return None

    async def _stats(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """lambo_stats: a receipt of a write sent into a layer is answered from that layer's
        book; one no serving book knows, while a layer is down, is pending."""
        service = self.service
        try:  # a call the tool refuses is refused before any book is asked (which delivers)
            agent, receipt, wait_ms = stats_arguments(arguments)
        except LamboError as exc:
            return ToolResult.error(exc.render()).to_json()
        if receipt is None or service.session.receipts.issued_here(receipt):
            return (await service.call("lambo_stats", arguments, piggyback=False)).to_json()
        if await self._of_hidden_layer(receipt):
            view = not_ours(receipt.strip(), ReceiptState.RESTART_LOST)
            return await self._stats_with(
                arguments, {"line": render_line(view), "receipt": to_structured(view)}
            )
        down: list[str] = []
        for name in self.visible:
            ask: dict[str, Any] = {"agent_id": agent, "via": self.name, "receipt": receipt}
            if wait_ms:
                ask["wait_ms"] = wait_ms
            try:
                answer = _structured(await self.layers[name].call(LAYER_RECEIPT, ask, probe=True))
            except LayerUnavailable:
                down.append(name)
                continue
            if answer.get("receipt"):
                return await self._stats_with(arguments, answer["receipt"])
        result = (await service.call("lambo_stats", arguments, piggyback=False)).to_json()
        structured = result.get("structuredContent") or {}
        unknown = (structured.get("receipt") or {}).get("state") == "restart_lost"
        if down and unknown:
            view = layer_down_view(receipt, down[0])
            return await self._stats_with(
                arguments, {"line": render_line(view), "receipt": to_structured(view)}
            )
        return result

    async def _of_hidden_layer(self, receipt: str) -> bool:
        """Whether ``receipt`` is of a write into a layer this caller does not reach: it is
        then not known here, as to a caller of a session without that layer (the store's
        durable intent would answer it from this session's own book otherwise)."""
        hidden = set(self.order) - set(self.visible)
        if not hidden:
            return False
        store = self.service.session.store
        try:
            intent = await anyio.to_thread.run_sync(store.get_intent, receipt.strip())
        except LamboError:
            return False  # unreadable: the session's own answer says so
        return intent is not None and intent.session in hidden

    async def _stats_with(self, arguments: dict[str, Any], found: dict[str, Any]) -> dict[str, Any]:
        """The session's stats with a receipt another book answered in front."""
        rest = {k: v for k, v in arguments.items() if k not in ("receipt", "wait_ms")}
        result = (await self.service.call("lambo_stats", rest, piggyback=False)).to_json()
        if result.get("isError"):
            return result
        content = result["content"]
        content[0]["text"] = f"{found['line']}\n{content[0]['text']}"
        result["structuredContent"]["receipt"] = dict(found["receipt"])
        return result


def _structured(answer: dict[str, Any]) -> dict[str, Any]:
    structured = answer.get("structuredContent")
    return structured if isinstance(structured, dict) else {}


def _first_text(answer: dict[str, Any]) -> str:
    content = answer.get("content") or [{}]
    return str(content[0].get("text", ""))


def _receipt_of(result: dict[str, Any]) -> str | None:
    receipt = _structured(result).get("receipt")
    return receipt if isinstance(receipt, str) else None


_MARKER = re.compile(
    r"\[truncated: (\d+) tokens left out; lambo_inspect ([0-9a-f]{8}) for the full concept\]$"
)


def _scope_the_marker(result: dict[str, Any], layer: str) -> None:
    """A layer's block cut by the budget tells lambo_inspect to pass the layer's scope, as
    its id belongs to the layer (spec L230): the layer answered as a plain recall."""
    hits = _structured(result).get("hits", [])
    if not any(isinstance(h, dict) and h.get("truncated_in_context") for h in hits):
        return
    content = result.get("content") or []
    if not content or not isinstance(content[0].get("text"), str):
        return
    content[0]["text"] = _MARKER.sub(
        lambda m: TRUNCATED_SCOPED_LINE.format(n=m.group(1), id=m.group(2), scope=layer),
        content[0]["text"],
    )
    structured = result.get("structuredContent")
    if isinstance(structured, dict) and isinstance(structured.get("context"), str):
        structured["context"] = content[0]["text"]


def _not_searched(result: dict[str, Any], by: str, session: str, layers: Sequence[str]) -> None:
    """A recall by image or vector without scope reads only the session: say so, first."""
    structured = result.get("structuredContent")
    if layers and not result.get("isError") and isinstance(structured, dict):
        line = NOT_SEARCHED_WARNING.format(by=by, session=session, layers=", ".join(layers))
        structured.setdefault("warnings", []).insert(0, line)


def _with_session(result: dict[str, Any], session: str) -> dict[str, Any]:
    """Every hit of a layered session names the session it is from."""
    for hit in _structured(result).get("hits", []):
        if isinstance(hit, dict):
            hit["session"] = session
    return result
