"""The import driver: each job's calls submitted through the same lambo_derive /
lambo_record_action the tools serve (so the same admission, merging and embedding), with a
window of outstanding writes under the agent's lane bound.

The driver waits on the oldest receipt (lambo_stats receipt + wait_ms) when the window is
full, and on an earlier line's receipt before it submits a line that refers to it (by the
file's id or by that line's text), as references resolve at admission. A line refused (at
admission, or when applied) is reported with its number and never stops the others.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..cli.flags import FieldFlags
from ..limits import WAIT_MS_MAX
from ..receipts.states import LANE_BOUND
from ..text import canonical_key
from .checkpoint import Checkpoint
from .jobs import Job
from .lines import Refusal

Call = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]

APPLIED = frozenset({"applied", "applied_after_restart"})
OUTSTANDING = frozenset({"pending", "pending_replay", "intent_durable", "close_unflushed"})
#: what the window leaves of the lane for the agent's other writes
LANE_SPARE = 4
#: how long a write dropped on a full queue with nothing of ours outstanding is retried
DROPPED_RETRY_S = 30.0
CHECKPOINT_EVERY_S = 1.0


class Progress(Protocol):
    def start(self, label: str, total: int) -> None: ...

    def advance(self, rows: int) -> None: ...

    def finish(self) -> None: ...


@dataclass
class Landed:
    node_id: str
    text: str
    concept_type: str


@dataclass
class Report:
    lines: int = 0  # lines whose writes were applied
    created: int = 0
    matched: int = 0
    refused: list[Refusal] = field(default_factory=list)
    resumed_after: int = 0
    seconds: float = 0.0


@dataclass
class _Pending:
    job: Job
    receipts: list[tuple[str, FieldFlags]]
    refusal: str | None = None


class _Ids:
    """The file's ids as the writes of their lines landed (``jobs.Resolver``)."""

    def __init__(self, landed: dict[str, Landed]) -> None:
        self.landed = landed

    def node(self, ref: str) -> str:
        found = self.landed.get(ref)
        return found.node_id if found is not None else ref

    def text(self, ref: str) -> str:
        found = self.landed.get(ref)
        return found.text if found is not None else ref

    def landed_type(self, ref: str) -> str | None:
        found = self.landed.get(ref)
        return found.concept_type if found is not None else None


def _flags(names: dict[str, str]) -> FieldFlags:
    flags = FieldFlags({})
    for name, shown in names.items():
        flags.add(name, shown)
    return flags


