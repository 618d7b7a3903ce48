"""The gates of one concept's next hop, measured as the next cycle will measure them.

Spec: lambo_inspect's admission section (each gate is ``current <comparison> bar``). The
cycle stops at a concept's first failing gate; inspect measures every one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..index.graph import SessionGraph
from ..model import Concept, Edge, EdgeType, Status, short_id
from ..scoring import BaseParts
from .evidence import NewerSide, Support, aged_blast_radius, measure_support, newer_sides
from .history import DemotionLog
from .locking import held_when
from .rules import LAST_STAGE_REASON, RANK, CanonRules, next_status
from .solo import score_table, solo_parts
from .solo_table import ScoreTable

if TYPE_CHECKING:
    from ..session import Session


@dataclass(frozen=True)
class Check:
    """One gate of one hop: ``current <comparison> bar``."""

    gate: str
    stage: int
    current: float | int | None
    bar: float | int
    comparison: str  # ">=", ">", "<", "=="
    met: bool
    reason: str  # shown when not met

    def as_dict(self) -> dict[str, Any]:
        return {
            "gate": self.gate,
            "stage": self.stage,
            "current": self.current,
            "bar": self.bar,
            "comparison": self.comparison,
            "met": self.met,
        }


@dataclass
class Verdict:
    """The next hop of one concept, and every gate of it as the next cycle measures it."""

    node_id: str
    status: Status
    next: Status | None
    checks: list[Check] = field(default_factory=list)
    solo: BaseParts | None = None
    score: float | None = None
    support: Support | None = None  # measured for stages 1 and 2
    radius: int = 0  # the aged blast radius (measured for stage 3)
    held_by: list[NewerSide] = field(default_factory=list)

    @property
    def eligible(self) -> bool:
        return self.next is not None and all(c.met for c in self.checks)

    @property
    def reasons(self) -> list[str]:
        if self.next is None:
            return [LAST_STAGE_REASON]
        return [f"stage {c.stage}: {c.reason}" for c in self.checks if not c.met]


@dataclass(frozen=True)
class Memo:
    """A concept's counted support as one cycle measured it, and how long that holds."""

    support: Support
    edges: int  # its supporting edges then (a new citation or child changes the count)
    until: float  # when the next of them ages past the floor (inf: none left to age in)


def _plural(n: int, one: str) -> str:
    """``1 other interaction``, ``2 other interactions``."""
    return f"{n} {one}" if n == 1 else f"{n} {one}s"


