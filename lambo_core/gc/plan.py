"""The plan of one sweep: a pure function of the graph, the time and the settings.

Spec: lambo_stats (``gc``), "Keeping a concept alive" (what a sweep never collects). How
the protections are settled (a least fixed point) is in docs/design.md, "Garbage
collection".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..contradiction import is_contradicted
from ..index.caches import EdgeSummaries, EdgeSummary
from ..model import Concept, ConceptType, Edge, EdgeType
from ..scoring import EdgeView, base_parts, interaction_count
from .settings import (
    KEPT_CONTRADICTS_HELD,
    KEPT_CORRECTION,
    KEPT_DEPENDENTS,
    KEPT_STATUS,
    PROTECTED_STATUSES,
    WEAK_EDGE_AGE_S,
    WEAK_EDGE_TYPES,
    WEAK_EDGE_WEIGHT,
    GcSettings,
)

if TYPE_CHECKING:
    from ..index.graph import SessionGraph

_EDGELESS = -math.inf  # sorts an edgeless concept before every scored one
_Rank = tuple[float, float]  # (standing, created_at): lower is collected first
EdgeKey = tuple[str, str, EdgeType]  # (src, dst, edge_type): an edge's key in its session


@dataclass
class GcPlan:
    """What one sweep would do to a graph."""

    collect: list[str] = field(default_factory=list)  # in collection order
    deferred: list[str] = field(default_factory=list)  # due, unprotected, left by the cap
    kept: dict[str, str] = field(default_factory=dict)  # due but kept: node id -> reason
    due: int = 0  # concepts due before any protection
    young: int = 0  # concepts under min_age_s, never looked at
    # weak edges the sweep drops, in graph order; none touches a concept in ``collect``
    drop_edges: list[EdgeKey] = field(default_factory=list)

    @property
    def cap_bound(self) -> bool:
        return bool(self.deferred)

    @property
    def resources_spared_by_dependents(self) -> int:
        return sum(1 for reason in self.kept.values() if reason == KEPT_DEPENDENTS)


PLAN_CHUNK = 2_000  # concepts scored per hold of the index lock


class _SummaryOnce(EdgeView):
    """recall's EdgeView, remembering the last concept summarised.

    The plan reads a concept's summary (is it edgeless?) right before
    ``base_parts`` reads it again; past the view's shared cache
    (``index.caches.SUMMARY_CACHE_SIZE`` concepts) that would walk its edges twice.
    """

    def __init__(self, graph: SessionGraph, summaries: EdgeSummaries | None) -> None:
        super().__init__(graph, summaries)
        self._last: tuple[str, EdgeSummary] | None = None

    def summary(self, node_id: str) -> EdgeSummary:
        last = self._last
        if last is not None and last[0] == node_id:
            return last[1]
        found = super().summary(node_id)
        self._last = (node_id, found)
        return found


def plan_sweep(
    graph: SessionGraph,
    now: float,
    settings: GcSettings,
    *,
    pending_access: Callable[[str], int] | None = None,
    lock: AbstractContextManager[object] | None = None,
    summaries: EdgeSummaries | None = None,
) -> GcPlan:
    """Which concepts a sweep at ``now`` collects, defers and keeps; which weak edges it drops.

    With ``lock`` (the session index lock) the concepts are scored
    ``PLAN_CHUNK`` at a time, each chunk under one hold, and the protections
    are settled under one more, so recalls wait for a chunk, not the whole
    plan. That is only a consistent reading on the session's writer thread,
    the one thread that changes the graph. Without ``lock`` the caller holds
    it (or owns the graph). ``pending_access`` gives recall's access counts
    not yet written to the store, so the base score is the one recall ranks
    with.
    """
    hold: AbstractContextManager[object] = lock if lock is not None else nullcontext()
    plan = GcPlan()
    with hold:
        node_ids = graph.concept_ids()
        view = _SummaryOnce(graph, summaries)
        max_degree = graph.max_degree
        interactions = interaction_count(graph)
    doomed: dict[str, _Rank] = {}
    check: list[str] = []  # doomed concepts a protection may rescue (the rest cannot be)
    weak: list[EdgeKey] = []
    for start in range(0, len(node_ids), PLAN_CHUNK):
        with hold:
            for node_id in node_ids[start : start + PLAN_CHUNK]:
                concept = graph.concept(node_id)
                if concept is None:
                    continue
                weak.extend(_weak_edges_out(graph, node_id, now))
                if now - concept.created_at < settings.min_age_s:
                    plan.young += 1
                    continue
                if view.summary(node_id)[0] == 0:
                    standing = _EDGELESS
                else:
                    standing = base_parts(
                        graph,
                        concept,
                        now,
                        max_degree=max_degree,
                        interactions=interactions,
                        pending_access=pending_access(node_id) if pending_access else 0,
                        view=view,
                    ).total
                    if standing >= settings.bar(concept.concept_type):
                        continue
                plan.due += 1
                against = graph.edges_out(node_id, (EdgeType.CONTRADICTS,))
                if concept.status in PROTECTED_STATUSES:
                    plan.kept[node_id] = KEPT_STATUS
                elif _contradicts_held(graph, node_id, against):
                    plan.kept[node_id] = KEPT_CONTRADICTS_HELD
                else:
                    doomed[node_id] = (standing, concept.created_at)
                    if against or _has_dependents(graph, concept):
                        check.append(node_id)

    with hold:
        shown = _Corrections(graph, now, settings.edge_min_age_s)
        _settle(graph, doomed, shown, plan.kept, check)
    # lowest standing first, then oldest, then id
    order = sorted(doomed, key=lambda nid: (*doomed[nid], nid))
    capped = {nid: doomed[nid] for nid in order[: settings.per_sweep_cap]}
    if len(capped) < len(order):
        # The cap leaves some due concepts in memory: anything they need stays with them.
        held_by_cap: dict[str, str] = {}
        with hold:
            _settle(graph, capped, shown, held_by_cap, list(capped))
    plan.collect = [nid for nid in order if nid in capped]
    plan.deferred = [nid for nid in order if nid not in capped]
    # an edge touching a collected concept goes with it (delete_concepts)
    plan.drop_edges = [key for key in weak if key[0] not in capped and key[1] not in capped]
    return plan


def _weak_edges_out(graph: SessionGraph, node_id: str, now: float) -> list[EdgeKey]:
    """A concept's weak edges out: CoOccurrence/Semantic, under 0.5, an hour old."""
    return [
        (edge.src, edge.dst, edge.edge_type)
        for edge in graph.edges_out(node_id, WEAK_EDGE_TYPES)
        if edge.weight < WEAK_EDGE_WEIGHT and now - edge.created_at >= WEAK_EDGE_AGE_S
    ]


