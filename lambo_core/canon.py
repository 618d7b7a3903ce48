"""Canonization: Candidate -> Venerable -> Canonical under a promotion policy, and supersession.

Spec: lambo_inspect (the admission section), lambo_saints, lambo_stats
(``promotion_policy``, canonization counters), "Superseded concepts" and the
canonization history under "Claude Code against the managed CockroachDB
server". The daemon (``daemon.py``) runs ``run_cycle`` on the writer thread;
inspect calls ``admission``; recall calls ``superseded_history``.

**Evidence.** A concept's support is each Dependency edge into it (a concept
citing it in depends_on, or an action's depends_on) and each Hierarchical
edge out of it (its parent_of children), the relation its blast radius
counts. An edge counts once it is ``edge_min_age_s`` old (60 s,
``canonization_edge_min_age``), measured from when it was written, whatever
its event_time. For the interaction and agent gates it also must come from
another interaction: never from the write that wrote the concept (the edge's
interaction, or the supporting concept's, is the concept's own). Each
supporting edge belongs to the interaction that declared it; ``agents``
counts the distinct agents that declared them, the concept's own writer
left out.

**Gates** (stage N is the hop into status N; one check per gate, each
``current <comparison> bar``, listed in this order; numbers are
``[canonization]`` knobs, defaults in brackets, 0.2.2's numbers where the
spec leaves one open):

=====  ================  =====================================================  ============
stage  gate              measured                                               policy
=====  ================  =====================================================  ============
1      dependents        other interactions >= candidate_min_interactions [1]   both
1      session_concepts  non-canonical concepts >= solo_min_concepts [20]       Solo
1      gc_survived       sweeps survived >= solo_min_gc_survived [3]            Solo
1      score             base score > solo_percentile [90] of the session's     Solo
2      dependents        other interactions >= venerable_min_interactions [3]   both
2      agents            agents besides the writer >= min_agents [2]            Swarm
2      score             as at stage 1                                          Solo
3      canonical_budget  Canonical concepts < canonical_budget [1000]           both
3      cooldown          seconds since its last demotion >= demotion_cooldown_s  both
                         [300] (never demoted: met, current null)
3      blast_radius      dependents past the floor > canonical_min_blast_radius  both
                         [5]
3      held              contradicting concepts with newer evidence == 0        supersede on
=====  ================  =====================================================  ============

Swarm spreads trust across agents (0.2.2's time "coverage" is replaced by the
spread across agents the spec names). Solo, for one agent, has no agent to
spread across: it keeps 0.2.2's whole stage 1 instead (a session of at least
20 concepts, a concept that survived 3 garbage-collection sweeps, whose base
score is above the session's 90th percentile) and asks for the score again at
stage 2 (``recall.base_parts``, 0.2.2's weights; its terms are the ``solo``
part of inspect's admission). Survival is time standing in for independent
confirmation: with ``[gc] elapsed_s`` at an hour, a quiet Solo session sees its
first Candidate after about three hours.

**A cycle** (``run_cycle``) takes at most one step per concept: first
demotions (Canonical over the budget, lowest blast radius first; with
``supersede`` on, Canonical concepts whose contradicting concept holds newer
evidence), then the Stage 3 window if the budget has room (best first: the largest
blast radius under Swarm, the highest score under Solo), Stage 2 over at most
``batch`` Candidates in round-robin order, and Stage 1 (at most ``batch``,
best first: the most other interactions under Swarm, the score under Solo).
Each step is persisted (``store.set_status``, then ``store.add_canon_event``)
and mirrored into the graph under the index lock. A promotion to Canonical
records the blast radius its gate measured; every other event records none.

What a cycle costs: it walks every concept once to sort them by status
(skipping unsupported ones for stage 1), stops measuring a concept at its
first failing gate, and keeps each concept's counted support across cycles
(``CycleState``) until a supporting edge is written, ages in or goes away;
every step is measured afresh before it is taken. Under Solo the percentile
bar takes one pass over every concept (``scoring.bulk_scores``, recall's formula);
past ``SOLO_EXACT_MAX`` concepts a bar is reused for up to 10 minutes while
the session's size moves by at most 1%. Stage 1 under Solo screens on the
score each concept had when the bar was taken, so one whose score rose since
waits for the next bar; a gate's score is always taken afresh, so nothing is
promoted on a stale one. ``tests/bench/daemon.py`` times it.

**Supersession** (``canonization_supersede``, off by default). A
contradicting concept C (a Contradicts edge C -> X dated after X itself)
holds *newer evidence* against X when C's own support from at least
``supersede_min_interactions`` [3] other interactions is dated after X's
latest support (or after X itself, with none), with the spread of Stage 2
under Swarm. Support declared by the agent that declared the contradiction
never counts on either side: not for C, and not for X against its own
contradiction (nor C's citations of X). A Canonical X with such a C is
demoted to Venerable (one step per cycle) and held there, the stage 3
``held`` gate failing, while the newer side holds; support for X from
another agent that is newer than C's releases it. A Venerable X a
contradicting concept would supersede at once is held the same way. The
demotion's reason (superseded by C, or budget) is kept in RAM
(``DemotionLog``); after a restart it is worked out again from the stored
events and the graph: a demotion with no contradicting concept still in
memory reads as a budget one.
"""

