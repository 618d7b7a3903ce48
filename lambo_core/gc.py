"""Garbage collection: sweeps that drop the concepts and weak edges memory no longer needs.

Spec: lambo_stats (``gc``), "Keeping a concept alive" under Contradiction
warnings, "Saying an existing concept is wrong" (its garbage-collection
exceptions), and issue 7 ("Resources others depend on"). Numbers start from
the 0.2.2 release (``shared/notes/lambo-v02-facts.md``) and are knobs in
``[gc]`` of lambo.toml.

When. The daemon calls ``maybe_sweep`` on the session's single writer
thread. A session that never swept starts its clock at the first call
(``last_gc_at`` = now, ``last_gc_epoch`` = the session's mutation count, no
sweep). After that a sweep runs once ``mutations_per_sweep`` (10,000)
mutations have accumulated since ``last_gc_epoch`` (trigger ``mutations``),
or ``elapsed_s`` (3600 s) have passed since ``last_gc_at`` (trigger
``elapsed``). Each sweep stores both again with the session.

What a sweep collects. A concept is *due* when it is at least ``min_age_s``
(3600 s) old, measured from when it was written, and either

- it has no edge at all, either way, of any type (a Derives edge from the
  interaction that wrote it counts), or
- its base score (``recall.base_parts``, the score recall ranks with, with
  the access counts recall holds in RAM) is below ``score_floor`` (0.12)
  divided by its type's resistance (Constraint 1.5, Entity 1.2, Logic 1.1,
  Resource 1.0, Observation 0.7).

The age floor is ours, not 0.2.2's: a fresh Observation in a large session
can score under its bar the moment it is written (0.25 recency - 0.10 type
offset, before anyone cites or recalls it), and without the floor a sweep
right after the write would take it.

What a sweep never collects (each due concept kept for one of these counts
under ``SweepReport.kept``):

- ``status``: a Venerable or Canonical concept.
- ``contradicts_held``: a concept with an ``against`` (Contradicts edge) on a
  Venerable or Canonical concept, while that one holds its status, whether or
  not the warning still fires.
- ``correction`` (#197): the concept recall shows as the correction of a
  contradicted concept (``contradiction.is_contradicted``, any status) that
  stays in memory after this sweep. The protection ends when the contradicted
  concept is collected, in this sweep too, or when newer evidence outweighs
  the contradiction. It is worked out as a least fixed point: a concept is
  kept for this only by one that stays for some other reason, so two
  concepts that only contradict each other keep neither alive.
- ``dependents``: a Resource under its bar that another concept staying in
  memory depends on (cites it in depends_on, or is its parent_of child);
  counted as ``resources_spared_by_dependents``. Also a fixed point: a
  Resource whose dependents are all collected goes with them.

The cap. At most ``per_sweep_cap`` (2,000) concepts are collected per sweep,
the lowest standing first (edgeless, then by base score, then oldest, then
id). The rest are ``deferred`` to the next sweep; ``cap_bound`` says that
happened. Capping never breaks a protection: the rules above are settled
again against the capped set, so a correction whose contradicted concept
the cap deferred stays with it (counted as deferred).

How. Collected concepts are deleted with ``Store.delete_concepts`` (both
stores remove every edge touching them in the same transaction, so no edge
is left pointing at a collected concept), then mirrored out of the session
index with ``SessionIndex.remove_concepts`` (which takes the index lock).
Then the weak edges (below) are deleted with ``Store.delete_edges`` (one
transaction) and mirrored with ``SessionIndex.remove_edges``, ``PLAN_CHUNK``
edges per hold of the index lock. The plan scores concepts under the index
lock ``PLAN_CHUNK`` (2,000) at a time and settles the protections under one
more hold, so a recall waits for a chunk, never a whole sweep; that reading
is consistent because the sweep runs on the writer thread, the only thread
that changes the graph.

Survivors. Every concept still in memory after a sweep, except those only the
cap deferred, has survived it and is owed one ``gc_survived`` (the
canonization gate "survived at least 3 sweeps" reads it). A sweep writes at
most ``survivor_bumps_per_sweep`` (100,000) of the bumps owed
(``Store.bump_gc_survived``, mirrored on the graph's concepts); the rest
stay owed in RAM (``survivors_deferred``) for ``drain_survivors`` or the
next sweep. Owed bumps do not survive a restart.

Weak edges. As in 0.2.2, a sweep also drops weak CoOccurrence/Semantic edges:
weight under 0.5, never reinforced (a reinforcement adds 1.0, so an edge
under 0.5 was never reinforced), written (``created_at``) at least an hour
before the sweep, whatever their ends: Venerable/Canonical status protects a
concept, not the weak edges touching it. A weak edge touching a concept the
sweep collects goes with that concept; ``SweepReport.weak_edges`` counts only
the weak edges dropped on their own. Dropping an edge removes no concept, so
it never leaves an edge pointing at a missing one. The protections (status,
and Contradicts, Dependency and Hierarchical edges) never read a CoOccurrence
or Semantic edge, so a drop takes none away; the base score does read them
(degree, edge bonus), so a concept may fall under its bar by the next sweep.

- Not capped. ``per_sweep_cap`` is the spec's ``collection_cap``: it counts
  concepts, and ``deferred``/``cap_bound`` report concepts only. Weak edges
  are all dropped by the sweep that finds them: the plan reads those edges
  anyway, after the first sweep each one drops only the edges that came of
  age since the one before, and a cap below the rate weak edges are written
  would leave a backlog that never drains. Lock holds stay short all the
  same: the drop is mirrored ``PLAN_CHUNK`` edges per hold of the index
  lock, so a recall waits for a chunk, never the whole drop.
- Same plan, next sweep. Both the concepts to collect and the edges to drop
  are planned on the graph as it stood before the sweep, so whether a concept
  is due, and every protection, is judged as if no edge had been dropped. A
  concept a dropped edge leaves with no edge at all is therefore not
  collected in the same sweep: it survives it (and is owed its
  ``gc_survived``), and the next sweep finds it edgeless and due, if it is
  still edgeless then and past ``min_age_s``, and collects it unless a
  protection keeps it (its status: an edgeless concept has no edge for any
  other protection to read).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .contradiction import DEFAULT_EDGE_MIN_AGE_S, is_contradicted
from .errors import LamboError
from .index.caches import EdgeSummaries, EdgeSummary
from .model import ESTABLISHED, Concept, ConceptType, Edge, EdgeType
from .owned import PerOwner
from .scoring import (
    EdgeView,
    base_parts,
    interaction_count,
)
from .text import format_rfc3339

if TYPE_CHECKING:
    from .config import Config
    from .index.graph import SessionGraph
    from .session import Session

log = logging.getLogger(__name__)

Trigger = Literal["mutations", "elapsed"]
TRIGGERS: tuple[Trigger, ...] = ("mutations", "elapsed")

RESISTANCE: dict[ConceptType, float] = {
    ConceptType.CONSTRAINT: 1.5,
    ConceptType.ENTITY: 1.2,
    ConceptType.LOGIC: 1.1,
    ConceptType.RESOURCE: 1.0,
    ConceptType.OBSERVATION: 0.7,
}
PROTECTED_STATUSES = ESTABLISHED  # never collected

# 0.2.2's weak-edge rule: a sweep drops these (see "Weak edges" above).
WEAK_EDGE_TYPES = (EdgeType.COOCCURRENCE, EdgeType.SEMANTIC)
WEAK_EDGE_WEIGHT = 0.5
WEAK_EDGE_AGE_S = 3600.0

# Why a due concept was kept (``GcPlan.kept`` values, ``SweepReport.kept`` keys).
KEPT_STATUS = "status"
KEPT_CONTRADICTS_HELD = "contradicts_held"
KEPT_CORRECTION = "correction"
KEPT_DEPENDENTS = "dependents"

_EDGELESS = -math.inf  # sorts an edgeless concept before every scored one
_Rank = tuple[float, float]  # (standing, created_at): lower is collected first
EdgeKey = tuple[str, str, EdgeType]  # (src, dst, edge_type): an edge's key in its session


@dataclass(frozen=True)
class GcSettings:
    """Garbage collection's knobs (``[gc]`` in lambo.toml; defaults documented above)."""

    mutations_per_sweep: int = 10_000
    elapsed_s: float = 3600.0
    per_sweep_cap: int = 2_000
    score_floor: float = 0.12
    min_age_s: float = 3600.0
    survivor_bumps_per_sweep: int = 100_000
    edge_min_age_s: float = DEFAULT_EDGE_MIN_AGE_S  # canonization_edge_min_age (the #197 rule)

    @classmethod
    def from_config(cls, config: Config) -> GcSettings:
        return cls(
            mutations_per_sweep=int(config.get("gc.mutations_per_sweep")),
            elapsed_s=float(config.get("gc.elapsed_s")),
            per_sweep_cap=int(config.get("gc.per_sweep_cap")),
            score_floor=float(config.get("gc.score_floor")),
            min_age_s=float(config.get("gc.min_age_s")),
            survivor_bumps_per_sweep=int(config.get("gc.survivor_bumps_per_sweep")),
            edge_min_age_s=float(config.get("canonization.edge_min_age_s")),
        )

    def bar(self, concept_type: ConceptType) -> float:
        """The base score under which a concept of this type is due."""
        return self.score_floor / RESISTANCE[concept_type]