def _has_dependents(graph: SessionGraph, concept: Concept) -> bool:
    """A Resource with a dependent edge either way (whether that dependent stays is settled
    later)."""
    if concept.concept_type is not ConceptType.RESOURCE:
        return False
    return bool(
        graph.edges_in(concept.id, (EdgeType.DEPENDENCY,))
        or graph.edges_out(concept.id, (EdgeType.HIERARCHICAL,))
    )


def _contradicts_held(graph: SessionGraph, node_id: str, against: Iterable[Edge]) -> bool:
    """Whether the concept contradicts (``against``: its Contradicts edges out) a Venerable or
    Canonical concept of the session."""
    for edge in against:
        target = graph.concept(edge.dst)
        if edge.dst != node_id and target is not None and target.status in PROTECTED_STATUSES:
            return True
    return False


class _Corrections:
    """The correction recall shows for a concept (``is_contradicted(...).by``), memoised."""

    def __init__(self, graph: SessionGraph, now: float, edge_min_age: float) -> None:
        self._graph = graph
        self._now = now
        self._edge_min_age = edge_min_age
        self._memo: dict[str, str | None] = {}

    def __call__(self, node_id: str) -> str | None:
        if node_id not in self._memo:
            info = is_contradicted(self._graph, node_id, self._now, self._edge_min_age)
            self._memo[node_id] = info.by if info is not None else None
        return self._memo[node_id]


def _rests_on(graph: SessionGraph, node_id: str) -> Iterable[str]:
    """The concepts ``node_id`` is a dependent of: what it cites, and its parents."""
    for edge in graph.edges_out(node_id, (EdgeType.DEPENDENCY,)):
        yield edge.dst
    for edge in graph.edges_in(node_id, (EdgeType.HIERARCHICAL,)):
        yield edge.src


def _settle(
    graph: SessionGraph,
    doomed: dict[str, _Rank],
    shown: Callable[[str], str | None],
    kept: dict[str, str],
    check: Iterable[str],
) -> None:
    """Take out of ``doomed`` every concept something staying in memory needs.

    The least fixed point: a concept is rescued only by one that stays (is not
    in ``doomed``), and every rescue is followed through, so a chain is kept
    whole and a pair that only contradict each other keeps neither alive.
    ``check`` lists the doomed concepts that may be rescued to begin with
    (those with an against or, for a Resource, a dependent); the rest can
    only be reached through a rescue.
    """
    rescued: list[str] = []

    def stays(node_id: str) -> bool:
        return node_id in graph and node_id not in doomed

    def keep(node_id: str, reason: str) -> None:
        if node_id in doomed:
            del doomed[node_id]
            kept[node_id] = reason
            rescued.append(node_id)

    for node_id in check:
        if node_id not in doomed:
            continue
        concept = graph.concept(node_id)
        if (
            concept is not None
            and concept.concept_type is ConceptType.RESOURCE
            and any(stays(d) for d in graph.dependents(node_id))
        ):
            keep(node_id, KEPT_DEPENDENTS)
            continue
        for edge in graph.edges_out(node_id, (EdgeType.CONTRADICTS,)):
            if edge.dst != node_id and stays(edge.dst) and shown(edge.dst) == node_id:
                keep(node_id, KEPT_CORRECTION)
                break
    while rescued:
        node_id = rescued.pop()
        correction = shown(node_id)
        if correction is not None:
            keep(correction, KEPT_CORRECTION)
        for rested in _rests_on(graph, node_id):
            target = graph.concept(rested)
            if (
                rested != node_id
                and target is not None
                and target.concept_type is ConceptType.RESOURCE
            ):
                keep(rested, KEPT_DEPENDENTS)