from __future__ import annotations

import heapq
import logging
import math
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from .contradiction import supporting_edges, written_with
from .errors import LamboError
from .index.graph import SessionGraph
from .model import CanonizationEvent, Concept, Edge, EdgeType, Status, short_id
from .owned import PerOwner
from .scoring import BaseParts, base_parts, bulk_scores
from .text import format_rfc3339, show_safely

if TYPE_CHECKING:
    from .config import Config
    from .session import Session

log = logging.getLogger(__name__)

Policy = Literal["swarm", "solo"]
Reason = Literal["superseded", "budget"]

STAGES = (Status.NONE, Status.CANDIDATE, Status.VENERABLE, Status.CANONICAL)
RANK = {status: i for i, status in enumerate(STAGES)}
LAST_STAGE_REASON = "Canonical is the last stage; there is no next promotion"
QUOTE_CHARS = 80


def next_status(status: Status) -> Status | None:
    i = RANK[status]
    return STAGES[i + 1] if i + 1 < len(STAGES) else None


# =====================================================================================
# the rules
# =====================================================================================


@dataclass(frozen=True)
class CanonRules:
    """The ``[canonization]`` settings a cycle and inspect's admission measure with."""

    policy: Policy = "swarm"
    cycle_interval_s: float = 60.0
    edge_min_age_s: float = 60.0
    supersede: bool = False
    canonical_budget: int = 1000
    candidate_min_interactions: int = 1
    venerable_min_interactions: int = 3
    min_agents: int = 2
    canonical_min_blast_radius: int = 5
    demotion_cooldown_s: float = 300.0
    batch: int = 50
    solo_min_concepts: int = 20
    solo_min_gc_survived: int = 3
    solo_percentile: float = 90.0
    supersede_min_interactions: int = 3
    contradiction_budget: int = 10_000

    @classmethod
    def from_config(cls, config: Config) -> CanonRules:
        def get(name: str) -> Any:
            return config.get(f"canonization.{name}")

        policy: Policy = "solo" if str(get("promotion_policy")) == "solo" else "swarm"
        return cls(
            policy=policy,
            cycle_interval_s=float(get("cycle_interval_s")),
            edge_min_age_s=float(get("edge_min_age_s")),
            supersede=bool(get("supersede")),
            canonical_budget=int(get("canonical_budget")),
            candidate_min_interactions=int(get("candidate_min_interactions")),
            venerable_min_interactions=int(get("venerable_min_interactions")),
            min_agents=int(get("min_agents")),
            canonical_min_blast_radius=int(get("canonical_min_blast_radius")),
            demotion_cooldown_s=float(get("demotion_cooldown_s")),
            batch=int(get("batch")),
            solo_min_concepts=int(get("solo_min_concepts")),
            solo_min_gc_survived=int(get("solo_min_gc_survived")),
            solo_percentile=float(get("solo_percentile")),
            supersede_min_interactions=int(get("supersede_min_interactions")),
            contradiction_budget=int(get("contradiction_budget")),
        )

    @property
    def shown_policy(self) -> str:
        return self.policy.capitalize()