# =====================================================================================
# the plan: a pure function of the graph, the time and the settings
# =====================================================================================


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
    (``scoring.SUMMARY_CACHE_SIZE`` concepts) that would walk its edges twice.
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


# =====================================================================================
# sweeps on a session
# =====================================================================================


@dataclass(frozen=True)
class SweepReport:
    """One sweep's accounting. ``to_json`` is lambo_stats's ``gc.last_sweep``."""

    trigger: Trigger
    at: float
    epoch: int  # the mutation count the sweep ran at (the next sweep counts from it)
    collected: int
    deferred: int
    collection_cap: int
    cap_bound: bool
    resources_spared_by_dependents: int
    survivors_deferred: int
    # beyond the spec's keys: for logs, tests and the daemon
    collected_ids: tuple[str, ...] = ()
    kept: dict[str, int] = field(default_factory=dict)  # reason -> due concepts kept for it
    survivors_bumped: int = 0
    weak_edges: int = 0  # weak edges dropped (not those that went with a collected concept)
    duration_ms: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "trigger": self.trigger,
            "collected": self.collected,
            "deferred": self.deferred,
            "collection_cap": self.collection_cap,
            "cap_bound": self.cap_bound,
            "resources_spared_by_dependents": self.resources_spared_by_dependents,
            "survivors_deferred": self.survivors_deferred,
        }


