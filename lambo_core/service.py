"""MemoryService: (tool name, arguments) -> ToolResult, for the MCP layer and the CLI alike.

One service per held session. Each tool's handler validates its own
arguments (in the spec's order, with the spec's texts) and raises a
``LamboError`` to refuse; the service turns that into an error result and
logs any internal detail. Successful results carry the caller's settled write
receipts (at most 8) as a ``write receipts:`` text block and as
``structuredContent.write_receipts``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio

from .args import check_arguments, clamp_int, require
from .canon.history import CanonHistory
from .canon.rules import CanonRules
from .config import Config
from .daemon import Daemon
from .derive_image import TOOL as IMAGE_TOOL
from .derive_image import ImageSettings, lists_image_tool, read_image_call
from .errors import LamboError, ParameterError, internal_fault
from .gc.sweep import gc_stats
from .inspect import run_inspect
from .limits import WAIT_MS_MAX
from .locks import LockTable, run_reserve
from .model import Status
from .recall import Ranking, RecallDefaults, recall
from .recall.parts import RecallParts
from .recall.pipeline import recall_parts
from .receipts import ReceiptView, render_line, render_piggyback, to_structured
from .saints import run_saints
from .session import Session, describe_contract
from .stale import run_stale
from .text import check_agent_id, check_string
from .writes import WritePipeline
from .writes.outcome import Ack

log = logging.getLogger(__name__)


#: the key under which an in-process answer carries ``ToolResult.ledger`` to the serve that
#: writes its --ledger line (across the hub wire too); ``Serve.__call__`` always pops it, so
#: it never reaches an MCP client
LEDGER_KEY = "_lambo_ledger"


@dataclass
class ToolResult:
    """One tool call's answer: text blocks, structured content, and whether it is an error.

    ``ledger`` is what only the --ledger line reads (a recall's annotations and fusion per
    hit, spec: lambo_recall); the client never gets it.
    """

    texts: list[str]
    structured: dict[str, Any] | None
    is_error: bool = False
    ledger: dict[str, Any] | None = None

    @classmethod
    def error(cls, message: str) -> ToolResult:
        return cls(texts=[message], structured=None, is_error=True)

    def to_json(self, *, ledger: bool = False) -> dict[str, Any]:
        """The CallToolResult wire form (also what the hub forwards); with ``ledger``, the
        ledger's part under ``LEDGER_KEY``, for a serve's own paths that pop it."""
        out: dict[str, Any] = {
            "content": [{"type": "text", "text": t} for t in self.texts],
            "isError": self.is_error,
        }
        if self.structured is not None:
            out["structuredContent"] = self.structured
        if ledger and self.ledger is not None:
            out[LEDGER_KEY] = self.ledger
        return out


Handler = Callable[[Mapping[str, Any]], Awaitable[ToolResult]]


# The tools this service answers, in the order they are listed.
SERVED_TOOLS = (
    "lambo_recall",
    "lambo_derive",
    "lambo_record_action",
    "lambo_reserve",
    "lambo_inspect",
    "lambo_stale",
    "lambo_saints",
    "lambo_stats",
)


def listed_tools(image_tool: bool) -> list[str]:
    """The tools a server lists: the served ones, and lambo_derive_image (after
    lambo_derive) where it can work (``derive_image.lists_image_tool``)."""
    names = list(SERVED_TOOLS)
    if image_tool:
        names.insert(names.index("lambo_derive") + 1, IMAGE_TOOL)
    return names


class UnknownTool(LamboError):
    """A tool name this server does not serve (the MCP layer answers -32602)."""


class MemoryService:
    """The tools of one session, served from this process."""

    def __init__(
        self,
        session: Session,
        pipeline: WritePipeline,
        config: Config,
        daemon: Daemon | None = None,
    ) -> None:
        self.session = session
        self.pipeline = pipeline
        self.config = config
        self.daemon = daemon  # the session's background cycles; None: none runs here
        self._recall_defaults = RecallDefaults.from_config(config)
        self._ranking = Ranking.from_config(config)
        # [canonization], read once: the daemon's rules when one runs here
        self._canon_rules = daemon.rules if daemon is not None else CanonRules.from_config(config)
        self._edge_min_age = self._canon_rules.edge_min_age_s
        self._policy = self._canon_rules.policy.capitalize()
        # the demotion history recall and inspect read: the daemon's, which its cycles record
        self._canon_history = (
            daemon.history if daemon is not None else CanonHistory(session, self._canon_rules)
        )
        self.locks = LockTable(session.clock)  # advisory, in RAM: gone with the hub
        self._image_settings = ImageSettings.from_config(config)
        self._handlers: dict[str, Handler] = {
            "lambo_recall": self._recall,
            "lambo_derive": self._derive,
            "lambo_record_action": self._record_action,
            IMAGE_TOOL: self._derive_image,
            "lambo_reserve": self._off_loop(lambda a: run_reserve(session, a, self.locks)),
            "lambo_inspect": self._off_loop(
                lambda a: run_inspect(
                    session,
                    a,
                    promotion_policy=self._policy,
                    edge_min_age=self._edge_min_age,
                    canon_history=self._canon_history,
                )
            ),
            "lambo_stale": self._off_loop(
                lambda a: run_stale(session, a, edge_min_age=self._edge_min_age)
            ),
            "lambo_saints": self._off_loop(lambda a: run_saints(session, a)),
            "lambo_stats": self._stats,
        }

    @staticmethod
    def _off_loop(run: Callable[[Mapping[str, Any]], tuple[str, dict[str, Any]]]) -> Handler:
        """A synchronous (text, structured) tool run in a worker thread, off the event loop."""

        async def handler(args: Mapping[str, Any]) -> ToolResult:
            text, structured = await anyio.to_thread.run_sync(run, args)
            return ToolResult(texts=[text], structured=structured)

        return handler

    def tool_names(self) -> list[str]:
        image_tool = lists_image_tool(self._image_settings, self.session.modalities)
        return [name for name in listed_tools(image_tool) if name in self._handlers]

    async def call(self, tool: str, arguments: object, *, piggyback: bool = True) -> ToolResult:
        """Answer one call; with ``piggyback`` the caller's settled receipts ride along
        (False: a layered session's service gathers them across its layers itself)."""
        handler = self._handlers.get(tool)
        if handler is None:
            raise UnknownTool(f"unknown tool {tool!r}")
        result = await self._answer(tool, arguments, handler)
        if piggyback and not result.is_error and isinstance(arguments, Mapping):
            self._piggyback(arguments, result)
        return result

    async def write(
        self,
        tool: str,
        arguments: object,
        *,
        via: str | None = None,
        foreign: Mapping[str, str] | None = None,
    ) -> ToolResult:
        """A write sent through another session (``via``: its receipt is answered only
        there), or checked against the references ``foreign`` says other sessions hold.
        No receipts ride along: the session written through gathers its own."""

        async def submit(args: Mapping[str, Any]) -> ToolResult:
            if tool == IMAGE_TOOL:
                ack = await anyio.to_thread.run_sync(self._submit_image, args, via, foreign)
            else:
                ack = await anyio.to_thread.run_sync(
                    partial(self.pipeline.submit, tool, args, via=via, foreign=foreign)
                )
            return ToolResult(texts=[ack.text], structured=ack.structured)

        return await self._answer(tool, arguments, submit)

    async def recall_parts(self, arguments: Mapping[str, Any]) -> RecallParts:
        """One recall's parts before rendering (a layered session merges several)."""
        return await anyio.to_thread.run_sync(
            lambda: recall_parts(self.session, arguments, **self._recall_context())
        )

    async def _answer(self, tool: str, arguments: object, handler: Handler) -> ToolResult:
        """``handler``'s result, or its refusal as an error result (internals logged)."""
        try:
            if not isinstance(arguments, Mapping):
                raise ParameterError(f"the arguments of {tool} must be an object")
            return await handler(arguments)
        except LamboError as exc:
            if exc.detail:
                log.warning("%s on %s: %s", exc.kind.value, tool, exc.detail)
            return ToolResult.error(exc.render())
        except Exception as exc:
            log.exception("%s failed", tool)
            return ToolResult.error(internal_fault(repr(exc)).render())

    def _piggyback(self, arguments: Mapping[str, Any], result: ToolResult) -> None:
        agent = arguments.get("agent_id")
        if not isinstance(agent, str):
            return
        own = (result.structured or {}).get("receipt")
        views = self.session.receipts.take_piggyback(
            agent, self.session.name, exclude=own if isinstance(own, str) else None
        )
        if not views:
            return
        result.texts.append(render_piggyback(views))
        if result.structured is not None:
            result.structured["write_receipts"] = [to_structured(v) for v in views]

    # -- reads --------------------------------------------------------------------------
    async def _recall(self, args: Mapping[str, Any]) -> ToolResult:
        # Off the event loop: the query embedding runs the model.
        result = await anyio.to_thread.run_sync(
            lambda: recall(self.session, args, **self._recall_context())
        )
        return ToolResult(
            texts=[result.context], structured=result.structured(), ledger=result.ledger()
        )

    def _recall_context(self) -> dict[str, Any]:
        """What a recall of this session reads beside its arguments."""
        return {
            "defaults": self._recall_defaults,
            "ranking": self._ranking,
            "holder": self.locks.holder,
            "listing": self.daemon.listing if self.daemon is not None else None,
            "canon_history": self._canon_history,
        }

    # -- writes -------------------------------------------------------------------------
    # Admission takes the index lock and commits the intent to SQLite, both of which
    # can wait behind the writer: off the event loop, so one slow write stalls no one.
    async def _derive(self, args: Mapping[str, Any]) -> ToolResult:
        ack = await anyio.to_thread.run_sync(self.pipeline.submit, "lambo_derive", args)
        return ToolResult(texts=[ack.text], structured=ack.structured)

    async def _record_action(self, args: Mapping[str, Any]) -> ToolResult:
        ack = await anyio.to_thread.run_sync(self.pipeline.submit, "lambo_record_action", args)
        return ToolResult(texts=[ack.text], structured=ack.structured)

    async def _derive_image(self, args: Mapping[str, Any]) -> ToolResult:
        ack = await anyio.to_thread.run_sync(self._submit_image, args, None, None)
        return ToolResult(texts=[ack.text], structured=ack.structured)

    def _submit_image(
        self, args: Mapping[str, Any], via: str | None, foreign: Mapping[str, str] | None
    ) -> Ack:
        """lambo_derive_image: read, checked and embedded first, with no lock held (the
        model may take a while), then admitted and acked as any write."""
        image_call = read_image_call(self.session, args, self._image_settings)
        return self.pipeline.submit(
            IMAGE_TOOL, args, via=via, foreign=foreign, image_call=image_call
        )

    # -- lambo_stats ----------------------------------------------------------------------
    async def _stats(self, args: Mapping[str, Any]) -> ToolResult:
        agent, receipt_id, wait_ms = stats_arguments(args)
        receipt: ReceiptView | None = None
        if receipt_id is not None:
            book = self.session.receipts
            if wait_ms > 0:
                receipt = await book.wait_async(receipt_id, agent, self.session.name, wait_ms)
            else:
                receipt = await anyio.to_thread.run_sync(
                    book.lookup, receipt_id, agent, self.session.name
                )
        # Session figures are read after any wait, so they never disagree with the receipt.
        payload = await anyio.to_thread.run_sync(self.stats_payload)
        lines = [self.stats_summary(payload)]
        if receipt is not None:
            payload["receipt"] = to_structured(receipt)
            lines.insert(0, render_line(receipt))
        return ToolResult(texts=["\n".join(lines)], structured=payload)

    def stats_payload(self) -> dict[str, Any]:
        session = self.session
        with session.index.lock:
            graph = session.index.graph
            concepts = len(graph)
            edges = graph.edge_count
            interactions = graph.interaction_count
            canonical = graph.status_count(Status.CANONICAL)
        payload: dict[str, Any] = {
            "session": session.name,
            # Writes happen in the hub: these figures are the holder process's.
            "holder_pid": os.getpid(),
            "node_count": concepts + interactions,
            "concept_count": concepts,
            "edge_count": edges,
            "interaction_count": interactions,
            # Measured by the writer: the write-behind's age, its drops, store refusals.
            **self.pipeline.health_keys(),
            "promotion_policy": self._policy,
            # the daemon's own counters; 0 where no daemon runs (no cycle has run)
            "canonization_cycles": 0,
            "canonization_promotions": 0,
            "canonization_demotions": 0,
            "canonical_count": canonical,
            "embedding_contract": dict(session.contract),
            "embedding_modalities": session.modalities,
            "embedder_state": self._embedder_state(),
            "gc": gc_stats(session),
        }
        if self.daemon is not None:
            payload.update(self.daemon.counters())
        payload.update(self.pipeline.stats())
        return payload

    def _embedder_state(self) -> str:
        plan = self.session.plan
        if plan.problem is not None:
            return "missing"
        if plan.lazy is None:
            return "none"
        if plan.lazy.ready:
            return "ready"
        return "failed" if plan.lazy.error is not None else "loading"

    @staticmethod
    def stats_summary(p: dict[str, Any]) -> str:
        contract = p["embedding_contract"]
        modalities = ", ".join(p["embedding_modalities"]) or "-"
        return "\n".join(
            [
                f"session {p['session']}: {p['concept_count']} concepts, {p['edge_count']} edges, "
                f"{p['interaction_count']} interactions; flush_lag_ms {p['flush_lag_ms']:.0f}, "
                f"dead_lettered {p['dead_lettered']}, degraded {str(p['degraded']).lower()}",
                f"write queue: {p['write_queue_outstanding']} outstanding, "
                f"{p['write_queue_accepted']} accepted, {p['write_queue_applied']} applied, "
                f"{p['write_queue_failed']} failed, {p['write_queue_dropped']} dropped; "
                f"replayed {p['write_queue_replayed']}, owed {p['write_queue_replay_owed']}",
                f"canonization: promotion_policy {p['promotion_policy']}, "
                f"{p['canonical_count']} canonical, {p['canonization_cycles']} cycles",
                gc_line(p["gc"]),
                # The summary ends with the embedding facts (the spec's last line).
                f"embedding: {describe_contract(dict(contract))}; modalities {modalities}; "
                f"embedder {p['embedder_state']}",
            ]
        )


def stats_arguments(args: Mapping[str, Any]) -> tuple[str, str | None, int]:
    """lambo_stats' arguments, checked: its agent_id, its receipt (if any) and its wait_ms
    (0 when omitted, clamped to WAIT_MS_MAX)."""
    call = check_arguments("lambo_stats", args, ("agent_id", "receipt", "wait_ms"))
    agent = check_agent_id(require(call, "agent_id"))
    receipt_id = (
        check_string("receipt", call["receipt"], max_bytes=128) if "receipt" in call else None
    )
    wait_ms = check_wait_ms(call["wait_ms"]) if "wait_ms" in call else 0
    return agent, receipt_id, wait_ms


def check_wait_ms(value: object) -> int:
    """wait_ms: below 0 is refused with its bound; above 34000 is clamped, not refused."""
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        raise ParameterError(
            f"wait_ms must be an integer in 0..={WAIT_MS_MAX} (a larger value is clamped to "
            f"{WAIT_MS_MAX})"
        )
    return clamp_int("wait_ms", value, 0, WAIT_MS_MAX)


def gc_line(gc: dict[str, Any]) -> str:
    """The stats summary's ``gc:`` line: the clock, and the last sweep's headline figures."""
    line = f"gc: last_gc_at {gc['last_gc_at'] or 'never'}, last_gc_epoch {gc['last_gc_epoch']}"
    sweep = gc.get("last_sweep")
    if sweep:
        line += (
            f"; last sweep ({sweep['trigger']}): {sweep['collected']} collected, "
            f"{sweep['deferred']} deferred, cap {sweep['collection_cap']}"
            f"{' (bound)' if sweep['cap_bound'] else ''}"
        )
    return line