# =====================================================================================
# measuring evidence
# =====================================================================================


@dataclass(frozen=True)
class Support:
    """A concept's counted support at one time."""

    interactions: int  # distinct other interactions that declared counted support
    agents: int  # distinct agents among them, the concept's own writer left out
    latest: float | None  # the latest about-time among the counted edges


def measure_support(
    graph: SessionGraph,
    concept: Concept,
    now: float,
    edge_min_age: float,
    *,
    not_agent: str | None = None,
    not_node: str | None = None,
    after: float | None = None,
) -> Support:
    """Counted support of ``concept`` at ``now`` (see the module docstring).

    ``not_agent`` drops edges that agent declared, ``not_node`` a supporter,
    and ``after`` edges dated (about-time) at or before it.
    """
    interactions: set[str] = set()
    agents: set[str] = set()
    latest: float | None = None
    for other, edge in supporting_edges(graph, concept.id):
        if now - edge.created_at < edge_min_age:
            continue
        if other == not_node or (not_agent is not None and edge.agent_id == not_agent):
            continue
        if after is not None and edge.about_time <= after:
            continue
        supporter = graph.concept(other)
        if written_with(concept, supporter, edge):
            continue
        source = edge.interaction_id or (supporter.interaction_id if supporter else None)
        interactions.add(source or f"node:{other}")
        if edge.agent_id != concept.agent_id:
            agents.add(edge.agent_id)
        if latest is None or edge.about_time > latest:
            latest = edge.about_time
    return Support(len(interactions), len(agents), latest)


def aged_blast_radius(graph: SessionGraph, node_id: str, now: float, edge_min_age: float) -> int:
    """The blast radius the promotion gate measures: dependents whose edge is past the floor."""
    return len(
        {
            other
            for other, e in supporting_edges(graph, node_id)
            if now - e.created_at >= edge_min_age
        }
    )


@dataclass(frozen=True)
class NewerSide:
    """A contradicting concept holding newer evidence against a concept."""

    by: str  # the contradicting concept
    at: float  # the contradiction's date
    agent_id: str  # who declared the contradiction
    interactions: int  # other interactions behind its newer support
    agents: int


def newer_sides(
    graph: SessionGraph, node_id: str, now: float, rules: CanonRules
) -> list[NewerSide]:
    """Every contradicting concept holding newer evidence against ``node_id``, newest first."""
    concept = graph.concept(node_id)
    if concept is None:
        return []
    found: list[tuple[NewerSide, str]] = []
    for edge in graph.edges_in(node_id, (EdgeType.CONTRADICTS,)):
        by = graph.concept(edge.src)
        if by is None or by.id == node_id or edge.about_time <= concept.about_time:
            continue
        defended = measure_support(
            graph, concept, now, rules.edge_min_age_s, not_agent=edge.agent_id, not_node=by.id
        )
        latest = defended.latest if defended.latest is not None else -math.inf
        floor = max(concept.about_time, latest)
        newer = measure_support(
            graph,
            by,
            now,
            rules.edge_min_age_s,
            not_agent=edge.agent_id,
            not_node=node_id,
            after=floor,
        )
        if newer.interactions < rules.supersede_min_interactions:
            continue
        if rules.policy == "swarm" and newer.agents < rules.min_agents:
            continue
        side = NewerSide(by.id, edge.about_time, edge.agent_id, newer.interactions, newer.agents)
        found.append((side, by.canonical_key))
    found.sort(key=lambda pair: (-pair[0].at, pair[1], pair[0].by))
    return [side for side, _ in found]