class _GcState:
    """What a server keeps about one session's collection in RAM."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last: SweepReport | None = None
        self.owed: dict[str, int] = {}  # gc_survived increments not yet written


_STATES: PerOwner[Session, _GcState] = PerOwner(_GcState)


def _state(session: Session) -> _GcState:
    return _STATES.get(session)


def maybe_sweep(session: Session, now: float, settings: GcSettings) -> SweepReport | None:
    """Sweep if a trigger is due; start the clock of a session that never swept.

    Returns the sweep's report, or None when nothing ran (including the first
    call on a session that never swept, which only stores ``last_gc_at`` and
    ``last_gc_epoch``).
    """
    record = session.store.get_session(session.name)
    if record is None:
        return None
    if record.last_gc_at is None:
        session.store.set_gc_clock(session.name, now, record.mutation_count)
        return None
    if record.mutation_count - record.last_gc_epoch >= settings.mutations_per_sweep:
        return sweep(session, now, settings, "mutations")
    if now - record.last_gc_at >= settings.elapsed_s:
        return sweep(session, now, settings, "elapsed")
    return None


def sweep(session: Session, now: float, settings: GcSettings, trigger: Trigger) -> SweepReport:
    """Run one sweep now: collect, drop weak edges, bump survivors, store the clock. On the
    writer thread.

    Concepts go first, then weak edges, each deleted from the store and then
    mirrored in the index. A store failure while deleting propagates with that
    deletion not mirrored (concepts already collected stay collected) and the
    clock unchanged, so the next call plans again; a failure writing survivor
    bumps keeps them owed.
    """
    if trigger not in TRIGGERS:
        raise ValueError(f"trigger must be one of {', '.join(TRIGGERS)}")
    started = time.perf_counter()
    record = session.store.get_session(session.name)
    epoch = record.mutation_count if record is not None else 0
    index = session.index
    plan = plan_sweep(
        index.graph,
        now,
        settings,
        pending_access=lambda node_id: session.access_counts.pending(node_id),
        lock=index.lock,
        summaries=index.summaries,
    )
    if plan.collect:
        session.store.delete_concepts(session.name, plan.collect)
        index.remove_concepts(plan.collect)
    dropped = 0
    if plan.drop_edges:
        dropped = session.store.delete_edges(session.name, plan.drop_edges)
        for start in range(0, len(plan.drop_edges), PLAN_CHUNK):
            index.remove_edges(plan.drop_edges[start : start + PLAN_CHUNK])
    spared_by_cap = set(plan.deferred)  # due, left only by the cap: they outlived nothing
    with index.lock:
        survivors = [nid for nid in index.graph.concept_ids() if nid not in spared_by_cap]
    state = _state(session)
    with state.lock:
        for node_id in plan.collect:
            state.owed.pop(node_id, None)
        owed = state.owed
        for node_id in survivors:
            owed[node_id] = owed.get(node_id, 0) + 1
    bumped = drain_survivors(session, settings.survivor_bumps_per_sweep)
    session.store.set_gc_clock(session.name, now, epoch)
    kept: dict[str, int] = {}
    for reason in plan.kept.values():
        kept[reason] = kept.get(reason, 0) + 1
    report = SweepReport(
        trigger=trigger,
        at=now,
        epoch=epoch,
        collected=len(plan.collect),
        deferred=len(plan.deferred),
        collection_cap=settings.per_sweep_cap,
        cap_bound=plan.cap_bound,
        resources_spared_by_dependents=plan.resources_spared_by_dependents,
        survivors_deferred=owed_survivor_bumps(session),
        collected_ids=tuple(plan.collect),
        kept=kept,
        survivors_bumped=bumped,
        weak_edges=dropped,
        duration_ms=(time.perf_counter() - started) * 1000.0,
    )
    with state.lock:
        state.last = report
    log.info(
        "session %s: gc sweep (%s) collected %d, deferred %d (cap %d), kept %s, "
        "dropped %d weak edges, survivor bumps written %d, owed %d, %.0f ms",
        session.name,
        trigger,
        report.collected,
        report.deferred,
        report.collection_cap,
        kept or "none",
        report.weak_edges,
        bumped,
        report.survivors_deferred,
        report.duration_ms,
    )
    return report


def drain_survivors(session: Session, limit: int | None = None) -> int:
    """Write up to ``limit`` owed ``gc_survived`` increments (all if None); how many were written.

    On the writer thread. Concepts collected meanwhile are skipped by the
    store and the graph alike; a store failure keeps the increments owed.
    """
    state = _state(session)
    with state.lock:
        budget = sum(state.owed.values()) if limit is None else limit
        batch: dict[str, int] = {}
        taken = 0
        for node_id, n in state.owed.items():
            if taken >= budget:
                break
            step = min(n, budget - taken)
            batch[node_id] = step
            taken += step
        for node_id, step in batch.items():
            left = state.owed[node_id] - step
            if left:
                state.owed[node_id] = left
            else:
                del state.owed[node_id]
    if not batch:
        return 0
    ids = [node_id for node_id, step in batch.items() for _ in range(step)]
    try:
        session.store.bump_gc_survived(session.name, ids)
    except LamboError as exc:
        log.warning("gc_survived not written (kept owed): %s", exc.render())
        with state.lock:
            for node_id, step in batch.items():
                state.owed[node_id] = state.owed.get(node_id, 0) + step
        return 0
    with session.index.lock:
        graph = session.index.graph
        for node_id, step in batch.items():
            concept = graph.concept(node_id)
            if concept is not None:
                concept.gc_survived += step
        graph.touch()
    return taken


def owed_survivor_bumps(session: Session) -> int:
    """``gc_survived`` increments this server still owes the session's concepts."""
    state = _state(session)
    with state.lock:
        return sum(state.owed.values())


def last_sweep(session: Session) -> SweepReport | None:
    """The most recent sweep this server ran on the session, or None."""
    state = _state(session)
    with state.lock:
        return state.last


def gc_stats(session: Session) -> dict[str, Any]:
    """lambo_stats's ``gc`` object: the stored clock and this server's last sweep."""
    record = session.store.get_session(session.name)
    at = record.last_gc_at if record is not None else None
    report = last_sweep(session)
    return {
        "last_gc_at": format_rfc3339(at) if at is not None else None,
        "last_gc_epoch": record.last_gc_epoch if record is not None else 0,
        "last_sweep": report.to_json() if report is not None else None,
    }