@dataclass
class Context:
    """What gates read besides the concept: the session's counts, the Solo bar, demotions."""

    session: Session
    graph: SessionGraph
    now: float
    rules: CanonRules
    canonical_count: int
    non_canonical_count: int
    demotions: DemotionLog
    scores: ScoreTable | None = None  # Solo only
    memo: dict[str, Memo] | None = None  # the cycle's support memo (``CycleState``)
    cited: Mapping[str, Mapping[str, Edge]] = field(init=False, repr=False)
    children: Mapping[str, Mapping[str, Edge]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.cited = self.graph.adjacency_in(EdgeType.DEPENDENCY)
        self.children = self.graph.adjacency_out(EdgeType.HIERARCHICAL)

    @classmethod
    def measure(
        cls,
        session: Session,
        now: float,
        rules: CanonRules,
        demotions: DemotionLog,
        *,
        writer: bool = False,
    ) -> Context:
        """Counts and (under Solo) the score table; the caller must not hold the lock."""
        solo = rules.policy == "solo"
        scores = score_table(session, now, rules.solo_percentile, writer=writer) if solo else None
        with held_when(session.index.lock, not writer):
            graph = session.index.graph
            canonical = graph.status_count(Status.CANONICAL)
            total = len(graph)
        return cls(session, graph, now, rules, canonical, total - canonical, demotions, scores)

    def support(self, concept: Concept) -> Support:
        """The concept's counted support now, from the memo while it holds."""
        memo = self.memo
        if memo is None:
            return measure_support(self.graph, concept, self.now, self.rules.edge_min_age_s)
        node_id = concept.id
        cited = self.cited.get(node_id)
        children = self.children.get(node_id)
        edges = (len(cited) if cited else 0) + (len(children) if children else 0)
        found = memo.get(node_id)
        if found is not None and found.edges == edges and self.now < found.until:
            return found.support
        age = self.rules.edge_min_age_s
        measured = measure_support(self.graph, concept, self.now, age)
        until = math.inf
        for peers in (cited, children):
            for edge in (peers or {}).values():
                ripe = edge.created_at + age
                if self.now < ripe < until:
                    until = ripe
        memo[node_id] = Memo(measured, edges, until)
        return measured


def evaluate(ctx: Context, concept: Concept, *, full: bool = True) -> Verdict:
    """The gates of ``concept``'s next hop (the caller holds the index lock).

    ``full`` (inspect) measures every gate; the cycle passes False and stops at
    the first that fails, cheapest first, which decides the same.
    """
    status = concept.status
    following = next_status(status)
    verdict = Verdict(concept.id, status, following)
    table = ctx.scores
    if table is not None and full:  # Solo: inspect shows the score's terms at every stage
        verdict.solo = solo_parts(table, ctx.session, ctx.graph, concept, ctx.now)
        verdict.score = verdict.solo.total
    if following is None:
        return verdict
    stage = RANK[following]
    if stage in (1, 2):
        _support_gates(ctx, concept, verdict, stage, full)
    else:
        _canonical_gates(ctx, concept, verdict, full)
    return verdict


def _stops(verdict: Verdict, full: bool) -> bool:
    """Whether the cycle stops here: the gate just measured failed (inspect never stops)."""
    return not full and not verdict.checks[-1].met


def _support_gates(
    ctx: Context, concept: Concept, verdict: Verdict, stage: int, full: bool
) -> None:
    """Stages 1 and 2: dependents, then the agents (Swarm) or the Solo gates."""
    rules = ctx.rules
    support = verdict.support = ctx.support(concept)
    bar = rules.candidate_min_interactions if stage == 1 else rules.venerable_min_interactions
    verdict.checks.append(
        Check(
            "dependents",
            stage,
            support.interactions,
            bar,
            ">=",
            support.interactions >= bar,
            f"dependents from {_plural(support.interactions, 'other interaction')}"
            f", needs at least {bar}",
        )
    )
    if _stops(verdict, full):
        return
    if rules.policy == "swarm" and stage == 2:
        verdict.checks.append(
            Check(
                "agents",
                stage,
                support.agents,
                rules.min_agents,
                ">=",
                support.agents >= rules.min_agents,
                f"dependents from {_plural(support.agents, 'agent')} besides the "
                f"writer, needs at least {rules.min_agents}",
            )
        )
    if rules.policy == "solo":
        _solo_gates(ctx, concept, verdict, stage, full)


def _solo_gates(ctx: Context, concept: Concept, verdict: Verdict, stage: int, full: bool) -> None:
    """Solo: at stage 1 the session's size and the sweeps survived; at both the score."""
    rules, checks = ctx.rules, verdict.checks
    if stage == 1:
        n = ctx.non_canonical_count
        checks.append(
            Check(
                "session_concepts",
                stage,
                n,
                rules.solo_min_concepts,
                ">=",
                n >= rules.solo_min_concepts,
                f"the session holds {_plural(n, 'non-canonical concept')}"
                f", needs at least {rules.solo_min_concepts}",
            )
        )
        if _stops(verdict, full):
            return
        survived, bar = concept.gc_survived, rules.solo_min_gc_survived
        checks.append(
            Check(
                "gc_survived",
                stage,
                survived,
                bar,
                ">=",
                survived >= bar,
                f"survived {_plural(survived, 'garbage-collection sweep')}, needs at least {bar}",
            )
        )
        if _stops(verdict, full):
            return
    table = ctx.scores
    if verdict.score is None and table is not None:
        verdict.score = solo_parts(table, ctx.session, ctx.graph, concept, ctx.now).total
    checks.append(_score_check(ctx, verdict, stage))


def _canonical_gates(ctx: Context, concept: Concept, verdict: Verdict, full: bool) -> None:
    """Stage 3, Venerable -> Canonical: the budget, the cooldown, the blast radius, held."""
    rules, checks, now = ctx.rules, verdict.checks, ctx.now
    budget = rules.canonical_budget
    checks.append(
        Check(
            "canonical_budget",
            3,
            ctx.canonical_count,
            budget,
            "<",
            ctx.canonical_count < budget,
            f"the Canonical budget is full ({ctx.canonical_count} of {budget}); no Stage 3 "
            "window runs while it is",
        )
    )
    if _stops(verdict, full):
        return
    checks.append(_cooldown_check(ctx, concept))
    if _stops(verdict, full):
        return
    radius = aged_blast_radius(ctx.graph, concept.id, now, rules.edge_min_age_s)
    verdict.radius = radius
    floor = rules.canonical_min_blast_radius
    checks.append(
        Check(
            "blast_radius",
            3,
            radius,
            floor,
            ">",
            radius > floor,
            f"blast radius {radius} (edges at least {rules.edge_min_age_s:g}s old), "
            f"needs more than {floor}",
        )
    )
    if _stops(verdict, full) or not rules.supersede:
        return
    verdict.held_by = newer_sides(ctx.graph, concept.id, now, rules)
    held = len(verdict.held_by)
    by = verdict.held_by[0].by if held else ""
    checks.append(
        Check(
            "held",
            3,
            held,
            0,
            "==",
            held == 0,
            f"held: contradicted by {short_id(by)} with newer evidence",
        )
    )


def _cooldown_check(ctx: Context, concept: Concept) -> Check:
    cooldown = ctx.rules.demotion_cooldown_s
    demotion = ctx.demotions.get(concept.id)
    since = None if demotion is None else round(ctx.now - demotion.at, 3)
    cooled = since is None or since >= cooldown
    return Check(
        "cooldown",
        3,
        since,
        cooldown,
        ">=",
        cooled,
        f"demoted {since:g}s ago, waits {cooldown:g}s after a demotion"
        if since is not None
        else "",
    )


def _score_check(ctx: Context, verdict: Verdict, stage: int) -> Check:
    table = ctx.scores
    bar = table.bar if table is not None else math.inf
    score = verdict.score if verdict.score is not None else -math.inf
    pct = f"{ctx.rules.solo_percentile:g}th percentile"
    return Check(
        "score",
        stage,
        round(score, 4),
        round(bar, 4) if math.isfinite(bar) else bar,
        ">",
        score > bar,
        f"score {score:.4f} is not above the session's {pct} {bar:.4f}",
    )