# =====================================================================================
# Solo's score
# =====================================================================================


SOLO_EXACT_MAX = 20_000  # up to this many concepts the bar is taken afresh at every change
SOLO_BAR_MAX_AGE_S = 600.0  # past it, a bar is reused this long ...
SOLO_BAR_MAX_DRIFT = 0.01  # ... while the session's size moved by at most this share
SCREEN_EPSILON = 1e-9  # the screen never drops a score the gate would pass


@dataclass(frozen=True)
class ScoreTable:
    """The Solo bar (a percentile of every concept's base score) and the terms it used."""

    version: int
    at: float
    size: int  # concepts scored
    bar: float  # the configured percentile of the scores (inf for an empty session)
    scores: dict[str, float]  # each concept's score when the bar was taken
    max_degree: int  # the session-wide terms the scores were taken with
    interactions: int

    def parts(
        self, session: Session, graph: SessionGraph, concept: Concept, now: float
    ) -> BaseParts:
        """One concept's score terms now, with the table's session-wide terms (lock held)."""
        return base_parts(
            graph,
            concept,
            now,
            max_degree=self.max_degree,
            interactions=self.interactions,
            pending_access=session.access_counts.pending(concept.id),
        )


_SCORES: PerOwner[SessionGraph, ScoreTable] = PerOwner()


def _fresh_enough(table: ScoreTable, version: int, size: int, now: float) -> bool:
    if table.version == version and table.at == now:
        return True
    if size <= SOLO_EXACT_MAX or not table.at <= now < table.at + SOLO_BAR_MAX_AGE_S:
        return False
    return abs(size - table.size) <= SOLO_BAR_MAX_DRIFT * table.size


def score_table(
    session: Session, now: float, percentile: float, *, writer: bool = False
) -> ScoreTable:
    """The Solo bar: the ``percentile`` of every concept's base score (``scoring.bulk_scores``).

    Up to ``SOLO_EXACT_MAX`` concepts it is taken again at every change of the
    graph. Past that one pass costs about a second at 100k concepts, so a bar
    is reused for up to ``SOLO_BAR_MAX_AGE_S`` while the session's size stays
    within ``SOLO_BAR_MAX_DRIFT`` of the size it was taken at (a percentile of a
    large session moves slowly); each concept's own score is always taken
    afresh. One pass over the adjacency, under the index lock unless ``writer``
    says the caller is the session's writer thread (see ``run_cycle``).
    """
    index = session.index
    with index.lock:
        graph = index.graph
        version, size = graph.version, len(graph)
        cached = _SCORES.peek(graph)
        if cached is not None and _fresh_enough(cached, version, size, now):
            return cached
    with _held(index.lock, not writer):
        scores, max_degree, interactions = bulk_scores(session, graph, now)
    values = np.fromiter(scores.values(), dtype=np.float64, count=len(scores))
    bar = float(np.percentile(values, percentile)) if len(values) else math.inf
    table = ScoreTable(version, now, len(values), bar, scores, max_degree, interactions)
    _SCORES.put(graph, table)
    return table


# =====================================================================================
# the demotion log
# =====================================================================================


@dataclass(frozen=True)
class Demotion:
    """A concept's latest demotion: when, from and to, and why."""

    node_id: str
    at: float
    from_status: Status
    to_status: Status
    reason: Reason
    by: str | None = None  # the superseding concept, for reason "superseded"


