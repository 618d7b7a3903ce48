"""What a write answers: the ack, and the outcome its receipt settles with.

The ack is rendered at admission (spec: lambo_derive, "The ack"); the outcome when the write
is applied: its summary line, the replacement candidates within their byte bound, and the stale
report of a write carrying against. The durable intent keeps only the summary and counts.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..contradiction import StaleReport, stale_dependents
from ..model import short_id
from ..receipts import ReceiptState, ReceiptView, render_line
from ..session import Session
from .builder import CANDIDATE_BYTES, Plan

log = logging.getLogger(__name__)

# The ack's last line for a write into a layer (spec L305, verbatim).
LAYER_ACK_LINE = (
    "written to session '{session}'; writes to different sessions have no ordering between them"
)

_CANDIDATES_CLAUSE = (
    "; {n} replacement candidate(s): existing concepts this write may replace "
    "(nothing recorded; cite one in against on a later call only if it really is replaced)"
)
_MERGED_SUFFIX = "; merged with this write, may be replaced"
_NEWER_SUFFIX = (
    "; newer: dated after this write, so it may replace this write, not the other way round; "
    "do not cite it in against"
)


@dataclass
class Ack:
    """What a write tool answers: its text and its structuredContent."""

    text: str
    structured: dict[str, Any]


def render_ack(
    summary: str,
    receipt: ReceiptView,
    agent_id: str,
    *,
    session: str | None = None,
    warnings: Sequence[str] = (),
) -> Ack:
    """The ack; ``session`` names the layer a write submitted through another session went
    to (spec L305: its extra line, last, and ``session`` in structuredContent), None for a
    write to the session addressed, whose ack is unchanged (L307)."""
    rid = receipt.receipt_id or ""
    lines = [summary, render_line(receipt)]
    queued = receipt.state is ReceiptState.PENDING
    if queued:
        lines.append(
            "The outcome arrives on your next tool response. To wait for it, call lambo_stats "
            f"with receipt={rid} (add wait_ms to block)."
        )
    lines.append(f'Recorded under agent_id "{agent_id}"; send this same id on every call.')
    lines.extend(f"warning: {w}" for w in warnings)
    structured: dict[str, Any] = {
        "summary": summary,
        "receipt": rid,
        "receipt_state": receipt.state.value,
        "agent_id": agent_id,
        "warnings": list(warnings),
    }
    if session is not None:
        structured["session"] = session
        if queued:  # a dropped write was written nowhere: its receipt line says so
            lines.append(LAYER_ACK_LINE.format(session=session))
    return Ack(text="\n".join(lines), structured=structured)


def layer_closed_warning(layer: str, receipt_id: str) -> str:
    """The layer began closing once this write was admitted: it is still applied (or kept
    for the layer's next holder to replay), so sending it again would write it twice."""
    return (
        f"layer {layer} closed after this write was admitted; it will still be applied: "
        f"do not send it again, ask lambo_stats with receipt={receipt_id}"
    )


def durable_outcome(outcome: dict[str, Any]) -> dict[str, Any]:
    """What the intent keeps of the outcome: the summary line and counts, not the lists.

    A receipt recovered after a restart keeps only its summary (spec: replacement
    candidates, stale report); the rows stay on the in-process receipt.
    """
    data = {k: v for k, v in outcome["data"].items() if k != "replacement_candidates"}
    return {"detail": outcome["detail"].split("\n", 1)[0], "data": data}


def _candidate_line(row: dict[str, Any]) -> str:
    line = f'- {row["id"]} "{row["excerpt"]}" (cosine {row["cosine"]:.4f}, for {row["new_id"]})'
    if row.get("merged"):
        line += _MERGED_SUFFIX
    if row.get("newer"):
        line += _NEWER_SUFFIX
    return line


def _stale_lines(report: StaleReport) -> list[str]:
    lines = [
        f"{report.total} dependent(s) now rest on a contradicted concept "
        "(direct depends_on citations; lambo_stale lists them):"
    ]
    lines += [
        f'- {short_id(r.node_id)} "{r.snippet}" cites {short_id(r.cited_id)}' for r in report.rows
    ]
    left = report.total - len(report.rows)
    if left:
        lines.append(f"- … {left} more; lambo_stale pages through them all")
    return lines


def outcome_of(plan: Plan) -> dict[str, Any]:
    """The applied write's receipt: its detail (summary line, then listed rows) and data."""
    if plan.action_node is not None:
        detail = (
            f"recorded action {short_id(plan.action_node)}: {len(plan.created)} created "
            f"({plan.embedded} embedded), {len(plan.matched)} matched existing; "
            f"{len(plan.batch.edges)} edge(s)"
        )
    else:
        n = len(plan.created) + len(plan.matched)
        detail = (
            f"derived {n} concept(s): {len(plan.created)} created ({plan.embedded} embedded), "
            f"{len(plan.matched)} matched existing"
        )
        if plan.semantic_merged:
            detail += f" ({plan.semantic_merged} by similarity)"
    if plan.citations:
        detail += f"; {plan.citations} citation(s) recorded"
    if plan.contradictions:
        detail += f"; {plan.contradictions} contradiction(s) recorded"
    if plan.supersessions:
        detail += f"; {plan.supersessions} possible undeclared supersession(s) flagged"
    if plan.candidate_total:
        detail += _CANDIDATES_CLAUSE.format(n=plan.candidate_total)
        detail += "".join("\n" + _candidate_line(row) for row in plan.candidates)
        left = plan.candidate_total - len(plan.candidates)
        if left:
            detail += (
                f"\n- … {left} more not listed (the receipt lists at most {CANDIDATE_BYTES} bytes)"
            )
    data: dict[str, Any] = {
        "created": plan.created,
        "matched": plan.matched,
        "created_count": len(plan.created),
        "matched_count": len(plan.matched),
        "semantic_merged": plan.semantic_merged,
        "reinforced": plan.reinforced,
        "edges": len(plan.batch.edges),
        "embedded": plan.embedded,
    }
    if plan.action_node is not None:
        data["action_node"] = plan.action_node
    if plan.supersessions:
        data["possible_supersessions"] = plan.supersessions
    if plan.candidate_total:
        data["replacement_candidates"] = {
            "candidates": plan.candidates,
            "total": plan.candidate_total,
        }
    return {"detail": detail, "data": data}


def add_stale_report(
    session: Session, outcome: dict[str, Any], targets: list[str], edge_min_age_s: float
) -> None:
    """The stale report on the against targets, read from the graph as just committed."""
    try:
        with session.index.lock:
            report = stale_dependents(
                session.index.graph, targets, session.clock.now(), edge_min_age_s
            )
    except Exception:  # the write is committed: a fault here must not fail its receipt
        log.exception("stale report for a write against %s failed", targets)
        return
    outcome["data"]["stale_report"] = report.as_dict()
    if report.total:
        outcome["detail"] += "\n" + "\n".join(_stale_lines(report))
