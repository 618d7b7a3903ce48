"""The base score: a concept's standing in its session, shared by recall, canonization,
garbage collection and inspect.

The weights are the older release's (0.2.2): 0.25 recency + 0.20 frequency +
0.20 activity + 0.35 density + an edge bonus + a type offset. Access counts not yet
written behind are the session's ``access_counts`` (access.py).
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .index.graph import SessionGraph
from .model import Concept, ConceptType, Edge, EdgeType
from .owned import PerOwner

if TYPE_CHECKING:
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


def _degree_table(graph: SessionGraph) -> int:
    """The highest edge count (all types, both directions) of any concept in the session."""
    degree: Counter[str] = Counter()
    for edge_type in EdgeType:
        for by_node in (graph.adjacency_out(edge_type), graph.adjacency_in(edge_type)):
            for node, peers in by_node.items():
                degree[node] += len(peers)
    best = 0
    for node, n in degree.items():
        if n > best and node in graph:
            best = n
    return best


class _SessionStats:
    """Session-wide denominators of the base score, cached on the graph's version.

    The highest edge count takes one pass over the adjacency (about 0.2 s at
    100k concepts). A small session (under ``LARGE``) recomputes it inline on
    every change. A large one computes it inline once, then refreshes it in a
    background thread at most every ``REFRESH_S`` seconds after changes; reads
    meanwhile use the last value (a hit's own degree above it counts as the
    highest), so no read after a write pays the pass.
    """

    LARGE = 5_000
    REFRESH_S = 2.0

    def __init__(self) -> None:
        self.version = -1
        self.max_degree = 0
        self.computed_at = -math.inf
        self.refreshing = False
        self.lock = threading.Lock()


_STATS: PerOwner[SessionGraph, _SessionStats] = PerOwner(_SessionStats)


def max_degree(graph: SessionGraph, monotonic_now: float) -> int:
    """The session's highest edge count (the caller holds the index lock)."""
    stats = _STATS.get(graph)
    with stats.lock:
        if stats.version == graph.version:
            return stats.max_degree
        if stats.version < 0 or len(graph) < _SessionStats.LARGE:
            stats.max_degree = _degree_table(graph)
            stats.version = graph.version
            stats.computed_at = monotonic_now
        elif not stats.refreshing and monotonic_now - stats.computed_at >= _SessionStats.REFRESH_S:
            stats.refreshing = True
            threading.Thread(
                target=_refresh_degree,
                args=(weakref.ref(graph), stats),
                name="lambo-recall-degree",
                daemon=True,
            ).start()
        return stats.max_degree


def _refresh_degree(graph_ref: weakref.ref[SessionGraph], stats: _SessionStats) -> None:
    """Recompute the highest degree without the index lock; retry if a write overlapped."""
    try:
        for _ in range(5):
            graph = graph_ref()
            if graph is None:
                return
            version = graph.version
            try:
                value = _degree_table(graph)
            except RuntimeError:  # the adjacency changed size under the scan: go again
                time.sleep(0.05)
                continue
            with stats.lock:
                stats.max_degree = value
                stats.version = version
                stats.computed_at = time.monotonic()
            return
    finally:
        with stats.lock:
            stats.refreshing = False


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


# (edge count, edge bonus, latest edge time, interactions that wrote it or an edge of it)
EdgeSummary = tuple[int, float, float, int]


class EdgeView:
    """Every edge touching a concept, read straight from the graph's per-type adjacency.

    ``SessionGraph.edges_in/edges_out`` build a list per call and hash an
    Enum per edge type; scoring a hundred candidates per recall that way cost
    most of the recall. This holds the per-type dicts once per recall (types no
    concept has are skipped), and keeps each concept's summary, stamped with
    the graph's ``edge_stamp`` for it, until an edge of that concept changes
    (``_SUMMARIES``): a write elsewhere in the session keeps it, so a concept
    seen before is scored with one lookup. A large session's summaries are
    filled in the background once a serve holds it (``start_summary_warm``).
    """

    def __init__(self, graph: SessionGraph) -> None:
        self.graph = graph
        self.sides = [
            (EDGE_BONUS.get(t, 0.0), t is EdgeType.DERIVES, side)
            for t in EdgeType
            for side in (graph.adjacency_out(t), graph.adjacency_in(t))
            if side
        ]
        self.cache = _summary_cache(graph)

    def summary(self, node_id: str) -> EdgeSummary:
        """(edge count, edge bonus, latest edge time, interactions that touched it)."""
        stamp = self.graph.edge_stamp(node_id)
        found = self.cache.get(node_id)
        if found is not None and found[0] == stamp:
            return found[1]
        result = self._summarize(node_id)
        if found is not None or len(self.cache) < SUMMARY_CACHE_SIZE:
            self.cache[node_id] = (stamp, result)
        return result

    def _summarize(self, node_id: str) -> EdgeSummary:
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