class DemotionLog:
    """Each concept's latest demotion, in RAM; rebuilt from the stored events on first use."""

    def __init__(self) -> None:
        self._last: dict[str, Demotion] = {}
        self._lock = threading.Lock()

    def get(self, node_id: str) -> Demotion | None:
        with self._lock:
            return self._last.get(node_id)

    def record(self, demotion: Demotion) -> None:
        with self._lock:
            self._last[demotion.node_id] = demotion

    def __len__(self) -> int:
        with self._lock:
            return len(self._last)

    @classmethod
    def rebuild(
        cls, events: Iterable[CanonizationEvent], graph: SessionGraph, rules: CanonRules
    ) -> DemotionLog:
        """From stored events: the last demotion per concept, its reason worked out again.

        A demotion reads as superseded when, at its time, a contradicting concept
        held newer evidence (the rule the cycle used), or failing that, when a
        contradiction of the concept dated before it is still in memory; else budget.
        """
        last: dict[str, CanonizationEvent] = {}
        for event in events:
            if RANK[event.to_status] < RANK[event.from_status]:
                last[event.node_id] = event
        out = cls()
        for node_id, event in last.items():
            reason: Reason = "budget"
            by: str | None = None
            sides = newer_sides(graph, node_id, event.occurred_at, rules)
            if sides:
                reason, by = "superseded", sides[0].by
            else:
                dated = sorted(
                    (
                        e
                        for e in graph.edges_in(node_id, (EdgeType.CONTRADICTS,))
                        if e.src in graph and e.about_time <= event.occurred_at
                    ),
                    key=lambda e: (-e.about_time, e.src),
                )
                if dated:
                    reason, by = "superseded", dated[0].src
            out._last[node_id] = Demotion(
                node_id, event.occurred_at, event.from_status, event.to_status, reason, by
            )
        return out


_LOGS: PerOwner[Session, DemotionLog] = PerOwner()


def demotion_log(session: Session, rules: CanonRules | None = None) -> DemotionLog:
    """The session's demotion log, rebuilt from the store on first use (raises StoreError)."""
    found = _LOGS.peek(session)
    if found is not None:
        return found
    events = session.store.canon_events(session.name)
    with session.index.lock:
        # whoever asks first passes the configured rules (recall gets them from the service)
        rules = rules or CanonRules()
        built = DemotionLog.rebuild(events, session.index.graph, rules)
    return _LOGS.setdefault(session, built)


@dataclass(frozen=True)
class SupersededLine:
    """The recall history line of a superseded concept (annotation kind ``superseded``)."""

    node_id: str
    at: float
    by: str
    by_content: str | None  # None once the superseding concept is no longer in memory

    kind: str = "superseded"

    def render(self) -> str:
        when = format_rfc3339(self.at)
        if self.by_content is None:
            return (
                f"⤓ Superseded at {when} by a concept no longer in memory (id {short_id(self.by)})"
            )
        quoted = show_safely(self.by_content, QUOTE_CHARS)
        return f'⤓ Superseded at {when} by "{quoted}" (id {short_id(self.by)})'


def superseded_history(
    session: Session, node_id: str, rules: CanonRules | None = None
) -> SupersededLine | None:
    """What recall shows on ``node_id``: its ``⤓ Superseded at …`` line, or None.

    A line exists while the concept is not Canonical and its latest demotion was
    a supersession (a later budget demotion replaces it). Takes the (reentrant)
    index lock itself; the first call on a session reads the stored events.
    Raises ``StoreError`` if that read fails.
    """
    log_ = demotion_log(session, rules)
    demotion = log_.get(node_id)
    if demotion is None or demotion.reason != "superseded" or demotion.by is None:
        return None
    with session.index.lock:
        graph = session.index.graph
        concept = graph.concept(node_id)
        if concept is None or concept.status is Status.CANONICAL:
            return None
        by = graph.concept(demotion.by)
        return SupersededLine(node_id, demotion.at, demotion.by, by.content if by else None)


