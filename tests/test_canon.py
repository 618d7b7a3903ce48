"""Canonization on an injected clock: the walk to Canonical under Swarm and Solo, the budget,
supersession, and inspect's admission section. Cycles are driven by calling them; no sleeps."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from lambo_core.canon.admission import admission, admission_section
from lambo_core.canon.evidence import aged_blast_radius, measure_support
from lambo_core.canon.history import CanonHistory, DemotionLog
from lambo_core.canon.rules import CanonRules
from lambo_core.clock import ManualClock
from lambo_core.daemon import Daemon
from lambo_core.errors import StoreError
from lambo_core.inspect import run_inspect
from lambo_core.model import Status, short_id
from lambo_core.recall import RecallDefaults, recall
from lambo_core.scoring import base_parts, bulk_scores, interaction_count
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import MemoryStore, SqliteStore
from lambo_core.text import canonical_key, format_rfc3339
from lambo_core.writes import WritePipeline

T0 = 1_760_000_000.0
PLAN = EmbedderPlan(lazy=None, contract=None)
AGE = 60.0  # the default canonization_edge_min_age


class World:
    """A session written through the real pipeline, on a clock the test moves."""

    def __init__(self, store: Any, rules: CanonRules | None = None) -> None:
        self.store = store
        self.clock = ManualClock(T0)
        self.session = Session.open(store, "s", PLAN, clock=self.clock)
        self.pipeline = WritePipeline(self.session).start()
        self.rules = rules or CanonRules()
        self.daemon = Daemon(self.session, self.rules)

    @property
    def graph(self) -> Any:
        return self.session.index.graph

    def submit(self, args: dict[str, Any], tool: str = "lambo_derive") -> None:
        ack = self.pipeline.submit(tool, args)
        assert ack.structured["receipt_state"] == "pending", ack.text
        assert self.pipeline.wait_idle(10)

    def derive(self, content: str, agent: str = "agent-a", **kw: Any) -> str:
        concept = {"content": content, "concept_type": kw.pop("ctype", "logic"), **kw}
        self.submit({"agent_id": agent, "concepts": [concept]})
        return self.id_of(content)

    def cite(self, target: str, agent: str, contents: Sequence[str]) -> None:
        """One interaction by ``agent``: each of ``contents`` depends on ``target``."""
        concepts = [
            {"content": c, "concept_type": "logic", "depends_on": [target]} for c in contents
        ]
        self.submit({"agent_id": agent, "concepts": concepts})

    def filler(self, n: int, agent: str = "agent-a") -> None:
        concepts = [{"content": f"unrelated note {i}", "concept_type": "logic"} for i in range(n)]
        self.submit({"agent_id": agent, "concepts": concepts})

    def id_of(self, content: str) -> str:
        found = self.graph.concepts_with_key(canonical_key(content))
        assert len(found) == 1, content
        return str(found[0].id)

    def survive(self, node_id: str, sweeps: int = 3) -> None:
        """As if garbage collection had swept ``sweeps`` times and kept the concept."""
        with self.session.index.lock:
            self.graph.concept(node_id).gc_survived = sweeps

    def status(self, node_id: str) -> Status:
        stored = self.store.get_concept("s", node_id)
        assert stored is not None
        held = self.graph.concept(node_id)
        assert held.status is stored.status, "the graph mirrors the store"
        return stored.status  # type: ignore[no-any-return]

    def events(self, node_id: str) -> list[tuple[Status, Status, int | None, float]]:
        return [
            (e.from_status, e.to_status, e.blast_radius, e.occurred_at)
            for e in self.store.canon_events("s")
            if e.node_id == node_id
        ]

    def cycle(self, advance: float = 0.0) -> list[tuple[str, Status, Status]]:
        self.clock.advance(advance)
        report = self.daemon.cycle()
        return [(s.node_id, s.from_status, s.to_status) for s in report.steps]

    def inspect(self, focus: str) -> tuple[str, dict[str, Any]]:
        return run_inspect(
            self.session,
            {"agent_id": "agent-a", "focus": focus},
            promotion_policy=self.rules.policy,
            edge_min_age=self.rules.edge_min_age_s,
            canon_history=self.daemon.history,
        )


def _store(kind: str, tmp_path: Path) -> Any:
    return MemoryStore() if kind == "memory" else SqliteStore(tmp_path / "c.db")


@pytest.fixture(params=["memory", "sqlite"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_world(tmp_path: Path) -> Iterator[Any]:
    worlds: list[World] = []

    def make(rules: CanonRules | None = None, kind: str = "memory") -> World:
        w = World(_store(kind, tmp_path), rules)
        worlds.append(w)
        return w

    yield make
    for w in worlds:
        w.pipeline.close()


def cited_by_three_agents(world: World) -> str:
    """'user schema' by agent-a; 10 s later agents b, c and d each cite it twice in one call."""
    schema = world.derive("user schema", ctype="entity")
    world.clock.advance(10)
    for agent in ("agent-b", "agent-c", "agent-d"):
        world.cite(schema, agent, [f"{agent} reads the users table", f"{agent} writes users"])
    return schema


# =====================================================================================
# the walk
# =====================================================================================


def test_swarm_walks_candidate_venerable_canonical_one_step_a_cycle(
    make_world: Any, store_kind: str
) -> None:
    world = make_world(kind=store_kind)
    schema = cited_by_three_agents(world)
    start = world.clock.now()

    # the citations are younger than the age floor: nothing counts yet
    assert world.cycle() == []
    assert world.cycle(AGE - 1) == []
    assert world.status(schema) is Status.NONE

    assert world.cycle(1) == [(schema, Status.NONE, Status.CANDIDATE)]
    assert world.cycle(1) == [(schema, Status.CANDIDATE, Status.VENERABLE)]
    assert world.cycle(1) == [(schema, Status.VENERABLE, Status.CANONICAL)]
    assert world.cycle(1) == []
    assert world.status(schema) is Status.CANONICAL

    # each hop is an event; the blast radius only on the promotion to Canonical
    assert world.events(schema) == [
        (Status.NONE, Status.CANDIDATE, None, start + AGE),
        (Status.CANDIDATE, Status.VENERABLE, None, start + AGE + 1),
        (Status.VENERABLE, Status.CANONICAL, 6, start + AGE + 2),
    ]
    # the dependents themselves have no support: they stay where they are
    assert all(c.status is Status.NONE for c in world.graph.iter_concepts() if c.id != schema)
    counters = world.daemon.counters()
    assert counters["canonization_cycles"] == 6
    assert counters["canonization_promotions"] == 3
    assert counters["canonization_demotions"] == 0


def test_each_gate_of_the_walk_is_what_inspect_reports(make_world: Any) -> None:
    world = make_world()
    schema = cited_by_three_agents(world)
    text, data = world.inspect("user schema")
    assert "canonization (Swarm): None -> Candidate refused" in text.split("\n")
    assert "  - stage 1: dependents from 0 other interactions, needs at least 1" in text
    world.clock.advance(AGE)
    _, data = world.inspect("user schema")
    assert data["admission"]["eligible"] is True and data["admission"]["reasons"] == []
    world.cycle()
    text, data = world.inspect("user schema")
    assert "canonization (Swarm): Candidate -> Venerable eligible" in text.split("\n")
    checks = {c["gate"]: c for c in data["admission"]["checks"]}
    assert checks["dependents"] == {
        "gate": "dependents",
        "stage": 2,
        "current": 3,
        "bar": 3,
        "comparison": ">=",
        "met": True,
    }
    assert checks["agents"]["current"] == 3 and checks["agents"]["bar"] == 2
    world.cycle()
    _, data = world.inspect("user schema")
    assert data["admission"]["next"] == "Canonical"
    checks = {c["gate"]: c for c in data["admission"]["checks"]}
    assert set(checks) == {"blast_radius", "cooldown", "canonical_budget"}
    assert checks["blast_radius"]["current"] == 6 and checks["blast_radius"]["comparison"] == ">"
    assert checks["cooldown"]["current"] is None and checks["cooldown"]["met"] is True
    world.cycle()
    text, data = world.inspect("user schema")
    assert "canonization (Swarm): Canonical" in text.split("\n")
    assert "next" not in data["admission"] and data["admission"]["eligible"] is False
    assert schema == data["node_id"]


def test_two_interactions_fail_stage_two_with_the_spec_reason(make_world: Any) -> None:
    world = make_world()
    schema = world.derive("user schema")
    world.cite(schema, "agent-b", ["b reads it"])
    world.cite(schema, "agent-c", ["c reads it"])
    world.clock.advance(AGE)
    world.cycle()
    assert world.status(schema) is Status.CANDIDATE
    assert world.cycle(1) == []
    text, data = world.inspect("user schema")
    assert "canonization (Swarm): Candidate -> Venerable refused" in text.split("\n")
    assert "  - stage 2: dependents from 2 other interactions, needs at least 3" in text
    assert data["admission"]["reasons"] == [
        "stage 2: dependents from 2 other interactions, needs at least 3"
    ]


def test_swarm_needs_spread_across_agents_solo_does_not(make_world: Any) -> None:
    """One agent citing its own concept from three interactions: Swarm stops at Candidate."""
    for policy in ("swarm", "solo"):
        world = make_world(CanonRules(policy=policy))
        world.filler(20)
        schema = world.derive("user schema")
        for i in range(3):
            world.cite(schema, "agent-a", [f"step {i} reads it", f"step {i} writes it"])
        world.survive(schema)
        world.clock.advance(AGE)
        for _ in range(4):
            world.cycle(1)
        if policy == "swarm":
            assert world.status(schema) is Status.CANDIDATE
            _, data = world.inspect("user schema")
            assert data["admission"]["reasons"] == [
                "stage 2: dependents from 0 agents besides the writer, needs at least 2"
            ]
        else:
            assert world.status(schema) is Status.CANONICAL


def test_solo_walks_the_same_concept_to_canonical(make_world: Any) -> None:
    world = make_world(CanonRules(policy="solo"))
    world.filler(15)
    schema = cited_by_three_agents(world)
    start = world.clock.now()
    assert world.cycle() == []
    text, data = world.inspect("user schema")
    assert "canonization (Solo): None -> Candidate refused" in text.split("\n")
    solo = data["admission"]["solo"]
    assert set(solo) == {
        "recency",
        "frequency",
        "activity",
        "density",
        "edge_bonus",
        "type_offset",
        "score",
        "percentile",
        "bar",
    }
    assert solo["percentile"] == 90.0 and solo["score"] > solo["bar"]
    gates = [c["gate"] for c in data["admission"]["checks"]]
    assert gates == ["dependents", "session_concepts", "gc_survived", "score"]

    # past the age floor, Solo still waits for the concept to outlive 3 sweeps
    assert world.cycle(AGE) == []
    _, data = world.inspect("user schema")
    assert data["admission"]["reasons"] == [
        "stage 1: survived 0 garbage-collection sweeps, needs at least 3"
    ]
    world.survive(schema)
    assert world.cycle(1) == [(schema, Status.NONE, Status.CANDIDATE)]
    assert world.cycle(1) == [(schema, Status.CANDIDATE, Status.VENERABLE)]
    assert world.cycle(1) == [(schema, Status.VENERABLE, Status.CANONICAL)]
    assert world.events(schema) == [
        (Status.NONE, Status.CANDIDATE, None, start + AGE + 1),
        (Status.CANDIDATE, Status.VENERABLE, None, start + AGE + 2),
        (Status.VENERABLE, Status.CANONICAL, 6, start + AGE + 3),
    ]


def test_solo_refuses_a_small_session_and_a_low_score(make_world: Any) -> None:
    world = make_world(CanonRules(policy="solo"))
    schema = cited_by_three_agents(world)  # 7 concepts: under the 20 Solo asks for
    world.clock.advance(AGE)
    assert world.cycle() == []
    _, data = world.inspect("user schema")
    assert (
        "stage 1: the session holds 7 non-canonical concepts, needs at least 20"
        in (data["admission"]["reasons"])
    )
    # a dependent scores below the 90th percentile
    world.filler(20)
    _, data = world.inspect("agent-b reads the users table")
    reasons = data["admission"]["reasons"]
    assert any(r.startswith("stage 1: dependents from 0 other interactions") for r in reasons)
    assert any("is not above the session's 90th percentile" in r for r in reasons)
    assert world.status(schema) is Status.NONE


# =====================================================================================
# the Canonical budget
# =====================================================================================


def test_a_full_budget_is_the_failing_gate_in_inspect(make_world: Any) -> None:
    world = make_world(CanonRules(canonical_budget=1))
    first = cited_by_three_agents(world)
    second = world.derive("billing ledger")
    for agent in ("agent-b", "agent-c", "agent-d"):
        world.cite(second, agent, [f"{agent} posts to the ledger", f"{agent} reads the ledger"])
    world.clock.advance(AGE)
    world.cycle()
    world.cycle(1)
    # both are Venerable now; the window has room for one, the larger radius first
    assert world.status(first) is Status.VENERABLE and world.status(second) is Status.VENERABLE
    promoted = world.cycle(1)
    assert len(promoted) == 1 and promoted[0][2] is Status.CANONICAL
    waiting = second if promoted[0][0] == first else first
    assert world.cycle(1) == [] and world.cycle(100) == []

    focus = world.graph.concept(waiting).content
    text, data = world.inspect(focus)
    lines = text.split("\n")
    assert "canonization (Swarm): Venerable -> Canonical refused" in lines
    assert (
        "  - stage 3: the Canonical budget is full (1 of 1); no Stage 3 window runs while it is"
        in lines
    )
    budget = next(c for c in data["admission"]["checks"] if c["gate"] == "canonical_budget")
    assert budget == {
        "gate": "canonical_budget",
        "stage": 3,
        "current": 1,
        "bar": 1,
        "comparison": "<",
        "met": False,
    }
    assert data["admission"]["eligible"] is False
    assert len(data["admission"]["reasons"]) == 1  # every other gate holds


def test_over_the_budget_demotes_the_lowest_radius_and_says_budget(make_world: Any) -> None:
    world = make_world()
    big = cited_by_three_agents(world)
    small = world.derive("billing ledger")
    for agent in ("agent-b", "agent-c", "agent-d"):
        world.cite(small, agent, [f"{agent} posts", f"{agent} reads", f"{agent} sums"][:2])
    world.cite(big, "agent-e", ["e also reads the users table"])  # radius 7 against 6
    world.clock.advance(AGE)
    for _ in range(3):
        world.cycle(1)
    assert world.status(big) is Status.CANONICAL and world.status(small) is Status.CANONICAL

    world.daemon.rules = replace(world.rules, canonical_budget=1)
    world.rules = world.daemon.rules
    demoted_at = world.clock.now() + 1
    assert world.cycle(1) == [(small, Status.CANONICAL, Status.VENERABLE)]
    assert world.events(small)[-1] == (Status.CANONICAL, Status.VENERABLE, None, demoted_at)
    assert world.daemon.counters()["canonization_demotions"] == 1
    text, data = world.inspect("billing ledger")
    assert f"  last demotion {format_rfc3339(demoted_at)}: budget" in text.split("\n")
    assert data["admission"]["last_demotion"] == {
        "at": format_rfc3339(demoted_at),
        "from": "Canonical",
        "to": "Venerable",
        "reason": "budget",
    }
    assert world.daemon.history.superseded(small) is None  # a budget demotion is no history

    # back under a larger budget, the cooldown holds it for 300 s after the demotion
    world.daemon.rules = world.rules = replace(world.rules, canonical_budget=5)
    assert world.cycle(1) == []
    _, data = world.inspect("billing ledger")
    assert data["admission"]["reasons"] == ["stage 3: demoted 1s ago, waits 300s after a demotion"]
    assert world.cycle(299) == [(small, Status.VENERABLE, Status.CANONICAL)]


# =====================================================================================
# supersession
# =====================================================================================


def superseding_world(make_world: Any, *, supersede: bool = True) -> tuple[World, str, str]:
    world = make_world(CanonRules(supersede=supersede))
    schema = cited_by_three_agents(world)
    world.clock.advance(AGE)
    for _ in range(3):
        world.cycle(1)
    assert world.status(schema) is Status.CANONICAL
    world.clock.advance(10)
    world.submit(
        {
            "agent_id": "agent-e",
            "concepts": [
                {
                    "content": "accounts replaced the users table",
                    "concept_type": "observation",
                    "against": [schema],
                }
            ],
        }
    )
    return world, schema, world.id_of("accounts replaced the users table")


def schema_steps(world: World, schema: str, advance: float) -> list[tuple[Status, Status]]:
    return [(a, b) for node, a, b in world.cycle(advance) if node == schema]


def test_supersede_demotes_only_on_newer_support_by_other_agents(make_world: Any) -> None:
    world, schema, accounts = superseding_world(make_world)
    # no newer support at all: a contradiction alone never demotes anything
    assert world.cycle(AGE) == []
    # the contradicting agent's own support never counts for it, however much of it
    # (it is still evidence for the concept's own promotion: agent-e is not its writer)
    for i in range(3):
        world.cite(accounts, "agent-e", [f"e migration step {i}"])
    assert schema_steps(world, schema, AGE) == []
    assert world.status(schema) is Status.CANONICAL
    # three other agents' interactions: counted once past the age floor
    for agent in ("agent-f", "agent-g", "agent-h"):
        world.cite(accounts, agent, [f"{agent} reads accounts"])
    assert schema_steps(world, schema, AGE - 1) == []
    demoted_at = world.clock.now() + 1
    assert schema_steps(world, schema, 1) == [(Status.CANONICAL, Status.VENERABLE)]
    assert world.events(schema)[-1] == (Status.CANONICAL, Status.VENERABLE, None, demoted_at)

    line = world.daemon.history.superseded(schema)
    assert line is not None and line.kind == "superseded"
    assert line.render() == (
        f"⤓ Superseded at {format_rfc3339(demoted_at)} by "
        f'"accounts replaced the users table" (id {short_id(accounts)})'
    )
    # recall shows it as history on the demoted concept's block, not as a warning
    from lambo_core.recall import RecallDefaults, recall

    result = recall(
        world.session, {"agent_id": "q", "query": "user schema"}, defaults=RecallDefaults()
    )
    assert line.render() in result.context.split("\n")
    assert line.render() not in result.warnings
    notes = result.annotated_hits()[0]["annotations"]
    assert {"kind": "superseded", "line": line.render(), "by": accounts} in notes

    text, data = world.inspect("user schema")
    lines = text.split("\n")
    assert "canonization (Swarm): Venerable -> Canonical refused" in lines
    assert f"  - stage 3: held: contradicted by {short_id(accounts)} with newer evidence" in lines
    assert (
        f"  last demotion {format_rfc3339(demoted_at)}: superseded by "
        f'"accounts replaced the users table" (id {short_id(accounts)})'
    ) in lines
    assert data["admission"]["held"][0]["by"] == accounts
    assert data["admission"]["last_demotion"]["reason"] == "superseded"
    assert data["admission"]["last_demotion"]["by"] == accounts

    # held at Venerable while the newer side holds, past the cooldown too
    assert schema_steps(world, schema, 400) == []
    # the contradicting agent cannot release the concept it contradicted
    world.cite(schema, "agent-e", ["e still reads users"])
    assert schema_steps(world, schema, AGE) == []
    # newer support by another agent releases it
    world.cite(schema, "agent-b", ["b reads users again"])
    assert schema_steps(world, schema, AGE) == [(Status.VENERABLE, Status.CANONICAL)]
    assert world.events(schema)[-1][2] == 8  # 6 + e's + b's citations
    assert world.daemon.history.superseded(schema) is None  # Canonical again: no history line


def test_supersede_off_never_demotes(make_world: Any) -> None:
    world, schema, accounts = superseding_world(make_world, supersede=False)
    for agent in ("agent-f", "agent-g", "agent-h"):
        world.cite(accounts, agent, [f"{agent} reads accounts"])
    world.cycle(AGE)
    world.cycle(1)
    assert world.status(schema) is Status.CANONICAL
    _, data = world.inspect("user schema")
    assert "held" not in data["admission"]


def test_a_venerable_the_newer_side_would_supersede_waits(make_world: Any) -> None:
    world = make_world(CanonRules(supersede=True))
    schema = cited_by_three_agents(world)
    world.clock.advance(AGE)
    world.cycle()
    world.cycle(1)
    assert world.status(schema) is Status.VENERABLE
    world.clock.advance(5)
    accounts = world.derive("accounts replaced users", agent="agent-e", against=[schema])
    for agent in ("agent-f", "agent-g", "agent-h"):
        world.cite(accounts, agent, [f"{agent} reads accounts"])
    assert world.cycle(AGE) == [(accounts, Status.NONE, Status.CANDIDATE)]
    assert world.status(schema) is Status.VENERABLE
    _, data = world.inspect("user schema")
    assert data["admission"]["reasons"] == [
        f"stage 3: held: contradicted by {short_id(accounts)} with newer evidence"
    ]


def test_supersession_is_rebuilt_from_the_stored_events(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "r.db")
    world = World(store, CanonRules(supersede=True))
    try:
        schema = cited_by_three_agents(world)
        world.clock.advance(AGE)
        for _ in range(3):
            world.cycle(1)
        world.clock.advance(5)
        accounts = world.derive("accounts replaced users", agent="agent-e", against=[schema])
        for agent in ("agent-f", "agent-g", "agent-h"):
            world.cite(accounts, agent, [f"{agent} reads accounts"])
        world.cycle(AGE)
        demoted = world.events(schema)[-1]
        assert demoted[1] is Status.VENERABLE
    finally:
        world.pipeline.close()
    reopened = Session.open(store, "s", PLAN, clock=world.clock)
    line = CanonHistory(reopened, CanonRules()).superseded(schema)
    assert line is not None and line.by == accounts and line.at == demoted[3]
    rebuilt = DemotionLog.rebuild(
        store.canon_events("s"), reopened.index.graph, CanonRules(supersede=True)
    )
    found = rebuilt.get(schema)
    assert found is not None and found.reason == "superseded" and found.by == accounts


def test_superseded_line_without_the_superseding_concept(make_world: Any) -> None:
    world, schema, accounts = superseding_world(make_world)
    for agent in ("agent-f", "agent-g", "agent-h"):
        world.cite(accounts, agent, [f"{agent} reads accounts"])
    world.cycle(AGE)
    with world.session.index.lock:
        world.graph.remove_concept(accounts)
    line = world.daemon.history.superseded(schema)
    assert line is not None and line.by_content is None
    assert line.render().endswith(f"by a concept no longer in memory (id {short_id(accounts)})")


# =====================================================================================
# measuring, and a store that does not answer
# =====================================================================================


def test_evidence_written_with_the_concept_never_counts(make_world: Any) -> None:
    world = make_world()
    world.submit(
        {
            "agent_id": "agent-b",
            "concepts": [{"content": "user schema", "concept_type": "entity"}],
            "parent_of": [{"parent": "user schema", "child": "users.email column"}],
        }
    )
    schema = world.id_of("user schema")
    world.clock.advance(AGE)
    with world.session.index.lock:
        concept = world.graph.concept(schema)
        support = measure_support(world.graph, concept, world.clock.now(), AGE)
        radius = aged_blast_radius(world.graph, schema, world.clock.now(), AGE)
    assert support.interactions == 0 and radius == 1


def test_an_unanswering_store_leaves_admission_null(make_world: Any, monkeypatch: Any) -> None:
    world = make_world()
    world.derive("user schema")

    def refuse(session: str) -> list[Any]:
        raise StoreError("the store is not answering", detail="disk I/O error")

    monkeypatch.setattr(world.store, "canon_events", refuse)
    text, data = world.inspect("user schema")
    assert data["admission"] is None
    warning = (
        "canonization: the store did not answer (store error: the store is not answering), "
        "so the admission section is left out"
    )
    assert warning in data["warnings"] and warning in text.split("\n")
    with pytest.raises(StoreError):
        admission(world.daemon.history, world.id_of("user schema"), world.clock.now())


def test_admission_section_lines_match_the_structured_reasons(make_world: Any) -> None:
    world = make_world(CanonRules(policy="solo"))
    node = world.derive("user schema")
    lines, data = admission_section(world.daemon.history, node, world.clock.now())
    assert lines[0] == "canonization (Solo): None -> Candidate refused"
    assert lines[1:] == [f"  - {r}" for r in data["reasons"]]


def test_bulk_scores_equal_the_per_concept_base_score(make_world: Any) -> None:
    """Solo's table scores every concept in one pass; it must be recall's base score."""
    world = make_world()
    world.filler(12)
    schema = cited_by_three_agents(world)
    world.clock.advance(3600)
    world.derive("accounts replaced users", agent="agent-e", against=[schema], ctype="observation")
    world.submit(
        {
            "agent_id": "agent-b",
            "concepts": [{"content": "user schema", "concept_type": "entity"}],
            "parent_of": [{"parent": "user schema", "child": "users.email column"}],
        }
    )
    world.session.access_counts.record([schema, schema, world.id_of("unrelated note 3")])
    world.clock.advance(86_400)
    try:
        with world.session.index.lock:
            graph = world.graph
            now = world.clock.now()
            scores, max_degree, interactions = bulk_scores(world.session, graph, now)
            assert interactions == interaction_count(graph)
            degrees = {
                c.id: len(graph.edges_in(c.id)) + len(graph.edges_out(c.id))
                for c in graph.iter_concepts()
            }
            assert max_degree == max(degrees.values())
            for concept in graph.iter_concepts():
                parts = base_parts(
                    graph,
                    concept,
                    now,
                    max_degree=max_degree,
                    interactions=interactions,
                    pending_access=world.session.access_counts.pending(concept.id),
                )
                assert scores[concept.id] == pytest.approx(parts.total, abs=1e-12), concept.content
    finally:
        world.session.access_counts.drain()


# =====================================================================================
# the CLI: canon suspected, session verify, session list
# =====================================================================================


def _cli(args: list[str], home: Path) -> Any:
    from click.testing import CliRunner

    from lambo_core.cli.canon import canon_group, session_group

    group = canon_group if args[0] == "canon" else session_group
    runner = CliRunner()
    return runner.invoke(group, args[1:], env={"LAMBO_HOME": str(home), "LAMBO_CONFIG": ""})


def _vector(rng: Any, base: Any, noise: float) -> Any:
    import numpy as np

    v = base + noise * rng.standard_normal(base.shape[0])
    return (v / np.linalg.norm(v)).astype(np.float32)


def test_canon_suspected_reports_the_pairs_a_store_holds(tmp_path: Path) -> None:
    import json

    import numpy as np

    from lambo_core.embed.base import make_contract
    from lambo_core.model import Concept, ConceptType, Edge, EdgeType, WriteBatch, new_id

    rng = np.random.default_rng(3)
    dim = 16
    store = SqliteStore(tmp_path / "s.db")
    store.ensure_session("s", T0)
    store.stamp_contract("s", dict(make_contract("random", "test", dim)))
    texts = [
        ("the embedder listens on port 8080", T0),
        ("the embedder listens on port 8081", T0 + 10),  # one value changed: flagged
        ("the cache holds 64 entries", T0),
        ("the cache holds 128 entries", T0 + 10),  # flagged, and already recorded
        ("J1 round-1 verdict: pass", T0),
        ("J2 round-1 verdict: pass", T0 + 10),  # a change before the predicate: never
        ("retries use timeout 30", T0),
        ("retries use timeout 45", T0 + 10),  # linked by depends_on: lapsed
    ]
    ids = [new_id() for _ in texts]
    batch = WriteBatch(session="s")
    for i, (text, at) in enumerate(texts):
        base = np.zeros(dim)
        base[i // 2] = 1.0  # each pair shares a direction; pairs are far apart
        batch.concepts.append(
            Concept(
                id=ids[i],
                session="s",
                content=text,
                canonical_key=canonical_key(text),
                concept_type=ConceptType.LOGIC,
                created_at=at,
                about_time=at,
                agent_id="a",
                vector=_vector(rng, base, 0.01),
            )
        )

    def edge(src: str, dst: str, etype: EdgeType) -> Edge:
        return Edge("s", src, dst, etype, 1.0, None, "a", T0 + 20, T0 + 20)

    batch.edges += [
        edge(ids[3], ids[2], EdgeType.SUPERSEDES_SUSPECTED),
        edge(ids[7], ids[6], EdgeType.DEPENDENCY),
    ]
    store.apply(batch)
    store.close()

    result = _cli(
        ["canon", "suspected", "--session", "s", "--store", str(tmp_path / "s.db")], tmp_path
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("session s: 2 possibly superseded pair(s) at cosine >= 0.85")
    assert lines[0].endswith("; 1 already recorded")
    assert any(
        line.startswith(
            f'{short_id(ids[1])} "the embedder listens on port 8081" may replace '
            f'{short_id(ids[0])} "the embedder listens on port 8080" [Logic]'
        )
        and line.endswith("not recorded)")
        for line in lines
    )
    as_json = _cli(
        [
            "canon",
            "suspected",
            "--session",
            "s",
            "--store",
            str(tmp_path / "s.db"),
            "--json",
            "--threshold",
            "0.9",
        ],
        tmp_path,
    )
    payload = json.loads(as_json.output)
    assert payload["threshold"] == 0.9 and payload["threshold_source"] == "--threshold"
    assert {(p["newer"], p["older"], p["recorded"]) for p in payload["pairs"]} == {
        (ids[1], ids[0], False),
        (ids[3], ids[2], True),
    }


def test_session_verify_reports_annotation_kinds(tmp_path: Path) -> None:
    import json

    store = SqliteStore(tmp_path / "v.db")
    world = World(store, CanonRules(supersede=True))
    try:
        schema = cited_by_three_agents(world)
        world.clock.advance(AGE)
        for _ in range(3):
            world.cycle(1)
        world.clock.advance(5)
        accounts = world.derive("accounts replaced users", agent="agent-e", against=[schema])
        for agent in ("agent-f", "agent-g", "agent-h"):
            world.cite(accounts, agent, [f"{agent} reads accounts"])
        world.cycle(AGE)
        assert world.status(schema) is Status.VENERABLE  # superseded
        # a stale fact with a dependent resting on it, and a suspected pair
        port = world.derive("the embedder listens on port 8080")
        world.cite(port, "agent-b", ["the client dials the embedder"])
        world.clock.advance(10)
        newer = world.derive(
            "the embedder now listens on port 9090", agent="agent-c", against=[port]
        )
        old = world.derive("the cache holds 64 entries")
        world.clock.advance(1)
        new = world.derive("the cache holds 128 entries")
        from lambo_core.model import Edge, EdgeType, WriteBatch

        edge = Edge("s", new, old, EdgeType.SUPERSEDES_SUSPECTED, 1.0, None, "a", T0, T0)
        store.apply(WriteBatch(session="s", edges=[edge]))
    finally:
        world.pipeline.close()

    result = _cli(
        ["session", "verify", "--session", "s", "--store", str(tmp_path / "v.db")], tmp_path
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].endswith("; ok")
    kinds = dict(line.strip().split(": ", 1) for line in lines[2:])
    # the port fact and the superseded schema (no newer support outweighs accounts) both fire
    assert kinds["contradiction"].startswith("2 (e.g. ")
    assert short_id(port) in kinds["contradiction"] and short_id(schema) in kinds["contradiction"]
    assert short_id(newer) in kinds["contradicts"] and short_id(accounts) in kinds["contradicts"]
    # the schema's six citations and the client's rest on a contradicted concept
    assert kinds["rests_on_contradicted"].startswith("7 (e.g. ")
    assert kinds["possibly_superseded"] == f"1 (e.g. {short_id(old)})"
    assert kinds["superseded"] == f"1 (e.g. {short_id(schema)})"

    as_json = _cli(
        ["session", "verify", "--session", "s", "--store", str(tmp_path / "v.db"), "--json"],
        tmp_path,
    )
    payload = json.loads(as_json.output)
    assert payload["ok"] is True
    assert set(payload["annotation_kinds"]) == {
        "contradiction",
        "contradicts",
        "rests_on_contradicted",
        "possibly_superseded",
        "superseded",
    }
    assert payload["annotation_kinds"]["possibly_superseded"] == {"count": 1, "examples": [old]}
    assert payload["annotation_kinds"]["rests_on_contradicted"]["count"] == 7


def test_session_verify_flags_a_status_no_event_gave(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "w.db")
    world = World(store)
    try:
        node = world.derive("user schema")
    finally:
        world.pipeline.close()
    store.set_status("s", node, Status.CANONICAL)
    result = _cli(
        ["session", "verify", "--session", "s", "--store", str(tmp_path / "w.db")], tmp_path
    )
    assert result.exit_code == 1
    assert "1 concept(s) hold a status no canonization event gave them" in result.output
    missing = _cli(
        ["session", "verify", "--session", "nope", "--store", str(tmp_path / "w.db")], tmp_path
    )
    assert missing.exit_code == 2 and "no session named 'nope'" in missing.output
    absent = _cli(
        ["session", "verify", "--session", "s", "--store", str(tmp_path / "x.db")], tmp_path
    )
    assert absent.exit_code == 2 and not (tmp_path / "x.db").exists()


def test_session_list(tmp_path: Path) -> None:
    import json

    store = SqliteStore(tmp_path / "l.db")
    store.ensure_session("alpha", T0)
    store.ensure_session("beta", T0 + 1)
    store.close()
    result = _cli(["session", "list", "--store", str(tmp_path / "l.db")], tmp_path)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f"alpha: created {format_rfc3339(T0)}, embedding not stamped, not held, 0 mutations, "
        "last gc never",
        f"beta: created {format_rfc3339(T0 + 1)}, embedding not stamped, not held, 0 mutations, "
        "last gc never",
    ]
    rows = json.loads(
        _cli(["session", "list", "--store", str(tmp_path / "l.db"), "--json"], tmp_path).output
    )
    assert [r["session"] for r in rows] == ["alpha", "beta"]


def test_the_demotion_log_is_rebuilt_with_the_daemons_rules_whoever_asks_first(
    make_world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recall's history line may ask first; the configured rules must still apply."""
    rules = CanonRules(edge_min_age_s=5.0, supersede=True)
    world = make_world(rules)
    world.derive("user schema")
    seen: list[CanonRules] = []
    real = DemotionLog.rebuild

    def spy(events: Any, graph: Any, used: CanonRules) -> DemotionLog:
        seen.append(used)
        return real(events, graph, used)

    monkeypatch.setattr(DemotionLog, "rebuild", spy)
    args = {"agent_id": "a", "query": "user schema"}
    recall(world.session, args, defaults=RecallDefaults(), canon_history=world.daemon.history)
    assert seen == [rules]
