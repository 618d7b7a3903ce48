"""Is a concept currently contradicted? The rule recall, lambo_stale and receipts share.

Spec: lambo_recall, "Contradiction warnings", and lambo_stale. Pure functions over a
``SessionGraph``, a time and the canonization age floor (``canonization_edge_min_age``);
the caller holds the session index lock. The rule in our words: docs/design.md,
"Contradictions".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .index.graph import SessionGraph
from .model import Concept, Edge, EdgeType
from .text import show_safely

DEFAULT_EDGE_MIN_AGE_S = 60.0
STALE_ROWS_MAX = 50
STALE_BYTES_MAX = 2048
SNIPPET_CHARS = 80


@dataclass(frozen=True)
class ContradictionInfo:
    """The contradiction that currently holds against one concept."""

    node_id: str  # the contradicted concept
    by: str  # the contradicting concept (src of the Contradicts edge)
    at: float  # the contradiction's date (about-time of the write that declared it)
    agent_id: str  # who declared it
    evidence_at: float | None  # latest supporting evidence that counted against it, if any


def supporting_edges(graph: SessionGraph, node_id: str) -> list[tuple[str, Edge]]:
    """(supporting concept, edge): its citing dependents, then its parent_of children.

    The evidence both the contradiction rule and canonization count.
    """
    cited = graph.adjacency_in(EdgeType.DEPENDENCY).get(node_id)
    children = graph.adjacency_out(EdgeType.HIERARCHICAL).get(node_id)
    out: list[tuple[str, Edge]] = []
    if cited:
        out += [(src, e) for src, e in cited.items() if src != node_id and src in graph]
    if children:
        out += [(dst, e) for dst, e in children.items() if dst != node_id and dst in graph]
    return out


def written_with(hit: Concept, supporter: Concept | None, edge: Edge) -> bool:
    if hit.interaction_id is None:
        return False
    if edge.interaction_id == hit.interaction_id:
        return True
    return supporter is not None and supporter.interaction_id == hit.interaction_id


def _latest_evidence(
    graph: SessionGraph,
    hit: Concept,
    support: list[tuple[str, Edge]],
    contradiction: Edge,
    now: float,
    edge_min_age: float,
) -> float | None:
    latest: float | None = None
    for other, edge in support:
        if now - edge.created_at < edge_min_age:
            continue  # not yet aged in
        if other == contradiction.src or edge.agent_id == contradiction.agent_id:
            continue  # your own evidence does not count against you
        if written_with(hit, graph.concept(other), edge):
            continue
        if latest is None or edge.about_time > latest:
            latest = edge.about_time
    return latest


def contradictions(
    graph: SessionGraph, node_id: str, now: float, edge_min_age: float
) -> list[ContradictionInfo]:
    """Every contradiction of ``node_id`` that currently fires, the one recall shows first."""
    hit = graph.concept(node_id)
    if hit is None:
        return []
    against = [
        e
        for e in graph.edges_in(node_id, (EdgeType.CONTRADICTS,))
        if e.src != node_id and e.src in graph
    ]
    if not against:
        return []
    support = supporting_edges(graph, node_id)
    firing: list[tuple[ContradictionInfo, str]] = []
    for edge in against:
        if edge.about_time <= hit.about_time:
            continue  # a contradiction must be newer than the concept itself
        evidence = _latest_evidence(graph, hit, support, edge, now, edge_min_age)
        if evidence is not None and edge.about_time <= evidence:
            continue  # outweighed by later (or equally dated) evidence
        by = graph.concept(edge.src)
        key = by.canonical_key if by is not None else ""
        info = ContradictionInfo(node_id, edge.src, edge.about_time, edge.agent_id, evidence)
        firing.append((info, key))
    firing.sort(key=lambda pair: (-pair[0].at, pair[1], pair[0].by))
    return [info for info, _ in firing]


def is_contradicted(
    graph: SessionGraph, node_id: str, now: float, edge_min_age: float = DEFAULT_EDGE_MIN_AGE_S
) -> ContradictionInfo | None:
    """The contradiction recall would show on ``node_id`` now, or None."""
    found = contradictions(graph, node_id, now, edge_min_age)
    return found[0] if found else None


@dataclass(frozen=True)
class StaleRow:
    """One direct dependency resting on a contradicted concept."""

    node_id: str  # the dependent (full id)
    snippet: str  # its content, one line, at most 80 characters (+ "…")
    cited_id: str  # the contradicted concept it cites (full id)

    def as_dict(self) -> dict[str, str]:
        return {"node_id": self.node_id, "snippet": self.snippet, "cited_id": self.cited_id}

    @property
    def size(self) -> int:
        """UTF-8 bytes across its id, cited id and snippet (the receipt's byte cap)."""
        return len((self.node_id + self.cited_id + self.snippet).encode("utf-8"))


@dataclass
class StaleReport:
    """``total`` stale dependencies; ``rows`` the first of them within the bounds."""

    total: int = 0
    rows: list[StaleRow] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {"total": self.total, "rows": [r.as_dict() for r in self.rows]}


def contradicted_targets(graph: SessionGraph) -> list[str]:
    """Concepts some other concept names in against: the only ones that can be contradicted.

    Read from the Contradicts adjacency, so it costs the number of targets, not a scan of
    the session (lambo_stale and the daemon's contradiction list both start here).
    """
    return [node for node in graph.adjacency_in(EdgeType.CONTRADICTS) if node in graph]


def stale_rows(
    graph: SessionGraph, targets: Iterable[str], now: float, edge_min_age: float
) -> list[StaleRow]:
    """Every direct stale dependency on ``targets``, ordered by cited id then dependent id.

    A target that is not currently contradicted contributes nothing; a
    dependent that itself contradicts the target is left out.
    """
    rows: list[StaleRow] = []
    for target in sorted(set(targets)):
        if is_contradicted(graph, target, now, edge_min_age) is None:
            continue
        for edge in sorted(graph.edges_in(target, (EdgeType.DEPENDENCY,)), key=lambda e: e.src):
            dependent = graph.concept(edge.src)
            if dependent is None or dependent.id == target:
                continue
            if graph.edge(dependent.id, target, EdgeType.CONTRADICTS) is not None:
                continue
            rows.append(
                StaleRow(dependent.id, show_safely(dependent.content, SNIPPET_CHARS), target)
            )
    return rows


def stale_dependents(
    graph: SessionGraph,
    targets: Iterable[str],
    now: float,
    edge_min_age: float = DEFAULT_EDGE_MIN_AGE_S,
    *,
    max_rows: int = STALE_ROWS_MAX,
    max_bytes: int | None = STALE_BYTES_MAX,
) -> StaleReport:
    """The stale report on ``targets``: the true total, and at most ``max_rows`` rows whose
    ids, cited ids and snippets together fit in ``max_bytes`` UTF-8 bytes (None: no byte cap,
    as lambo_stale pages have). Rows stop at the first that does not fit, so they are always
    a prefix of the ordered list.
    """
    every = stale_rows(graph, targets, now, edge_min_age)
    report = StaleReport(total=len(every))
    used = 0
    for row in every:
        if len(report.rows) >= max_rows:
            break
        if max_bytes is not None and used + row.size > max_bytes:
            break
        report.rows.append(row)
        used += row.size
    return report