# =====================================================================================
# gates
# =====================================================================================


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
        with _held(session.index.lock, not writer):
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
    rules, graph, now = ctx.rules, ctx.graph, ctx.now
    status = concept.status
    following = next_status(status)
    verdict = Verdict(concept.id, status, following)
    checks = verdict.checks
    table = ctx.scores
    if table is not None and full:  # Solo: inspect shows the score's terms at every stage
        verdict.solo = table.parts(ctx.session, graph, concept, now)
        verdict.score = verdict.solo.total
    if following is None:
        return verdict

    def failed() -> bool:
        return not full and not checks[-1].met

    stage = RANK[following]
    if stage in (1, 2):
        support = verdict.support = ctx.support(concept)
        bar = rules.candidate_min_interactions if stage == 1 else rules.venerable_min_interactions
        checks.append(
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
        if failed():
            return verdict
        if rules.policy == "swarm" and stage == 2:
            checks.append(
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
                if failed():
                    return verdict
                survived, bar = concept.gc_survived, rules.solo_min_gc_survived
                checks.append(
                    Check(
                        "gc_survived",
                        stage,
                        survived,
                        bar,
                        ">=",
                        survived >= bar,
                        f"survived {_plural(survived, 'garbage-collection sweep')}, "
                        f"needs at least {bar}",
                    )
                )
                if failed():
                    return verdict
            if verdict.score is None and table is not None:
                verdict.score = table.parts(ctx.session, graph, concept, now).total
            checks.append(_score_check(ctx, verdict, stage))
        return verdict

    # stage 3: Venerable -> Canonical
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
    if failed():
        return verdict
    demotion = ctx.demotions.get(concept.id)
    since = None if demotion is None else round(now - demotion.at, 3)
    cooled = since is None or since >= rules.demotion_cooldown_s
    checks.append(
        Check(
            "cooldown",
            3,
            since,
            rules.demotion_cooldown_s,
            ">=",
            cooled,
            f"demoted {since:g}s ago, waits {rules.demotion_cooldown_s:g}s after a demotion"
            if since is not None
            else "",
        )
    )
    if failed():
        return verdict
    radius = aged_blast_radius(graph, concept.id, now, rules.edge_min_age_s)
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
            f"blast radius {radius} (edges at least {_age(rules)} old), needs more than {floor}",
        )
    )
    if failed():
        return verdict
    if rules.supersede:
        verdict.held_by = newer_sides(graph, concept.id, now, rules)
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
    return verdict


def _age(rules: CanonRules) -> str:
    return f"{rules.edge_min_age_s:g}s"


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


# =====================================================================================
# inspect's admission section
# =====================================================================================


