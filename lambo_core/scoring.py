"""The base score: a concept's standing in its session, shared by recall, canonization,
garbage collection and inspect.

The weights are the older release's (0.2.2): 0.25 recency + 0.20 frequency +
0.20 activity + 0.35 density + an edge bonus + a type offset. Access counts not yet
written behind are the session's ``access_counts`` (access.py).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .index.caches import EdgeSummaries, EdgeSummary
from .index.graph import SessionGraph
from .model import Concept, ConceptType, Edge, EdgeType

if TYPE_CHECKING:
    from .index.session_index import SessionIndex
    from .session import Session

# =====================================================================================
# session-wide facts the base score needs
# =====================================================================================


def derives_adjacency(graph: SessionGraph) -> dict[str, dict[str, Edge]]:
    """interaction id -> {concept id: DERIVES edge}, in insertion (so write) order.

    The graph's adjacency keeps interactions in the order
    their first DERIVES edge arrived, which is write order live and stored order
    (``ORDER BY eid``) after an open, so the most recent ones are at the end.
    """
    return graph.adjacency_out(EdgeType.DERIVES)


def recent_interactions(graph: SessionGraph, count: int) -> list[str]:
    """The ``count`` most recent interactions that wrote concepts, newest first."""
    adjacency = derives_adjacency(graph)
    window: list[tuple[float, int, str]] = []
    for order, interaction in enumerate(reversed(adjacency)):
        if order >= count * 4:  # a little slack for out-of-order timestamps
            break
        edges = adjacency.get(interaction)
        if not edges:
            continue
        when = max(edge.created_at for edge in edges.values())
        window.append((when, -order, interaction))
    window.sort(reverse=True)
    return [interaction for _, _, interaction in window[:count]]


def interaction_count(graph: SessionGraph) -> int:
    return graph.interaction_count


# =====================================================================================
# the base score
# =====================================================================================

# the base score's weights (0.2.2's), shared by base_parts and bulk_scores
W_RECENCY = 0.25
W_FREQUENCY = 0.20
W_ACTIVITY = 0.20
W_DENSITY = 0.35
ACCESS_FULL = 10.0  # accesses at which the frequency term is full
RECENCY_HALF_LIFE_S = 7 * 24 * 3600.0
TYPE_OFFSET = {
    ConceptType.CONSTRAINT: 0.15,
    ConceptType.ENTITY: 0.05,
    ConceptType.LOGIC: 0.05,
    ConceptType.RESOURCE: 0.0,
    ConceptType.OBSERVATION: -0.10,
}
EDGE_BONUS = {
    EdgeType.PRODUCES: 0.02,
    EdgeType.MODIFIES: 0.02,
    EdgeType.DEPENDENCY: 0.02,
    EdgeType.HIERARCHICAL: 0.015,
    EdgeType.SEMANTIC: 0.01,
    EdgeType.COOCCURRENCE: 0.005,
}
EDGE_BONUS_CAP = 0.25


@dataclass(frozen=True)
class BaseParts:
    """The base score's terms, for tests and inspect."""

    recency: float
    frequency: float
    activity: float
    density: float
    edge_bonus: float
    type_offset: float

    @property
    def total(self) -> float:
        return (
            self.recency
            + self.frequency
            + self.activity
            + self.density
            + self.edge_bonus
            + self.type_offset
        )


class EdgeView:
    """Every edge touching a concept, read straight from the graph's per-type adjacency.

    ``SessionGraph.edges_in/edges_out`` build a list per call; scoring a hundred
    candidates per recall that way cost most of the recall. This holds the per-type
    dicts once per view and keeps each concept's summary in ``summaries`` (the
    session index's, or the view's own) until an edge of that concept changes.
    With the index's summaries, use it under the index lock.
    """

    def __init__(self, graph: SessionGraph, summaries: EdgeSummaries | None = None) -> None:
        self.graph = graph
        self.sides = [
            (EDGE_BONUS.get(t, 0.0), t is EdgeType.DERIVES, side)
            for t in EdgeType
            for side in (graph.adjacency_out(t), graph.adjacency_in(t))
            if side
        ]
        self.summaries = summaries if summaries is not None else EdgeSummaries()

    def summary(self, node_id: str) -> EdgeSummary:
        """(edge count, edge bonus, latest edge time, interactions that touched it)."""
        stamp = self.graph.edge_stamp(node_id)
        found = self.summaries.get(node_id)
        if found is not None and found[0] == stamp:
            return found[1]
        summary = self.summarize(node_id)
        self.summaries.keep(node_id, stamp, summary)
        return summary

    def summarize(self, node_id: str) -> EdgeSummary:
        """The summary taken afresh from the adjacency."""
        count, bonus, last = 0, 0.0, -math.inf
        touched: set[str] = set()
        for weight, derives, by_node in self.sides:
            peers = by_node.get(node_id)
            if not peers:
                continue
            count += len(peers)
            bonus += weight * len(peers)
            for edge in peers.values():
                if edge.created_at > last:
                    last = edge.created_at
                if edge.interaction_id:
                    touched.add(edge.interaction_id)
                if derives:
                    touched.add(edge.src)
        concept = self.graph.concept(node_id)
        if concept is not None and concept.interaction_id:
            touched.add(concept.interaction_id)
        return (count, bonus, last, len(touched))


WARM_MIN = 5_000  # a smaller session summarises its candidates as recall meets them
WARM_CHUNK = 500  # concepts summarised per hold of the index lock
BULK_CHUNK = 2_000  # concepts bulk_scores reads per hold of the index lock


