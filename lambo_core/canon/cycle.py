"""One canonization cycle: decide at most one step per concept, then persist each step.

Spec: lambo_stats (the canonization counters) and lambo_saints. The daemon runs
``run_cycle`` on the session's writer thread; the order of the steps is in
docs/design.md, "Canonization".
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from ..errors import LamboError
from ..index.graph import SessionGraph
from ..model import CanonizationEvent, Concept, EdgeType, Status
from .evidence import newer_sides
from .gates import Context, Memo, Verdict, evaluate
from .history import CanonHistory, Demotion, DemotionLog
from .locking import held_when
from .rules import RANK, STAGES, Reason
from .solo import SCREEN_EPSILON

log = logging.getLogger(__name__)

_Order = tuple[float, float, str]  # best first: (-merit, created_at, node id)


@dataclass
class Step:
    """One status change a cycle decided."""

    node_id: str
    from_status: Status
    to_status: Status
    blast_radius: int | None = None  # only on the promotion to Canonical
    reason: Reason | None = None  # demotions only
    by: str | None = None


@dataclass
class CycleState:
    """What a daemon carries from one cycle to the next.

    Stage 2's round-robin cursor, and the support memo: each concept's counted
    support as a cycle measured it. Support changes only when a supporting
    edge is written, ages past the floor, or goes away; an entry is used while
    the concept has as many supporting edges as then and none has aged in
    since. The whole memo is dropped when the clock went back, the graph or the
    age floor changed, or ``forget`` is called (the daemon calls it after a
    sweep, which removes concepts). A memoized measure never takes a step
    alone: each step is measured afresh before it is taken.
    """

    stage2_cursor: str = ""
    memo: dict[str, Memo] = field(default_factory=dict)
    memo_at: float | None = None
    memo_graph: int = 0
    memo_age: float = -1.0

    def forget(self) -> None:
        self.memo.clear()
        self.memo_at = None

    def refresh(self, graph: SessionGraph, now: float, edge_min_age: float) -> None:
        """Drop the whole memo when it cannot hold (see the class docstring)."""
        if (
            self.memo_at is None
            or now < self.memo_at
            or self.memo_graph != id(graph)
            or self.memo_age != edge_min_age
        ):
            self.memo.clear()
        self.memo_at, self.memo_graph, self.memo_age = now, id(graph), edge_min_age


@dataclass
class CycleReport:
    """What one cycle did."""

    at: float
    steps: list[Step] = field(default_factory=list)
    looked_at: int = 0
    elapsed_ms: float = 0.0
    failed: str | None = None  # the store's refusal that stopped the cycle early

    @property
    def promotions(self) -> int:
        return sum(1 for s in self.steps if RANK[s.to_status] > RANK[s.from_status])

    @property
    def demotions(self) -> int:
        return sum(1 for s in self.steps if RANK[s.to_status] < RANK[s.from_status])


def _confirmed(ctx: Context, concept: Concept) -> bool:
    """Whether a step the memo allowed holds when measured afresh (and the memo corrected)."""
    if ctx.memo is not None:
        ctx.memo.pop(concept.id, None)  # measured afresh (and memoized again) below
    return evaluate(ctx, concept, full=False).eligible


def decide(ctx: Context, state: CycleState) -> tuple[list[Step], int]:
    """This cycle's steps, at most one per concept (caller holds the index lock).

    In order: demotions, the Stage 3 window, Stage 2, Stage 1. Returns the steps
    and how many concepts were evaluated.
    """
    by_status = _by_status(ctx)
    canonicals = by_status[Status.CANONICAL]
    steps: list[Step] = []
    looked = _demotions(ctx, canonicals, steps)
    looked += _stage_three(ctx, by_status[Status.VENERABLE], len(canonicals), steps)
    looked += _stage_two(ctx, by_status[Status.CANDIDATE], state, steps)
    looked += _stage_one(ctx, by_status[Status.NONE], steps)
    return steps, looked


def _by_status(ctx: Context) -> dict[Status, list[Concept]]:
    """Every concept by status; Stage 1 needs support (unless its bar is 0), so a concept
    nothing supports is left out."""
    by_status: dict[Status, list[Concept]] = {s: [] for s in STAGES}
    cited, children = ctx.cited, ctx.children
    every = ctx.rules.candidate_min_interactions <= 0
    none = Status.NONE
    for concept in ctx.graph.iter_concepts():
        status = concept.status
        node_id = concept.id
        if status is none and not every and node_id not in cited and node_id not in children:
            continue
        by_status[status].append(concept)
    return by_status


def _demotions(ctx: Context, canonicals: Sequence[Concept], steps: list[Step]) -> int:
    """Over the budget (lowest blast radius first), then supersession; how many were looked at."""
    rules, graph = ctx.rules, ctx.graph
    over = len(canonicals) - rules.canonical_budget
    demoted: set[str] = set()
    if over > 0:
        ranked = sorted(canonicals, key=lambda c: (graph.blast_radius(c.id), -c.created_at, c.id))
        for concept in ranked[: min(over, rules.batch)]:
            steps.append(Step(concept.id, Status.CANONICAL, Status.VENERABLE, reason="budget"))
            demoted.add(concept.id)
    if not rules.supersede:
        return 0
    looked = superseded = 0
    for concept in sorted(canonicals, key=lambda c: c.id):
        if concept.id in demoted or superseded >= rules.batch:
            continue
        if not graph.edges_in(concept.id, (EdgeType.CONTRADICTS,)):
            continue
        looked += 1
        sides = newer_sides(graph, concept.id, ctx.now, rules)
        if sides:
            steps.append(
                Step(
                    concept.id,
                    Status.CANONICAL,
                    Status.VENERABLE,
                    reason="superseded",
                    by=sides[0].by,
                )
            )
            superseded += 1
    return looked


def _stage_three(
    ctx: Context, venerables: Sequence[Concept], canonical_count: int, steps: list[Step]
) -> int:
    """The Stage 3 window, only while the budget has room; how many were looked at."""
    room = min(ctx.rules.batch, ctx.rules.canonical_budget - canonical_count)
    if room <= 0:
        return 0
    ready: list[Verdict] = []
    for concept in venerables:
        verdict = evaluate(ctx, concept, full=False)
        if verdict.eligible:
            ready.append(verdict)
    ready.sort(key=lambda v: _best_first(ctx, v))
    for verdict in ready[:room]:
        steps.append(Step(verdict.node_id, Status.VENERABLE, Status.CANONICAL, verdict.radius))
    return len(venerables)


def _stage_two(
    ctx: Context, candidates: Sequence[Concept], state: CycleState, steps: list[Step]
) -> int:
    """At most ``batch`` Candidates looked at, round-robin by id; how many were looked at."""
    ordered = sorted(candidates, key=lambda c: c.id)
    if not ordered:
        return 0
    start = next((i for i, c in enumerate(ordered) if c.id > state.stage2_cursor), 0)
    turn = (ordered[start:] + ordered[:start])[: ctx.rules.batch]
    for concept in turn:
        if evaluate(ctx, concept, full=False).eligible and _confirmed(ctx, concept):
            steps.append(Step(concept.id, Status.CANDIDATE, Status.VENERABLE))
    state.stage2_cursor = turn[-1].id
    return len(turn)


def _stage_one(ctx: Context, concepts: Sequence[Concept], steps: list[Step]) -> int:
    """At most ``batch``, best first; how many were looked at.

    Its first gate is the support (usually memoized); under Swarm it is the only
    one, so a verdict is built only under Solo, after the screen (``_screened``).
    """
    rules = ctx.rules
    solo = rules.policy == "solo"
    if solo and ctx.non_canonical_count < rules.solo_min_concepts:
        return 0
    order: list[_Order] = []
    for concept in concepts:
        support = ctx.support(concept)
        if support.interactions < rules.candidate_min_interactions:
            continue
        if not solo:
            order.append((-float(support.interactions), concept.created_at, concept.id))
        elif _screened(ctx, concept):
            verdict = evaluate(ctx, concept, full=False)
            if verdict.eligible:
                order.append(_best_first(ctx, verdict))
    taken = 0
    for *_, node_id in _best(order, 2 * rules.batch):
        if taken >= rules.batch:
            break
        held = ctx.graph.concept(node_id)
        if held is not None and _confirmed(ctx, held):
            steps.append(Step(node_id, Status.NONE, Status.CANDIDATE))
            taken += 1
    return len(concepts)


def _screened(ctx: Context, concept: Concept) -> bool:
    """Solo's cheap gates, and the score the bar was taken with, before a score is measured.

    A concept whose score rose since a reused bar waits for the next bar (at most
    ``SOLO_BAR_MAX_AGE_S``); nothing is taken on a stale score.
    """
    if concept.gc_survived < ctx.rules.solo_min_gc_survived:
        return False
    table = ctx.scores
    if table is not None:
        known = table.scores.get(concept.id)
        if known is not None and known < table.bar - SCREEN_EPSILON:
            return False
    return True


def _best(order: list[_Order], likely: int) -> Iterator[_Order]:
    """``order`` smallest first, sorting all of it only if more than ``likely`` are wanted."""
    head = heapq.nsmallest(likely, order)
    yield from head
    if len(head) < len(order):
        yield from sorted(order)[len(head) :]


def _best_first(ctx: Context, verdict: Verdict) -> _Order:
    """Solo: highest score first. Swarm: at stage 3 the largest blast radius, before it the
    most other interactions. Then the oldest, then the id."""
    concept = ctx.graph.concept(verdict.node_id)
    created = concept.created_at if concept is not None else 0.0
    if ctx.rules.policy == "solo" and verdict.score is not None:
        return (-verdict.score, created, verdict.node_id)
    if verdict.support is not None:
        return (-float(verdict.support.interactions), created, verdict.node_id)
    return (-float(verdict.radius), created, verdict.node_id)


def apply_step(history: CanonHistory, step: Step, now: float, demotions: DemotionLog) -> None:
    """Persist one step (status, then its event), then mirror it into the graph."""
    session = history.session
    store = session.store
    store.set_status(session.name, step.node_id, step.to_status)
    store.add_canon_event(
        CanonizationEvent(
            session=session.name,
            node_id=step.node_id,
            from_status=step.from_status,
            to_status=step.to_status,
            blast_radius=step.blast_radius if step.to_status is Status.CANONICAL else None,
            occurred_at=now,
        )
    )
    with session.index.lock:
        session.index.graph.set_status(step.node_id, step.to_status)
    if step.reason is not None:
        demotions.record(
            Demotion(step.node_id, now, step.from_status, step.to_status, step.reason, step.by)
        )


def run_cycle(
    history: CanonHistory, now: float, state: CycleState, *, writer: bool = True
) -> CycleReport:
    """One canonization cycle of ``history``'s session under its rules: decide, then persist.

    It runs on the session's writer thread (``WritePipeline.every``), the only
    thread that changes the graph, so ``writer`` (the default) decides without
    holding the index lock: readers keep going while it reads, and each step is
    still mirrored into the graph under the lock. Pass ``writer=False`` from
    any other thread, to hold the lock while deciding. A store refusal stops
    the cycle at that step: the steps before it stand, the rest are decided
    again next cycle.
    """
    session, rules = history.session, history.rules
    started = time.perf_counter()
    report = CycleReport(at=now)
    try:
        demotions = history.log()
        ctx = Context.measure(session, now, rules, demotions, writer=writer)
        with held_when(session.index.lock, not writer):
            state.refresh(ctx.graph, now, rules.edge_min_age_s)
            ctx.memo = state.memo
            steps, report.looked_at = decide(ctx, state)
        for step in steps:
            apply_step(history, step, now, demotions)
            report.steps.append(step)
    except LamboError as exc:
        log.warning("canonization cycle stopped: %s (%s)", exc.render(), exc.detail or "")
        report.failed = exc.render()
    report.elapsed_ms = (time.perf_counter() - started) * 1000.0
    return report
