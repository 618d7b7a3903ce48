"""lambo_inspect's canonization section for one concept: its text lines and ``admission``.

Spec: lambo_inspect, the admission section.
"""

from __future__ import annotations

import math
from typing import Any

from ..model import Concept, short_id
from ..text import format_rfc3339, show_safely
from .gates import Context, Verdict, evaluate
from .history import CanonHistory, Demotion
from .rules import QUOTE_CHARS, CanonRules


def admission_section(
    history: CanonHistory, node_id: str, now: float
) -> tuple[list[str], dict[str, Any]]:
    """The section for ``node_id`` of ``history``'s session, measured under its rules.

    The structured part carries policy, status, next (absent for Canonical),
    eligible, checks, solo (Solo only) and reasons, plus ``held`` (the
    contradicting concepts holding newer evidence) and ``last_demotion`` when
    they apply. The caller must not hold the index lock. Raises ``StoreError``
    when the store cannot answer (the demotion log's first read), and
    ``KeyError`` for a concept not in the session.
    """
    session, rules = history.session, history.rules
    demotions = history.log()
    ctx = Context.measure(session, now, rules, demotions)
    demotion = demotions.get(node_id)
    with session.index.lock:
        concept = ctx.graph.concept(node_id)
        if concept is None:
            raise KeyError(node_id)
        verdict = evaluate(ctx, concept)
        superseder = (
            ctx.graph.concept(demotion.by) if demotion is not None and demotion.by else None
        )

    data: dict[str, Any] = {"policy": rules.shown_policy, "status": verdict.status.label}
    if verdict.next is None:
        lines = [f"canonization ({rules.shown_policy}): {verdict.status.label}"]
    else:
        data["next"] = verdict.next.label
        said = "eligible" if verdict.eligible else "refused"
        lines = [
            f"canonization ({rules.shown_policy}): {verdict.status.label} -> "
            f"{verdict.next.label} {said}"
        ]
    data["eligible"] = verdict.eligible
    data["checks"] = [c.as_dict() for c in verdict.checks]
    if verdict.solo is not None:
        data["solo"] = _solo_terms(ctx, verdict, rules)
    data["reasons"] = verdict.reasons
    lines += [f"  - {reason}" for reason in verdict.reasons]
    if verdict.held_by:
        data["held"] = [
            {"by": side.by, "at": format_rfc3339(side.at), "agent_id": side.agent_id}
            for side in verdict.held_by
        ]
    if demotion is not None:
        line, data["last_demotion"] = _last_demotion(demotion, superseder)
        lines.append(line)
    return lines, data


def admission(history: CanonHistory, node_id: str, now: float) -> dict[str, Any]:
    """The structured ``admission`` alone (see ``admission_section``)."""
    return admission_section(history, node_id, now)[1]


def _solo_terms(ctx: Context, verdict: Verdict, rules: CanonRules) -> dict[str, Any]:
    """The ``solo`` part: the score's terms, the percentile and its bar."""
    parts = verdict.solo
    assert parts is not None
    bar = ctx.scores.bar if ctx.scores is not None else math.inf
    return {
        "recency": round(parts.recency, 4),
        "frequency": round(parts.frequency, 4),
        "activity": round(parts.activity, 4),
        "density": round(parts.density, 4),
        "edge_bonus": round(parts.edge_bonus, 4),
        "type_offset": round(parts.type_offset, 4),
        "score": round(parts.total, 4),
        "percentile": rules.solo_percentile,
        "bar": round(bar, 4) if math.isfinite(bar) else None,
    }


def _last_demotion(demotion: Demotion, superseder: Concept | None) -> tuple[str, dict[str, Any]]:
    """The ``last demotion`` line and its structured ``last_demotion``."""
    last: dict[str, Any] = {
        "at": format_rfc3339(demotion.at),
        "from": demotion.from_status.label,
        "to": demotion.to_status.label,
        "reason": demotion.reason,
    }
    when = f"  last demotion {last['at']}"
    if demotion.reason == "superseded" and demotion.by is not None:
        last["by"] = demotion.by
        quoted = f'"{show_safely(superseder.content, QUOTE_CHARS)}" ' if superseder else ""
        return f"{when}: superseded by {quoted}(id {short_id(demotion.by)})", last
    return f"{when}: budget", last