def start_summary_warm(index: SessionIndex) -> threading.Thread | None:
    """Summarise a large session's concepts in a background thread (None if small).

    Called when a serve becomes a session's hub, not by every open: at 100k
    concepts the summaries take about 1.5 s of one core, which would otherwise
    fall on the first recalls that meet each concept.
    """
    with index.lock:
        if len(index.graph) < WARM_MIN:
            return None
    thread = threading.Thread(
        target=warm_summaries, args=(index,), name="lambo-summary-warm", daemon=True
    )
    with index.lock:
        index.summaries.warming = thread
    thread.start()
    return thread


def wait_for_summaries(index: SessionIndex, timeout: float) -> bool:
    """Wait for the background summaries (benchmarks measure the steady state)."""
    with index.lock:
        thread = index.summaries.warming
    if thread is not None:
        thread.join(timeout)
    return thread is None or not thread.is_alive()


def warm_summaries(index: SessionIndex) -> int:
    """Summarise every concept of the session not yet summarised; how many were.

    ``WARM_CHUNK`` concepts per hold of the index lock, so a recall or the writer
    waits for one chunk at most, and every summary is read from a graph no one is
    changing.
    """
    with index.lock:
        summaries = index.summaries
        node_ids = index.graph.concept_ids()
    done = 0
    for start in range(0, len(node_ids), WARM_CHUNK):
        with index.lock:
            graph = index.graph
            view = EdgeView(graph, summaries)
            for node_id in node_ids[start : start + WARM_CHUNK]:
                if summaries.full():
                    return done
                stamp = graph.edge_stamp(node_id)
                found = summaries.get(node_id)
                if node_id not in graph or (found is not None and found[0] == stamp):
                    continue
                summaries.keep(node_id, stamp, view.summarize(node_id))
                done += 1
    return done


def base_parts(
    graph: SessionGraph,
    concept: Concept,
    now: float,
    *,
    max_degree: int,
    interactions: int,
    pending_access: int = 0,
    view: EdgeView | None = None,
) -> BaseParts:
    """A concept's standing in its session, in [-0.10, 1.40] (the 0.2.2 weights).

    0.25 recency (halving every 7 days since it or an edge of it was last
    written) + 0.20 frequency (accesses / 10, capped) + 0.20 activity (the share
    of the session's interactions that touched it) + 0.35 density (its edge
    count / the session's highest) + an edge bonus (capped at 0.25) + a type
    offset.
    """
    count, bonus, last, touched = (view or EdgeView(graph)).summary(concept.id)
    last = max(last, concept.created_at)
    age = max(0.0, now - last)
    top = max(max_degree, count)
    # the same terms as bulk_scores, over one concept (plain floats: numpy per scalar
    # would cost recall microseconds per candidate)
    return BaseParts(
        recency=W_RECENCY * 0.5 ** (age / RECENCY_HALF_LIFE_S),
        frequency=W_FREQUENCY * min(1.0, (concept.access_count + pending_access) / ACCESS_FULL),
        activity=W_ACTIVITY * min(1.0, touched / interactions) if interactions else 0.0,
        density=W_DENSITY * (count / top) if top else 0.0,
        edge_bonus=min(bonus, EDGE_BONUS_CAP),
        type_offset=TYPE_OFFSET[concept.concept_type],
    )


def bulk_scores(
    session: Session, graph: SessionGraph, now: float
) -> tuple[dict[str, float], int, int]:
    """Every concept's ``base_parts(...).total``, the formula evaluated over numpy arrays.

    For the Solo bar, a percentile over the whole session. The edge summaries
    come from the same per-concept cache recall reads (warmed in the
    background for a large session). Returns (scores, the session's highest
    degree, its interaction count), the session-wide terms the scores were
    taken with. The caller holds the index lock or is the writer thread; the
    summaries are read ``BULK_CHUNK`` concepts per hold of the lock.
    """
    ids = graph.concept_ids()
    if not ids:
        return {}, 0, graph.interaction_count
    view = EdgeView(graph, session.index.summaries)
    pending = session.access_counts.snapshot()
    n = len(ids)
    count, bonus, last, touched = (np.empty(n) for _ in range(4))
    created, accessed, offset = (np.empty(n) for _ in range(3))
    for start in range(0, n, BULK_CHUNK):
        # the summaries are the index's, guarded by its lock (re-entered if the caller holds it)
        with session.index.lock:
            for i in range(start, min(n, start + BULK_CHUNK)):
                concept = graph.concept(ids[i])
                assert concept is not None
                count[i], bonus[i], last[i], touched[i] = view.summary(ids[i])
                created[i] = concept.created_at
                accessed[i] = concept.access_count + pending.get(ids[i], 0)
                offset[i] = TYPE_OFFSET[concept.concept_type]
    max_degree = int(count.max())
    interactions = graph.interaction_count
    age = np.maximum(0.0, now - np.maximum(last, created))
    top = np.maximum(float(max_degree), count)
    recency = W_RECENCY * np.power(0.5, age / RECENCY_HALF_LIFE_S)
    frequency = W_FREQUENCY * np.minimum(1.0, accessed / ACCESS_FULL)
    activity = W_ACTIVITY * np.minimum(1.0, touched / interactions) if interactions else 0.0
    with np.errstate(invalid="ignore", divide="ignore"):
        density = np.where(top > 0, W_DENSITY * (count / top), 0.0)
    edge_bonus = np.minimum(bonus, EDGE_BONUS_CAP)
    total = recency + frequency + activity + density + edge_bonus + offset
    return dict(zip(ids, total.tolist(), strict=True)), max_degree, interactions
