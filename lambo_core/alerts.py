"""Recall's short-lived lines about fresh writes: conflicts and the high-risk alert.

Spec: lambo_recall (conflict lines, the high-risk alert); the spec leaves their text
and windows open, and the rules chosen (the older release's 30-second windows) are in
docs/design.md, recall ("Conflict and high-risk lines").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .locks import show_expiry
from .model import ESTABLISHED, EdgeType
from .text import format_rfc3339

if TYPE_CHECKING:
    from .index.graph import SessionGraph
    from .locks import Reservation
    from .scoring import EdgeView

CONFLICT_WINDOW_S = 30.0
HIGH_RISK_WINDOW_S = 30.0
CONFLICT_EDGE_TYPES = frozenset({EdgeType.PRODUCES, EdgeType.MODIFIES, EdgeType.DEPENDENCY})
SHOWN_AGENTS = 3  # a conflict line names at most this many agents, then "and N more"

Holder = Callable[[str], "Reservation | None"]


@dataclass(frozen=True)
class FreshWrites:
    """What was written to one concept inside a window."""

    agents: tuple[str, ...]  # who wrote it or a non-contradiction edge of it, earliest first
    edited: bool  # a Causal or Dependency edge on it was written
    latest_at: float  # the newest write, a contradiction included
    latest_agent: str


def fresh_writes(
    graph: SessionGraph, node_id: str, now: float, window: float, view: EdgeView
) -> FreshWrites | None:
    """The writes to ``node_id`` since ``now - window``; None when there were none."""
    concept = graph.concept(node_id)
    if concept is None:
        return None
    since = now - window
    last_edge = view.summary(node_id)[2]
    if concept.created_at < since and last_edge < since:
        return None
    writes: list[tuple[float, str, bool]] = []  # (when, agent, counts for a conflict)
    edited = False
    if concept.created_at >= since:
        writes.append((concept.created_at, concept.agent_id, True))
    for edge in (*graph.edges_in(node_id), *graph.edges_out(node_id)):
        if edge.created_at < since:
            continue
        writes.append((edge.created_at, edge.agent_id, edge.edge_type is not EdgeType.CONTRADICTS))
        edited = edited or edge.edge_type in CONFLICT_EDGE_TYPES
    if not writes:
        return None
    writes.sort(key=lambda w: w[0])
    agents = tuple(dict.fromkeys(agent for _, agent, counts in writes if counts))
    latest_at, latest_agent, _ = writes[-1]
    return FreshWrites(agents, edited, latest_at, latest_agent)


def conflict_lines(
    graph: SessionGraph,
    node_id: str,
    now: float,
    view: EdgeView,
    *,
    caller: str,
    holder: Holder | None,
) -> list[str]:
    """The hit's conflict lines: concurrent edits, then another agent's reservation."""
    lines = []
    fresh = fresh_writes(graph, node_id, now, CONFLICT_WINDOW_S, view)
    if fresh is not None and fresh.edited and len(fresh.agents) >= 2:
        shown = fresh.agents[:SHOWN_AGENTS]
        names = ", ".join(shown)
        if len(fresh.agents) > SHOWN_AGENTS:
            names += f" and {len(fresh.agents) - SHOWN_AGENTS} more"
        lines.append(
            f"⚡ Conflict: {names} edited this in the last {CONFLICT_WINDOW_S:.0f} s; "
            "reserve it with lambo_reserve before changing it"
        )
    held = holder(node_id) if holder is not None else None
    if held is not None and held.agent_id != caller:
        lines.append(
            f"⚡ Conflict: reserved by {held.agent_id} until {show_expiry(held.expires_at)}; "
            "coordinate before changing it"
        )
    return lines


def high_risk_line(
    graph: SessionGraph,
    node_id: str,
    now: float,
    view: EdgeView,
    *,
    blast_radius: int,
    threshold: int,
) -> str | None:
    """The short-lived alert on a fresh write to a load-bearing concept, or None."""
    concept = graph.concept(node_id)
    if concept is None:
        return None
    held = concept.status in ESTABLISHED
    if not held and blast_radius < threshold:  # not load-bearing
        return None
    fresh = fresh_writes(graph, node_id, now, HIGH_RISK_WINDOW_S, view)
    if fresh is None:
        return None
    why = concept.status.label if held else f"blast radius {blast_radius}"
    ago = max(0, round(now - fresh.latest_at))
    return (
        f"⚡ High risk: load-bearing ({why}) and written {ago} s ago by {fresh.latest_agent} "
        f"(at {format_rfc3339(fresh.latest_at)}); re-check it before building on it"
    )