class ImportRun:
    def __init__(
        self,
        agent: str,
        jobs: list[Job],
        *,
        progress: Progress,
        checkpoint: Checkpoint,
        refused: list[Refusal],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.agent = agent
        self.progress = progress
        self.checkpoint = checkpoint
        self.clock = clock
        self.report = Report(resumed_after=checkpoint.done_through)
        self.report.created = checkpoint.counts.get("created", 0)
        self.report.matched = checkpoint.counts.get("matched", 0)
        self.report.lines = checkpoint.counts.get("lines", 0)
        self.report.refused = [Refusal(n, r) for n, r in checkpoint.refused]
        skip = checkpoint.done_through
        self.jobs = [j for j in jobs if j.number > skip]
        self._parse_refused = [r for r in refused if r.line > skip]
        self.ids = _Ids({k: Landed(*v) for k, v in checkpoint.landed.items()})
        self._by_id: dict[str, int] = {}  # file id -> the line that carries it
        self._by_text: dict[str, int] = {}  # a text's key -> the latest line that writes it
        self._refused_lines: set[int] = {r.line for r in self.report.refused}
        self._outstanding: OrderedDict[int, _Pending] = OrderedDict()
        self._last_saved = clock()
        self.window = LANE_BOUND - LANE_SPARE

    async def run(self, call: Call) -> Report:
        """Every job through ``call`` (``client.open_client``'s), then the counts."""
        self.call = call
        began = self.clock()
        stats = await self.call("lambo_stats", {"agent_id": self.agent})
        lane = (stats.get("structuredContent") or {}).get("write_queue_lane_bound")
        if isinstance(lane, int) and lane > LANE_SPARE:
            self.window = lane - LANE_SPARE
        self.progress.start("importing", len(self.jobs))
        parse_refused = iter(self._parse_refused)
        next_refusal = next(parse_refused, None)
        done = 0
        try:
            for job in self.jobs:
                while next_refusal is not None and next_refusal.line < job.number:
                    self._refuse(next_refusal.line, next_refusal.reason)
                    next_refusal = next(parse_refused, None)
                await self._submit(job)
                done = job.number
                self._maybe_save(done)
            while self._outstanding:
                await self._settle_oldest()
            for rest in [next_refusal, *parse_refused]:
                if rest is not None:
                    self._refuse(rest.line, rest.reason)
        finally:
            self._save(done)
        self.progress.finish()
        self.report.refused.sort(key=lambda r: r.line)
        self.report.seconds = self.clock() - began
        return self.report

    # -- submitting ---------------------------------------------------------------------
    async def _submit(self, job: Job) -> None:
        for field_name, ref in job.refs:
            line = self._by_id.get(ref)
            if line is None and ref in self.ids.landed:
                continue  # an id that landed before a resume
            if line is not None and line in self._refused_lines:
                self._refuse(
                    job.number, f"{field_name} names the id of line {line}, which was refused"
                )
                self.progress.advance(1)
                return
            if line is None:
                line = self._by_text.get(canonical_key(ref))
            if line is not None and line in self._outstanding:
                await self._settle(line)
                if line in self._refused_lines and ref in self._by_id:
                    self._refuse(
                        job.number, f"{field_name} names the id of line {line}, which was refused"
                    )
                    self.progress.advance(1)
                    return
        if job.id is not None:
            self._by_id[job.id] = job.number
        for text in job.names_made:
            self._by_text[canonical_key(text)] = job.number
        pending = _Pending(job, [])
        for tool, arguments, names in job.build(self.ids):
            flags = _flags(names)
            receipt = await self._admit(tool, arguments, flags)
            if isinstance(receipt, str):
                pending.receipts.append((receipt, flags))
            else:
                pending.refusal = self._in_file_terms(job, receipt.reason)
                break
        self._outstanding[job.number] = pending
        while len(self._outstanding) > self.window:
            await self._settle_oldest()

    async def _admit(self, tool: str, arguments: dict[str, Any], flags: FieldFlags) -> Any:
        """The receipt of an admitted write, or a ``Refusal`` (line 0) saying why not."""
        deadline: float | None = None
        while True:
            ack = await self.call(tool, arguments)
            if ack["isError"]:
                return Refusal(0, flags.rewrite(str(ack["content"][0]["text"])))
            structured = ack.get("structuredContent") or {}
            if structured.get("receipt_state") != "dropped":
                return str(structured["receipt"])
            # the queue was full: nothing was written; make room, then send it again
            if self._outstanding:
                await self._settle_oldest()
                continue
            deadline = deadline or self.clock() + DROPPED_RETRY_S
            if self.clock() > deadline:
                return Refusal(0, "the write queue stayed full (dropped); nothing was written")
            import anyio

            await anyio.sleep(0.2)

    def _in_file_terms(self, job: Job, reason: str) -> str:
        """A refusal quoting the node id a file id was sent as, quoting the file's id."""
        for _, ref in job.refs:
            landed = self.ids.landed.get(ref)
            if landed is not None:
                reason = reason.replace(f'"{landed.node_id}"', f'"{ref}"')
        return reason

    # -- settling -----------------------------------------------------------------------
    async def _settle_oldest(self) -> None:
        await self._settle(next(iter(self._outstanding)))

    async def _settle(self, number: int) -> None:
        pending = self._outstanding.pop(number)
        refusal = pending.refusal
        first: dict[str, Any] | None = None
        created = matched = 0
        for receipt_id, flags in pending.receipts:
            receipt = await self._wait(receipt_id)
            state = str(receipt.get("state", ""))
            if state in APPLIED:
                created += int(receipt.get("created_count") or 0)
                matched += int(receipt.get("matched_count") or 0)
                first = first or receipt
            elif refusal is None:
                detail = self._in_file_terms(pending.job, str(receipt.get("detail", "")))
                refusal = f"{state} — {flags.rewrite(detail)}"
        self.report.created += created
        self.report.matched += matched
        if refusal is not None:
            self._refuse(number, refusal)
        else:
            self.report.lines += 1
            job = pending.job
            if job.id is not None and first is not None:
                await self._land(job, first)
        self.progress.advance(1)

    async def _wait(self, receipt_id: str) -> dict[str, Any]:
        while True:
            asked = await self.call(
                "lambo_stats",
                {"agent_id": self.agent, "receipt": receipt_id, "wait_ms": WAIT_MS_MAX},
            )
            if asked["isError"]:
                return {"state": "failed", "detail": str(asked["content"][0]["text"])}
            receipt = (asked.get("structuredContent") or {}).get("receipt") or {}
            if receipt.get("state") not in OUTSTANDING:
                return dict(receipt)

    async def _land(self, job: Job, receipt: dict[str, Any]) -> None:
        """Record what the line's id now names: its concept's node id, and its text as the
        store keeps it (a concept merged by similarity keeps the other's text)."""
        node = receipt.get("action_node")
        if not isinstance(node, str):
            ids = [*(receipt.get("created") or []), *(receipt.get("matched") or [])]
            if not ids:
                return
            node = str(ids[0])
        text = job.content or ""
        if receipt.get("semantic_merged") and not receipt.get("created"):
            inspected = await self.call(
                "lambo_inspect", {"agent_id": self.agent, "focus": node, "depth": 0}
            )
            if not inspected["isError"]:
                text = str((inspected.get("structuredContent") or {}).get("content", text))
        assert job.id is not None
        self.ids.landed[job.id] = Landed(node, text, job.concept_type or "entity")

    def _refuse(self, number: int, reason: str) -> None:
        self._refused_lines.add(number)
        self.report.refused.append(Refusal(number, reason))

    # -- the checkpoint -----------------------------------------------------------------
    def _maybe_save(self, submitted: int) -> None:
        if self.clock() - self._last_saved >= CHECKPOINT_EVERY_S:
            self._save(submitted)

    def _save(self, submitted: int) -> None:
        """Every line before the oldest outstanding one has settled."""
        settled = next(iter(self._outstanding), submitted + 1) - 1
        cp = self.checkpoint
        cp.done_through = max(cp.done_through, settled)
        cp.landed = {k: [v.node_id, v.text, v.concept_type] for k, v in self.ids.landed.items()}
        cp.counts = {
            "created": self.report.created,
            "matched": self.report.matched,
            "lines": self.report.lines,
        }
        cp.refused = [[r.line, r.reason] for r in self.report.refused if r.line <= settled]
        cp.save()
        self._last_saved = self.clock()