def admission_section(
    session: Session, node_id: str, now: float, rules: CanonRules | None = None
) -> tuple[list[str], dict[str, Any]]:
    """lambo_inspect's canonization section for one concept: (text lines, ``admission``).

    The structured part carries policy, status, next (absent for Canonical),
    eligible, checks, solo (Solo only) and reasons, plus ``held`` (the
    contradicting concepts holding newer evidence) and ``last_demotion`` when
    they apply. The caller must not hold the index lock. Raises ``StoreError``
    when the store cannot answer (the demotion log's first read), and
    ``KeyError`` for a concept not in the session.
    """
    rules = rules or CanonRules()
    demotions = demotion_log(session, rules)
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
        parts = verdict.solo
        bar = ctx.scores.bar if ctx.scores is not None else math.inf
        data["solo"] = {
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
    data["reasons"] = verdict.reasons
    lines += [f"  - {reason}" for reason in verdict.reasons]
    if verdict.held_by:
        data["held"] = [
            {"by": side.by, "at": format_rfc3339(side.at), "agent_id": side.agent_id}
            for side in verdict.held_by
        ]
    if demotion is not None:
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
            lines.append(f"{when}: superseded by {quoted}(id {short_id(demotion.by)})")
        else:
            lines.append(f"{when}: budget")
        data["last_demotion"] = last
    return lines, data


def admission(
    session: Session, node_id: str, now: float, rules: CanonRules | None = None
) -> dict[str, Any]:
    """The structured ``admission`` alone (see ``admission_section``)."""
    return admission_section(session, node_id, now, rules)[1]


# =====================================================================================
# the cycle
# =====================================================================================


@dataclass
class Step:
    """One status change a cycle decided."""

    node_id: str
    from_status: Status
    to_status: Status
    blast_radius: int | None = None  # only on the promotion to Canonical
    reason: Reason | None = None  # demotions only
    by: str | None = None


@dataclass(frozen=True)
class Memo:
    """A concept's counted support as one cycle measured it, and how long that holds."""

    support: Support
    edges: int  # its supporting edges then (a new citation or child changes the count)
    until: float  # when the next of them ages past the floor (inf: none left to age in)


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

    Returns the steps and how many concepts were evaluated.
    """
    rules, graph, now = ctx.rules, ctx.graph, ctx.now
    steps: list[Step] = []
    looked = 0
    by_status: dict[Status, list[Concept]] = {s: [] for s in STAGES}
    # Stage 1 needs support (unless its bar is 0): skip the concepts nothing supports.
    cited, children = ctx.cited, ctx.children
    every = rules.candidate_min_interactions <= 0
    none = Status.NONE
    for concept in graph.iter_concepts():
        status = concept.status
        node_id = concept.id
        if status is none and not every and node_id not in cited and node_id not in children:
            continue
        by_status[status].append(concept)

    # demotions: over the budget (lowest blast radius first), then supersession
    canonicals = by_status[Status.CANONICAL]
    over = len(canonicals) - rules.canonical_budget
    demoted: set[str] = set()
    if over > 0:
        ranked = sorted(canonicals, key=lambda c: (graph.blast_radius(c.id), -c.created_at, c.id))
        for concept in ranked[: min(over, rules.batch)]:
            steps.append(Step(concept.id, Status.CANONICAL, Status.VENERABLE, reason="budget"))
            demoted.add(concept.id)
    if rules.supersede:
        superseded = 0
        for concept in sorted(canonicals, key=lambda c: c.id):
            if concept.id in demoted or superseded >= rules.batch:
                continue
            if not graph.edges_in(concept.id, (EdgeType.CONTRADICTS,)):
                continue
            looked += 1
            sides = newer_sides(graph, concept.id, now, rules)
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

    # Stage 3: a window only while the budget has room
    room = min(rules.batch, rules.canonical_budget - len(canonicals))
    if room > 0:
        ready: list[Verdict] = []
        for concept in by_status[Status.VENERABLE]:
            looked += 1
            verdict = evaluate(ctx, concept, full=False)
            if verdict.eligible:
                ready.append(verdict)
        ready.sort(key=lambda v: _best_first(ctx, v, graph))
        for verdict in ready[:room]:
            steps.append(Step(verdict.node_id, Status.VENERABLE, Status.CANONICAL, verdict.radius))

    # Stage 2: at most ``batch`` Candidates looked at, round-robin by id
    candidates = sorted(by_status[Status.CANDIDATE], key=lambda c: c.id)
    if candidates:
        start = next((i for i, c in enumerate(candidates) if c.id > state.stage2_cursor), 0)
        turn = (candidates[start:] + candidates[:start])[: rules.batch]
        for concept in turn:
            looked += 1
            if evaluate(ctx, concept, full=False).eligible and _confirmed(ctx, concept):
                steps.append(Step(concept.id, Status.CANDIDATE, Status.VENERABLE))
        state.stage2_cursor = turn[-1].id

    # Stage 1: at most ``batch``, best first. Its first gate is the support (usually
    # memoized); under Swarm it is the only one, so a verdict is built only under Solo.
    # Solo screens on its cheap gates, and on the score the bar was taken with, before
    # measuring a score afresh (so a concept whose score rose since a reused bar waits
    # for the next bar, at most SOLO_BAR_MAX_AGE_S; nothing is taken on a stale score).
    order: list[tuple[float, float, str]] = []
    bar = rules.candidate_min_interactions
    table = ctx.scores
    solo = rules.policy == "solo"
    if solo and ctx.non_canonical_count < rules.solo_min_concepts:
        by_status[Status.NONE] = []
    for concept in by_status[Status.NONE]:
        looked += 1
        support = ctx.support(concept)
        if support.interactions < bar:
            continue
        if not solo:
            order.append((-float(support.interactions), concept.created_at, concept.id))
            continue
        if concept.gc_survived < rules.solo_min_gc_survived:
            continue
        if table is not None:
            known = table.scores.get(concept.id)
            if known is not None and known < table.bar - SCREEN_EPSILON:
                continue
        verdict = evaluate(ctx, concept, full=False)
        if verdict.eligible:
            order.append(_best_first(ctx, verdict, graph))
    taken = 0
    for *_, node_id in _best(order, 2 * rules.batch):
        if taken >= rules.batch:
            break
        held = graph.concept(node_id)
        if held is not None and _confirmed(ctx, held):
            steps.append(Step(node_id, Status.NONE, Status.CANDIDATE))
            taken += 1
    return steps, looked


def _best(order: list[tuple[float, float, str]], likely: int) -> Iterator[tuple[float, float, str]]:
    """``order`` smallest first, sorting all of it only if more than ``likely`` are wanted."""
    head = heapq.nsmallest(likely, order)
    yield from head
    if len(head) < len(order):
        yield from sorted(order)[len(head) :]


def _best_first(ctx: Context, verdict: Verdict, graph: SessionGraph) -> tuple[float, float, str]:
    """Solo: highest score first. Swarm: at stage 3 the largest blast radius, before it the
    most other interactions. Then the oldest, then the id."""
    concept = graph.concept(verdict.node_id)
    created = concept.created_at if concept is not None else 0.0
    if ctx.rules.policy == "solo" and verdict.score is not None:
        return (-verdict.score, created, verdict.node_id)
    if verdict.support is not None:
        return (-float(verdict.support.interactions), created, verdict.node_id)
    return (-float(verdict.radius), created, verdict.node_id)


def apply_step(session: Session, step: Step, now: float, demotions: DemotionLog) -> None:
    """Persist one step (status, then its event), then mirror it into the graph."""
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
    session: Session, rules: CanonRules, now: float, state: CycleState, *, writer: bool = True
) -> CycleReport:
    """One canonization cycle: decide, then persist each step.

    It runs on the session's writer thread (``WritePipeline.every``), the only
    thread that changes the graph, so ``writer`` (the default) decides without
    holding the index lock: readers keep going while it reads, and each step is
    still mirrored into the graph under the lock. Pass ``writer=False`` from
    any other thread, to hold the lock while deciding. A store refusal stops
    the cycle at that step: the steps before it stand, the rest are decided
    again next cycle.
    """
    started = time.perf_counter()
    report = CycleReport(at=now)
    try:
        demotions = demotion_log(session, rules)
        ctx = Context.measure(session, now, rules, demotions, writer=writer)
        with _held(session.index.lock, not writer):
            state.refresh(ctx.graph, now, rules.edge_min_age_s)
            ctx.memo = state.memo
            steps, report.looked_at = decide(ctx, state)
        for step in steps:
            apply_step(session, step, now, demotions)
            report.steps.append(step)
    except LamboError as exc:
        log.warning("canonization cycle stopped: %s (%s)", exc.render(), exc.detail or "")
        report.failed = exc.render()
    report.elapsed_ms = (time.perf_counter() - started) * 1000.0
    return report


@contextmanager
def _held(lock: threading.RLock, hold: bool) -> Iterator[None]:
    """``lock`` held for the block when ``hold``, else nothing."""
    if not hold:
        yield
        return
    with lock:
        yield