SUMMARY_CACHE_SIZE = 200_000  # about 250 bytes each: 50 MB at most, 25 MB at 100k concepts
# node id -> (its edge stamp then, summary), per graph
_SUMMARIES: PerOwner[SessionGraph, dict[str, tuple[int, EdgeSummary]]] = PerOwner(dict)
WARM_MIN = 5_000  # a smaller session summarises its candidates as recall meets them
WARM_CHUNK = 1_000  # concepts summarised between yields of the GIL


def _summary_cache(graph: SessionGraph) -> dict[str, tuple[int, EdgeSummary]]:
    """The summaries kept for ``graph``: node id -> (its edge stamp then, summary)."""
    return _SUMMARIES.get(graph)


def start_summary_warm(graph: SessionGraph) -> threading.Thread | None:
    """Summarise a large session's concepts in a background thread (None if small).

    Called when a serve becomes a session's hub, not by every open: at 100k
    concepts the summaries take about 1.5 s of one core, which would otherwise
    fall on the first recalls that meet each concept, and a one-shot CLI call
    that opens the session for one read would only pay for them.
    """
    if len(graph) < WARM_MIN:
        return None
    thread = threading.Thread(
        target=warm_summaries, args=(graph,), name="lambo-summary-warm", daemon=True
    )
    _WARMING.put(graph, thread)
    thread.start()
    return thread


_WARMING: PerOwner[SessionGraph, threading.Thread] = PerOwner()


def wait_for_summaries(graph: SessionGraph, timeout: float) -> bool:
    """Wait for ``graph``'s background summaries (benchmarks measure the steady state)."""
    thread = _WARMING.peek(graph)
    if thread is not None:
        thread.join(timeout)
    return thread is None or not thread.is_alive()


def warm_summaries(graph: SessionGraph) -> int:
    """Summarise every concept of ``graph`` not yet summarised; how many were.

    Runs without the index lock (a background thread of a large session): a
    summary is stored with the stamp read before it was computed, and a write
    sets the stamp after it changes the adjacency, so a summary that raced a
    write is simply not matched later. An adjacency that changes size under
    the walk skips that concept (recall summarises it when it meets it).
    """
    view = EdgeView(graph)
    done = 0
    for i, node_id in enumerate(graph.concept_ids()):
        if i % WARM_CHUNK == 0:
            time.sleep(0)  # let a reader or the writer in
        if len(view.cache) >= SUMMARY_CACHE_SIZE:
            break
        stamp = graph.edge_stamp(node_id)
        found = view.cache.get(node_id)
        if found is not None and found[0] == stamp:
            continue
        try:
            view.cache[node_id] = (stamp, view._summarize(node_id))
        except RuntimeError:  # "dictionary changed size during iteration"
            continue
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
    taken with. The caller holds the index lock or is the writer thread.
    """
    ids = graph.concept_ids()
    if not ids:
        return {}, 0, graph.interaction_count
    view = EdgeView(graph)
    pending = session.access_counts.snapshot()
    n = len(ids)
    count, bonus, last, touched = (np.empty(n) for _ in range(4))
    created, accessed, offset = (np.empty(n) for _ in range(3))
    for i, node_id in enumerate(ids):
        concept = graph.concept(node_id)
        assert concept is not None
        count[i], bonus[i], last[i], touched[i] = view.summary(node_id)
        created[i] = concept.created_at
        accessed[i] = concept.access_count + pending.get(node_id, 0)
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
