"""Garbage collection (lambo_core/gc/): triggers, every rule, the cap, the report, survivors.

Every test runs on an injected time (``now`` is passed in), against both stores. Concepts
and edges go straight into the store (``Builder``), then the session is opened, so the
index is the store's own picture. "Long after" is 20 weeks: recency has decayed to ~0 and
a concept's standing is its edges, accesses and type.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambo_core.clock import ManualClock
from lambo_core.config import load_config
from lambo_core.contradiction import is_contradicted
from lambo_core.gc.plan import plan_sweep
from lambo_core.gc.settings import (
    KEPT_CONTRADICTS_HELD,
    KEPT_CORRECTION,
    KEPT_DEPENDENTS,
    KEPT_STATUS,
    PROTECTED_STATUSES,
    RESISTANCE,
    GcSettings,
)
from lambo_core.gc.sweep import (
    drain_survivors,
    gc_stats,
    last_sweep,
    maybe_sweep,
    owed_survivor_bumps,
    sweep,
)
from lambo_core.index.graph import SessionGraph
from lambo_core.model import (
    Concept,
    ConceptType,
    Edge,
    EdgeType,
    Interaction,
    InteractionKind,
    Status,
    WriteBatch,
    new_id,
)
from lambo_core.scoring import EdgeView, base_parts, interaction_count
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import MemoryStore, SqliteStore
from lambo_core.store.base import Store
from lambo_core.text import canonical_key, format_rfc3339

T0 = 1_760_000_000.0
HOUR = 3600.0
LATER = T0 + 20 * 7 * 86_400.0  # 20 weeks on
AGE = 60.0  # canonization_edge_min_age

SPEC_LAST_SWEEP_KEYS = {
    "trigger",
    "collected",
    "deferred",
    "collection_cap",
    "cap_bound",
    "resources_spared_by_dependents",
    "survivors_deferred",
}

_names = itertools.count()


def open_store(kind: str, tmp_path: Path) -> Store:
    return MemoryStore() if kind == "memory" else SqliteStore(tmp_path / "gc.db")


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s = open_store(request.param, tmp_path)
    yield s
    s.close()


class Builder:
    """Writes concepts and edges straight into a store session (and its index once open)."""

    def __init__(self, store: Store, name: str | None = None) -> None:
        self.store = store
        self.name = name or f"s{next(_names)}"
        store.ensure_session(self.name, T0)
        self.session: Session | None = None

    def _apply(self, batch: WriteBatch) -> None:
        self.store.apply(batch)
        if self.session is not None:
            self.session.index.apply(batch)

    def concept(
        self,
        content: str | None = None,
        ctype: ConceptType = ConceptType.LOGIC,
        *,
        at: float = T0,
        status: Status = Status.NONE,
        access: int = 0,
        agent: str = "a",
    ) -> str:
        content = content or f"concept {new_id()}"
        c = Concept(
            id=new_id(),
            session=self.name,
            content=content,
            canonical_key=canonical_key(content),
            concept_type=ctype,
            created_at=at,
            about_time=at,
            agent_id=agent,
            status=status,
            access_count=access,
        )
        self._apply(WriteBatch(self.name, concepts=[c]))
        return c.id

    def edge(
        self,
        src: str,
        dst: str,
        etype: EdgeType,
        *,
        at: float = T0,
        weight: float = 1.0,
        agent: str = "a",
    ) -> None:
        e = Edge(self.name, src, dst, etype, weight, None, agent, at, at)
        self._apply(WriteBatch(self.name, edges=[e]))

    def derives(self, targets: list[str], *, at: float = T0) -> str:
        """One interaction with a Derives edge to each target."""
        interaction = Interaction(new_id(), self.name, "a", InteractionKind.DERIVE, at, at, "x")
        edges = [
            Edge(self.name, interaction.id, t, EdgeType.DERIVES, 1.0, interaction.id, "a", at, at)
            for t in targets
        ]
        self._apply(WriteBatch(self.name, interaction=interaction, edges=edges))
        return interaction.id

    def hub(self, spokes: int = 10) -> str:
        """A Constraint with ``spokes`` fresh Constraint neighbours: sets the session's top
        degree, so a concept with one edge has density 0.035. Never due itself."""
        hub = self.concept("the hub", ConceptType.CONSTRAINT)
        for i in range(spokes):
            spoke = self.concept(f"spoke {i}", ConceptType.CONSTRAINT)
            self.edge(spoke, hub, EdgeType.SEMANTIC, weight=0.9)
        return hub

    def open(self) -> Session:
        self.session = Session.open(
            self.store,
            self.name,
            EmbedderPlan(lazy=None, contract=None),
            clock=ManualClock(T0),
        )
        return self.session


def settings_(**kw: Any) -> GcSettings:
    base: dict[str, Any] = {"edge_min_age_s": AGE}
    base.update(kw)
    return GcSettings(**base)


def ids(session: Session) -> set[str]:
    return {c.id for c in session.store.concepts(session.name)}


def assert_no_dangling_edges(session: Session) -> None:
    """Store and index agree, and no edge names a concept that is gone."""
    store, name = session.store, session.name
    live = ids(session)
    interactions = {i.id for i in store.interactions(name)}
    stored = {(e.src, e.dst, e.edge_type) for e in store.edges(name)}
    for src, dst, etype in stored:
        assert dst in live
        assert src in live or (etype is EdgeType.DERIVES and src in interactions)
    graph = session.index.graph
    assert set(graph.concept_ids()) == live
    assert {(e.src, e.dst, e.edge_type) for e in graph.iter_edges()} == stored


# =====================================================================================
# settings and config
# =====================================================================================


def test_settings_defaults_come_from_the_0_2_2_numbers() -> None:
    s = GcSettings()
    assert (s.mutations_per_sweep, s.elapsed_s, s.per_sweep_cap) == (10_000, 3600.0, 2_000)
    assert (s.score_floor, s.min_age_s, s.survivor_bumps_per_sweep) == (0.12, 3600.0, 100_000)
    assert s.bar(ConceptType.OBSERVATION) == pytest.approx(0.12 / 0.7)
    assert s.bar(ConceptType.CONSTRAINT) == pytest.approx(0.08)
    assert RESISTANCE[ConceptType.ENTITY] == 1.2 and RESISTANCE[ConceptType.LOGIC] == 1.1


def test_settings_from_config(tmp_path: Path) -> None:
    assert GcSettings.from_config(load_config(env={}, cwd=tmp_path)) == GcSettings()
    (tmp_path / "lambo.toml").write_text(
        "[gc]\nmutations_per_sweep = 50\nelapsed_s = 5\nper_sweep_cap = 3\nscore_floor = 0.2\n"
        "min_age_s = 0\nsurvivor_bumps_per_sweep = 7\n[canonization]\nedge_min_age_s = 1.5\n",
        encoding="utf-8",
    )
    got = GcSettings.from_config(load_config(env={}, cwd=tmp_path))
    assert got == GcSettings(50, 5.0, 3, 0.2, 0.0, 7, 1.5)


# =====================================================================================
# triggers and the stored clock
# =====================================================================================


def test_first_call_starts_the_clock_and_sweeps_nothing(store: Store) -> None:
    b = Builder(store)
    old = b.concept()  # edgeless and old: due at any sweep
    session = b.open()
    record = store.get_session(b.name)
    assert record is not None and record.last_gc_at is None
    assert maybe_sweep(session, LATER, settings_()) is None
    record = store.get_session(b.name)
    assert record is not None
    assert (record.last_gc_at, record.last_gc_epoch) == (LATER, record.mutation_count)
    assert old in ids(session)
    assert last_sweep(session) is None
    assert gc_stats(session) == {
        "last_gc_at": format_rfc3339(LATER),
        "last_gc_epoch": record.mutation_count,
        "last_sweep": None,
    }


def test_mutations_trigger(store: Store) -> None:
    b = Builder(store)
    session = b.open()
    s = settings_(mutations_per_sweep=3, elapsed_s=1e9)
    assert maybe_sweep(session, T0, s) is None  # starts the clock at mutation 0
    b.concept()
    b.concept()
    assert maybe_sweep(session, T0 + 1, s) is None  # 2 < 3
    b.concept()
    report = maybe_sweep(session, T0 + 2, s)
    assert report is not None and report.trigger == "mutations"
    record = store.get_session(b.name)
    assert record is not None
    assert (record.last_gc_at, record.last_gc_epoch) == (T0 + 2, 3)
    assert maybe_sweep(session, T0 + 3, s) is None  # counted again from 3


def test_elapsed_trigger(store: Store) -> None:
    b = Builder(store)
    session = b.open()
    s = settings_(mutations_per_sweep=10_000, elapsed_s=HOUR)
    assert maybe_sweep(session, T0, s) is None
    assert maybe_sweep(session, T0 + HOUR - 1, s) is None
    report = maybe_sweep(session, T0 + HOUR, s)
    assert report is not None and report.trigger == "elapsed"
    assert maybe_sweep(session, T0 + HOUR + 1, s) is None


def test_the_clock_survives_a_reopen(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "gc.db")
    b = Builder(store, "kept")
    b.concept()
    session = b.open()
    sweep(session, LATER, settings_(), "elapsed")
    store.close()
    again = SqliteStore(tmp_path / "gc.db")
    record = again.get_session("kept")
    assert record is not None and (record.last_gc_at, record.last_gc_epoch) == (LATER, 1)
    again.close()


def test_an_unknown_trigger_is_refused(store: Store) -> None:
    session = Builder(store).open()
    with pytest.raises(ValueError):
        sweep(session, T0, settings_(), "manual")  # type: ignore[arg-type]


# =====================================================================================
# what is due
# =====================================================================================


def test_an_edgeless_concept_is_collected_once_past_the_age_floor(store: Store) -> None:
    b = Builder(store)
    old = b.concept("old and alone", ConceptType.CONSTRAINT)
    young = b.concept("young and alone", ConceptType.CONSTRAINT, at=T0 + 10 * HOUR)
    session = b.open()
    report = sweep(session, T0 + 10 * HOUR + 5, settings_(), "mutations")
    assert report.collected_ids == (old,)
    assert young in ids(session)
    report = sweep(session, T0 + 11 * HOUR, settings_(), "mutations")
    assert report.collected_ids == (young,)
    assert_no_dangling_edges(session)


def test_a_derives_edge_counts_as_an_edge(store: Store) -> None:
    b = Builder(store)
    written = b.concept("written by a call", ConceptType.CONSTRAINT)
    b.derives([written])
    alone = b.concept("no call wrote this", ConceptType.CONSTRAINT)
    session = b.open()
    # a floor of 0: only the edgeless rule can collect (a Constraint never scores under 0)
    report = sweep(session, LATER, settings_(score_floor=0.0), "mutations")
    assert report.collected_ids == (alone,)
    assert written in ids(session)


def test_a_low_score_is_measured_against_the_type_resistance(store: Store) -> None:
    b = Builder(store)
    hub = b.hub()
    one_edge = {t: b.concept(f"one edge {t.value}", t) for t in ConceptType}
    for node in one_edge.values():
        b.edge(node, hub, EdgeType.COOCCURRENCE, weight=0.5)
    session = b.open()
    graph = session.index.graph
    view = EdgeView(graph)
    expected: set[str] = set()
    for ctype, node in one_edge.items():
        concept = graph.concept(node)
        assert concept is not None
        score = base_parts(
            graph,
            concept,
            LATER,
            max_degree=graph.max_degree,
            interactions=interaction_count(graph),
            view=view,
        ).total
        if score < 0.12 / RESISTANCE[ctype]:
            expected.add(node)
    # standing = type offset + 0.35 / 15 density + 0.005 bonus: only the Constraint clears its bar
    assert expected == {n for t, n in one_edge.items() if t is not ConceptType.CONSTRAINT}
    report = sweep(session, LATER, settings_(), "mutations")
    assert set(report.collected_ids) == expected
    assert hub in ids(session)
    assert_no_dangling_edges(session)


def test_accesses_and_recency_keep_a_concept(store: Store) -> None:
    b = Builder(store)
    hub = b.hub()
    used = b.concept("read often", ConceptType.LOGIC, access=10)  # +0.20 frequency
    recent = b.concept("fresh enough", ConceptType.LOGIC, at=LATER - 2 * HOUR)  # ~0.25 recency
    stale = b.concept("neither", ConceptType.LOGIC)
    for node in (used, recent, stale):
        b.edge(node, hub, EdgeType.COOCCURRENCE, weight=0.5)
    session = b.open()
    report = sweep(session, LATER, settings_(), "mutations")
    assert report.collected_ids == (stale,)


def test_the_score_sees_access_counts_recall_has_not_flushed(store: Store) -> None:

    b = Builder(store)
    hub = b.hub()
    node = b.concept("recalled a lot lately", ConceptType.LOGIC)
    b.edge(node, hub, EdgeType.COOCCURRENCE, weight=0.5)
    session = b.open()
    session.access_counts.record([node] * 10)
    try:
        assert sweep(session, LATER, settings_(), "mutations").collected == 0
    finally:
        session.access_counts.drain()
    assert sweep(session, LATER, settings_(), "mutations").collected_ids == (node,)


# =====================================================================================
# protections
# =====================================================================================


@pytest.mark.parametrize("status", [Status.VENERABLE, Status.CANONICAL])
def test_venerable_and_canonical_are_never_collected(store: Store, status: Status) -> None:
    b = Builder(store)
    held = b.concept("held", ConceptType.OBSERVATION, status=status)
    candidate = b.concept("candidate", ConceptType.OBSERVATION, status=Status.CANDIDATE)
    session = b.open()
    report = sweep(session, LATER, settings_(), "mutations")
    assert report.collected_ids == (candidate,)
    assert held in ids(session)
    assert report.kept == {KEPT_STATUS: 1}


def test_contradicting_a_held_concept_keeps_a_concept_while_it_holds(store: Store) -> None:
    b = Builder(store)
    held = b.concept("the ruling", ConceptType.LOGIC, status=Status.CANONICAL)
    critic = b.concept("the ruling is wrong", ConceptType.OBSERVATION, at=T0 + 1)
    b.edge(critic, held, EdgeType.CONTRADICTS, at=T0 + 1)
    # newer evidence outweighs the contradiction: the warning lapsed, the protection did not
    fan = b.concept("cites the ruling", ConceptType.CONSTRAINT, at=T0 + 5, agent="z")
    b.edge(fan, held, EdgeType.DEPENDENCY, at=T0 + 5, agent="z")
    session = b.open()
    assert is_contradicted(session.index.graph, held, LATER, AGE) is None
    report = sweep(session, LATER, settings_(), "mutations")
    assert critic in ids(session) and report.kept.get(KEPT_CONTRADICTS_HELD) == 1
    # the ruling loses its status: the critic goes at the next sweep
    store.set_status(b.name, held, Status.NONE)
    with session.index.lock:
        session.index.graph.set_status(held, Status.NONE)
    report = sweep(session, LATER, settings_(), "mutations")
    assert critic in report.collected_ids
    assert_no_dangling_edges(session)


def test_the_correction_recall_shows_is_kept_while_its_target_stays(store: Store) -> None:
    b = Builder(store)
    hub = b.hub()
    target = b.concept("the users table holds accounts", ConceptType.CONSTRAINT)
    b.edge(target, hub, EdgeType.SEMANTIC, weight=0.9)  # stays: a Constraint clears its bar
    fix = b.concept("accounts moved to the accounts table", ConceptType.OBSERVATION, at=T0 + 1)
    b.edge(fix, target, EdgeType.CONTRADICTS, at=T0 + 1)
    session = b.open()
    info = is_contradicted(session.index.graph, target, LATER, AGE)
    assert info is not None and info.by == fix
    report = sweep(session, LATER, settings_(), "mutations")
    assert report.collected == 0 and report.kept == {KEPT_CORRECTION: 1}
    assert fix in ids(session)


def test_the_correction_goes_with_its_collected_target(store: Store) -> None:
    b = Builder(store)
    hub = b.hub()
    target = b.concept("an old observation", ConceptType.OBSERVATION)
    b.edge(target, hub, EdgeType.SEMANTIC, weight=0.9)
    fix = b.concept("the observation was wrong", ConceptType.OBSERVATION, at=T0 + 1)
    b.edge(fix, target, EdgeType.CONTRADICTS, at=T0 + 1)
    session = b.open()
    report = sweep(session, LATER, settings_(), "mutations")
    assert set(report.collected_ids) == {target, fix}
    assert_no_dangling_edges(session)


def test_the_correction_protection_ends_when_newer_evidence_outweighs(store: Store) -> None:
    b = Builder(store)
    target = b.concept("the users table holds accounts", ConceptType.CONSTRAINT)
    fix = b.concept("accounts moved", ConceptType.OBSERVATION, at=T0 + 1)
    b.edge(fix, target, EdgeType.CONTRADICTS, at=T0 + 1)
    fan = b.concept("still reads users", ConceptType.CONSTRAINT, at=T0 + 5, agent="z")
    b.edge(fan, target, EdgeType.DEPENDENCY, at=T0 + 5, agent="z")
    session = b.open()
    assert is_contradicted(session.index.graph, target, LATER, AGE) is None
    report = sweep(session, LATER, settings_(), "mutations")
    assert report.collected_ids == (fix,)


def test_a_correction_needed_by_a_kept_correction_stays_too(store: Store) -> None:
    """A chain: C corrects B, which is kept as the correction of A (which stays)."""
    b = Builder(store)
    a = b.concept("the ruling", ConceptType.CONSTRAINT)
    b.edge(a, b.hub(), EdgeType.SEMANTIC, weight=0.9)
    b_ = b.concept("the ruling is wrong", ConceptType.OBSERVATION, at=T0 + 1)
    b.edge(b_, a, EdgeType.CONTRADICTS, at=T0 + 1)
    c = b.concept("that objection is wrong", ConceptType.OBSERVATION, at=T0 + 2)
    b.edge(c, b_, EdgeType.CONTRADICTS, at=T0 + 2)
    session = b.open()
    report = sweep(session, LATER, settings_(), "mutations")
    assert report.collected == 0 and report.kept == {KEPT_CORRECTION: 2}


def test_two_concepts_that_only_contradict_each_other_keep_neither(store: Store) -> None:
    b = Builder(store)
    b.hub()  # so two edges are a small share of the session's top degree
    x = b.concept("x is true", ConceptType.OBSERVATION)
    y = b.concept("x is false", ConceptType.OBSERVATION, at=T0 + 1)
    b.edge(y, x, EdgeType.CONTRADICTS, at=T0 + 1)
    b.edge(x, y, EdgeType.CONTRADICTS, at=T0 + 2)
    session = b.open()
    graph = session.index.graph
    shown_x = is_contradicted(graph, x, LATER, AGE)
    shown_y = is_contradicted(graph, y, LATER, AGE)
    assert shown_x is not None and shown_x.by == y
    assert shown_y is not None and shown_y.by == x
    report = sweep(session, LATER, settings_(), "mutations")
    assert set(report.collected_ids) == {x, y}
    assert report.kept == {}


def test_a_resource_others_depend_on_is_spared(store: Store) -> None:
    b = Builder(store)
    b.hub()
    resource = b.concept("config/prod.env", ConceptType.RESOURCE)
    user = b.concept("the deploy reads config/prod.env", ConceptType.CONSTRAINT)
    b.edge(user, resource, EdgeType.DEPENDENCY)
    child = b.concept("a parent-of child", ConceptType.CONSTRAINT)
    parent = b.concept("src/ directory", ConceptType.RESOURCE)
    b.edge(parent, child, EdgeType.HIERARCHICAL)
    session = b.open()
    report = sweep(session, LATER, settings_(), "mutations")
    assert report.collected == 0
    assert report.resources_spared_by_dependents == 2
    assert report.to_json()["resources_spared_by_dependents"] == 2
    assert report.kept == {KEPT_DEPENDENTS: 2}


def test_a_resource_goes_with_its_collected_dependents(store: Store) -> None:
    b = Builder(store)
    b.hub()
    resource = b.concept("tmp/scratch.txt", ConceptType.RESOURCE)
    user = b.concept("looked at tmp/scratch.txt once", ConceptType.OBSERVATION)
    b.edge(user, resource, EdgeType.DEPENDENCY)
    logic = b.concept("a note nobody needs", ConceptType.LOGIC)
    b.edge(user, logic, EdgeType.DEPENDENCY)  # only Resources are spared for dependents
    session = b.open()
    report = sweep(session, LATER, settings_(), "mutations")
    assert set(report.collected_ids) == {resource, user, logic}
    assert report.resources_spared_by_dependents == 0
    assert_no_dangling_edges(session)


# =====================================================================================
# the cap
# =====================================================================================


def test_the_cap_collects_the_lowest_standing_first_and_defers_the_rest(store: Store) -> None:
    b = Builder(store)
    hub = b.hub()
    edgeless = b.concept("alone", ConceptType.CONSTRAINT)
    obs = [b.concept(f"observation {i}", ConceptType.OBSERVATION, at=T0 + i) for i in range(3)]
    logic = b.concept("a logic note", ConceptType.LOGIC)
    for node in [*obs, logic]:
        b.edge(node, hub, EdgeType.COOCCURRENCE, weight=0.5)
    session = b.open()
    s = settings_(per_sweep_cap=2)
    first = sweep(session, LATER, s, "mutations")
    # edgeless first, then the lowest score (the Observations: -0.10), oldest first
    assert first.collected_ids == (edgeless, obs[0])
    assert (first.collected, first.deferred, first.cap_bound) == (2, 3, True)
    assert first.collection_cap == 2
    second = sweep(session, LATER, s, "mutations")
    assert second.collected_ids == (obs[1], obs[2])
    third = sweep(session, LATER, s, "mutations")
    assert third.collected_ids == (logic,)
    assert (third.deferred, third.cap_bound) == (0, False)
    assert_no_dangling_edges(session)


def test_a_capped_plan_keeps_what_the_deferred_need(store: Store) -> None:
    """The correction is first in line, its target behind it: the cap must not split them."""
    b = Builder(store)
    hub = b.hub(20)
    target = b.concept("a claim", ConceptType.LOGIC)  # due, but above the fix's standing
    b.edge(target, hub, EdgeType.COOCCURRENCE, weight=0.5)
    fix = b.concept("the claim is wrong", ConceptType.OBSERVATION, at=T0 + 1)
    b.edge(fix, target, EdgeType.CONTRADICTS, at=T0 + 1)
    session = b.open()
    plan = plan_sweep(session.index.graph, LATER, settings_(per_sweep_cap=1))
    assert plan.collect == []  # the fix was first, but its target stays
    assert set(plan.deferred) == {fix, target}
    report = sweep(session, LATER, settings_(per_sweep_cap=1), "mutations")
    assert (report.collected, report.deferred, report.cap_bound) == (0, 2, True)
    assert is_contradicted(session.index.graph, target, LATER, AGE) is not None


def test_the_plan_holds_the_lock_a_chunk_at_a_time(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    import lambo_core.gc.plan as gc_module

    class Counting:
        def __init__(self) -> None:
            self.lock = threading.RLock()
            self.holds = 0

        def __enter__(self) -> None:
            self.lock.acquire()
            self.holds += 1

        def __exit__(self, *exc: object) -> None:
            self.lock.release()

    b = Builder(store)
    hub = b.hub()
    for i in range(7):
        node = b.concept(f"note {i}", ConceptType.OBSERVATION)
        b.edge(node, hub, EdgeType.COOCCURRENCE, weight=0.5)
    b.concept("alone")
    session = b.open()
    graph = session.index.graph
    whole = plan_sweep(graph, LATER, settings_(per_sweep_cap=3))
    monkeypatch.setattr(gc_module, "PLAN_CHUNK", 4)
    lock = Counting()
    chunked = plan_sweep(graph, LATER, settings_(per_sweep_cap=3), lock=lock)
    assert (chunked.collect, chunked.deferred, chunked.kept) == (
        whole.collect,
        whole.deferred,
        whole.kept,
    )
    # the set-up, 19 concepts in chunks of 4, the settle, the capped settle
    assert len(graph) == 19 and lock.holds == 1 + 5 + 1 + 1


# =====================================================================================
# the report and survivors
# =====================================================================================


def test_report_keys_are_the_specs(store: Store) -> None:
    b = Builder(store)
    b.concept()
    session = b.open()
    report = sweep(session, LATER, settings_(per_sweep_cap=5), "elapsed")
    got = report.to_json()
    assert set(got) == SPEC_LAST_SWEEP_KEYS
    assert got == {
        "trigger": "elapsed",
        "collected": 1,
        "deferred": 0,
        "collection_cap": 5,
        "cap_bound": False,
        "resources_spared_by_dependents": 0,
        "survivors_deferred": 0,
    }
    assert last_sweep(session) == report
    stats = gc_stats(session)
    assert stats["last_sweep"] == got
    assert stats["last_gc_at"] == format_rfc3339(LATER)


def test_survivors_count_gc_survived_in_store_and_graph(store: Store) -> None:
    b = Builder(store)
    keep = b.concept("kept", ConceptType.CONSTRAINT)
    b.derives([keep])
    gone = b.concept("gone")
    session = b.open()
    for _ in range(3):
        sweep(session, LATER, settings_(), "mutations")
    stored = store.get_concept(b.name, keep)
    held = session.index.graph.concept(keep)
    assert stored is not None and held is not None
    assert stored.gc_survived == held.gc_survived == 3
    assert store.get_concept(b.name, gone) is None


def test_survivor_bumps_over_the_cap_stay_owed(store: Store) -> None:
    b = Builder(store)
    nodes = [b.concept(f"kept {i}", ConceptType.CONSTRAINT) for i in range(5)]
    b.derives(nodes)
    session = b.open()
    report = sweep(session, LATER, settings_(survivor_bumps_per_sweep=2), "mutations")
    assert (report.survivors_bumped, report.survivors_deferred) == (2, 3)
    assert report.to_json()["survivors_deferred"] == 3
    assert owed_survivor_bumps(session) == 3
    assert drain_survivors(session, 1) == 1
    assert drain_survivors(session) == 2
    assert owed_survivor_bumps(session) == 0
    survived = [store.get_concept(b.name, n) for n in nodes]
    assert [c.gc_survived for c in survived if c is not None] == [1] * 5
    held = [session.index.graph.concept(n) for n in nodes]
    assert [c.gc_survived for c in held if c is not None] == [1] * 5


def test_concepts_deferred_by_the_cap_do_not_count_as_survivors(store: Store) -> None:
    b = Builder(store)
    first, second = b.concept("one"), b.concept("two")
    session = b.open()
    report = sweep(session, LATER, settings_(per_sweep_cap=1), "mutations")
    (left,) = {first, second} - set(report.collected_ids)
    concept = store.get_concept(b.name, left)
    assert concept is not None and concept.gc_survived == 0


# =====================================================================================
# weak edges
# =====================================================================================


def edge_keys(session: Session) -> set[tuple[str, str, EdgeType]]:
    """The session's edges in the store, checked equal to the index's."""
    stored = {(e.src, e.dst, e.edge_type) for e in session.store.edges(session.name)}
    graph = session.index.graph
    assert {(e.src, e.dst, e.edge_type) for e in graph.iter_edges()} == stored
    assert graph.edge_count == len(stored)
    return stored


def test_weak_edges_are_dropped_from_store_and_graph(store: Store) -> None:
    b = Builder(store)
    x = b.concept("x", ConceptType.CONSTRAINT)
    y = b.concept("y", ConceptType.CONSTRAINT)
    z = b.concept("z", ConceptType.CONSTRAINT)
    held = b.concept("held", ConceptType.CONSTRAINT, status=Status.CANONICAL)
    b.derives([x, y, z, held])  # every concept keeps an edge: none is collected
    weak_semantic = (x, y, EdgeType.SEMANTIC)
    weak_cooccurrence = (y, z, EdgeType.COOCCURRENCE)
    weak_on_held = (held, x, EdgeType.SEMANTIC)  # status protects concepts, not their edges
    b.edge(x, y, EdgeType.SEMANTIC, weight=0.3)
    b.edge(y, z, EdgeType.COOCCURRENCE, weight=0.2)
    b.edge(held, x, EdgeType.SEMANTIC, weight=0.1)
    kept = {
        (x, z, EdgeType.SEMANTIC),  # 0.5 is not under 0.5
        (z, x, EdgeType.SEMANTIC),  # reinforced: 0.3 + 1.0
        (y, x, EdgeType.COOCCURRENCE),  # written under an hour before the sweep
        (x, y, EdgeType.DEPENDENCY),  # not a weak-edge type
        (z, y, EdgeType.CONTRADICTS),
    }
    b.edge(x, z, EdgeType.SEMANTIC, weight=0.5)
    b.edge(z, x, EdgeType.SEMANTIC, weight=0.3)
    b.edge(z, x, EdgeType.SEMANTIC, weight=0.3)
    b.edge(y, x, EdgeType.COOCCURRENCE, weight=0.1, at=LATER - 60)
    b.edge(x, y, EdgeType.DEPENDENCY, weight=0.1)
    b.edge(z, y, EdgeType.CONTRADICTS, weight=0.1)
    session = b.open()
    derives = {k for k in edge_keys(session) if k[2] is EdgeType.DERIVES}
    assert len(derives) == 4
    report = sweep(session, LATER, settings_(), "mutations")
    assert report.weak_edges == 3
    assert report.collected == 0 and ids(session) == {x, y, z, held}
    left = edge_keys(session)
    assert left == kept | derives
    assert not left & {weak_semantic, weak_cooccurrence, weak_on_held}
    assert session.index.graph.edges_out(x, (EdgeType.SEMANTIC,))[0].dst == z
    assert_no_dangling_edges(session)
    # nothing weak is left: the next sweep drops nothing
    assert sweep(session, LATER + 1, settings_(), "mutations").weak_edges == 0
    # an hour on, the young one has come of age
    again = sweep(session, LATER + 1 + HOUR, settings_(), "mutations")
    assert again.weak_edges == 1
    assert edge_keys(session) == (kept - {(y, x, EdgeType.COOCCURRENCE)}) | derives
    # what the store holds now is what a fresh open sees
    fresh = SessionGraph.load(store, b.name)
    assert {(e.src, e.dst, e.edge_type) for e in fresh.iter_edges()} == edge_keys(session)


def test_dropped_weak_edges_stay_dropped_after_a_reopen(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "gc.db")
    b = Builder(store, "reopened")
    x = b.concept("x", ConceptType.CONSTRAINT)
    y = b.concept("y", ConceptType.CONSTRAINT)
    b.derives([x, y])
    b.edge(x, y, EdgeType.SEMANTIC, weight=0.3)
    b.edge(y, x, EdgeType.COOCCURRENCE, weight=0.49)
    b.edge(x, y, EdgeType.COOCCURRENCE, weight=0.9)
    session = b.open()
    report = sweep(session, LATER, settings_(), "mutations")
    assert report.weak_edges == 2
    store.close()
    again = SqliteStore(tmp_path / "gc.db")
    try:
        stored = {(e.src, e.dst, e.edge_type) for e in again.edges("reopened")}
        assert {k for k in stored if k[2] is not EdgeType.DERIVES} == {
            (x, y, EdgeType.COOCCURRENCE)
        }
        reopened = Session.open(
            again, "reopened", EmbedderPlan(lazy=None, contract=None), clock=ManualClock(LATER)
        )
        graph = reopened.index.graph
        assert graph.edge(x, y, EdgeType.SEMANTIC) is None
        assert graph.edge(y, x, EdgeType.COOCCURRENCE) is None
        assert graph.edge(x, y, EdgeType.COOCCURRENCE) is not None
    finally:
        again.close()


def test_a_weak_edge_goes_with_its_collected_concept_and_is_not_counted(store: Store) -> None:
    b = Builder(store)
    hub = b.hub()
    note = b.concept("a note nobody needs", ConceptType.OBSERVATION)
    b.edge(note, hub, EdgeType.SEMANTIC, weight=0.3)  # weak, and its only edge
    session = b.open()
    report = sweep(session, LATER, settings_(), "mutations")
    assert report.collected_ids == (note,)
    assert report.weak_edges == 0
    assert all(note not in (src, dst) for src, dst, _ in edge_keys(session))
    assert_no_dangling_edges(session)


def test_a_concept_a_dropped_edge_leaves_edgeless_goes_at_the_next_sweep(store: Store) -> None:
    b = Builder(store)
    anchor = b.concept("the anchor", ConceptType.CONSTRAINT)
    b.derives([anchor])
    loose = b.concept("only a weak link", ConceptType.CONSTRAINT)
    held = b.concept("a canonical ruling", ConceptType.CONSTRAINT, status=Status.CANONICAL)
    b.edge(loose, anchor, EdgeType.SEMANTIC, weight=0.3)
    b.edge(anchor, held, EdgeType.COOCCURRENCE, weight=0.3)
    session = b.open()
    # a floor of 0: only the edgeless rule can collect (a Constraint never scores under 0)
    s = settings_(score_floor=0.0)
    first = sweep(session, LATER, s, "mutations")
    # planned on the graph before the drop: neither was edgeless, so both survive this sweep
    assert first.weak_edges == 2 and first.collected == 0 and first.kept == {}
    graph = session.index.graph
    assert not graph.edges_out(loose) and not graph.edges_in(loose)
    for node in (loose, held):
        concept = store.get_concept(b.name, node)
        assert concept is not None and concept.gc_survived == 1
    second = sweep(session, LATER + 1, s, "mutations")
    assert second.collected_ids == (loose,)
    assert second.kept == {KEPT_STATUS: 1}  # edgeless now, and kept for its status
    assert ids(session) == {anchor, held}
    assert_no_dangling_edges(session)


def test_weak_edges_are_not_held_back_by_the_concept_cap(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lambo_core.gc.sweep as gc_module  # the chunk the sweep mirrors edges by

    b = Builder(store)
    nodes = [b.concept(f"kept {i}", ConceptType.CONSTRAINT) for i in range(6)]
    b.derives(nodes)
    for src, dst in itertools.pairwise(nodes):
        b.edge(src, dst, EdgeType.SEMANTIC, weight=0.2)
    alone = [b.concept(f"alone {i}") for i in range(3)]
    session = b.open()
    holds = 0
    real = session.index.remove_edges

    def counted(edges: Any) -> int:
        nonlocal holds
        holds += 1
        return real(edges)

    monkeypatch.setattr(session.index, "remove_edges", counted)
    monkeypatch.setattr(gc_module, "PLAN_CHUNK", 2)
    report = sweep(session, LATER, settings_(per_sweep_cap=1), "mutations")
    assert (report.collected, report.deferred, report.cap_bound) == (1, 2, True)
    assert report.collected_ids[0] in alone
    assert report.weak_edges == 5  # every weak edge, past the cap of 1
    assert holds == 3  # mirrored 2 edges per hold of the index lock
    assert {k[2] for k in edge_keys(session)} == {EdgeType.DERIVES}
    assert_no_dangling_edges(session)


def test_a_store_failure_dropping_edges_leaves_the_graph_and_the_clock(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lambo_core.errors import StoreError

    b = Builder(store)
    x = b.concept("x", ConceptType.CONSTRAINT)
    y = b.concept("y", ConceptType.CONSTRAINT)
    b.derives([x, y])
    b.edge(x, y, EdgeType.SEMANTIC, weight=0.3)
    gone = b.concept("alone")
    session = b.open()
    before = edge_keys(session)

    def refuse(name: str, edges: Any) -> int:
        raise StoreError("the store refused the write; the detail was logged")

    monkeypatch.setattr(store, "delete_edges", refuse)
    with pytest.raises(StoreError):
        sweep(session, LATER, settings_(), "mutations")
    monkeypatch.undo()
    record = store.get_session(b.name)
    assert record is not None and record.last_gc_at is None  # the clock did not move
    assert gone not in ids(session)  # concepts go first, and stay gone
    assert edge_keys(session) == before  # the graph still agrees with the store
    report = sweep(session, LATER, settings_(), "mutations")
    assert report.weak_edges == 1 and report.collected == 0
    assert (x, y, EdgeType.SEMANTIC) not in edge_keys(session)


def test_bump_gc_survived_in_the_store(store: Store) -> None:
    b = Builder(store)
    other = Builder(store)
    x, y = b.concept("x"), b.concept("y")
    z = other.concept("z")
    store.bump_gc_survived(b.name, [x, x, y, new_id(), z])  # z is another session's
    store.bump_gc_survived(b.name, [])
    got = {n: store.get_concept(b.name, n) for n in (x, y)}
    assert {n: c.gc_survived for n, c in got.items() if c is not None} == {x: 2, y: 1}
    z_concept = store.get_concept(other.name, z)
    assert z_concept is not None and z_concept.gc_survived == 0


# =====================================================================================
# written through the pipeline
# =====================================================================================


def test_a_sweep_over_concepts_written_by_the_pipeline(store: Store) -> None:
    from lambo_core.writes import WritePipeline

    clock = ManualClock(T0)
    session = Session.open(store, "piped", EmbedderPlan(lazy=None, contract=None), clock=clock)
    pipeline = WritePipeline(session).start()
    try:
        main = "builds run on the main branch"
        cites: list[dict[str, Any]] = [
            {
                "content": f"job {i} runs on the main branch",
                "concept_type": "constraint",
                "depends_on": [main],
            }
            for i in range(12)
        ]
        calls: list[tuple[str, list[dict[str, Any]]]] = [
            ("a", [{"content": main, "concept_type": "constraint"}]),
            ("a", cites),
            ("b", [{"content": "saw a flaky test in CI today", "concept_type": "observation"}]),
            ("c", [{"content": "the flaky test was a timeout", "concept_type": "observation"}]),
        ]
        for agent, concepts in calls:
            ack = pipeline.submit("lambo_derive", {"agent_id": agent, "concepts": concepts})
            assert ack.structured["receipt_state"] == "pending", ack.text
            assert pipeline.wait_idle(10)
        graph = session.index.graph
        flaky = {
            graph.concepts_with_key(canonical_key(text))[0].id
            for text in ("saw a flaky test in CI today", "the flaky test was a timeout")
        }
        assert len(graph) == 15
        report = sweep(session, LATER, settings_(), "mutations")
        # an Observation nobody used is under its bar long after; the Constraints are not
        assert set(report.collected_ids) == flaky
        assert len(ids(session)) == 13
        assert_no_dangling_edges(session)
    finally:
        pipeline.close()


# =====================================================================================
# the property: over random graphs, on both stores
# =====================================================================================

# Weighted towards what the protections turn on: contradictions, dependencies, Resources,
# and statuses that do not protect by themselves.
RANDOM_EDGE_TYPES = [
    *[t for t in EdgeType if t is not EdgeType.DERIVES],
    *[EdgeType.CONTRADICTS] * 4,
    *[EdgeType.DEPENDENCY] * 2,
    EdgeType.HIERARCHICAL,
]
RANDOM_TYPES = [*ConceptType, ConceptType.RESOURCE, ConceptType.RESOURCE]
RANDOM_STATUSES = [*Status, Status.NONE, Status.NONE, Status.NONE, Status.CANDIDATE]


@st.composite
def random_world(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(1, 14))
    concepts = draw(
        st.lists(
            st.tuples(
                st.sampled_from(RANDOM_TYPES),
                st.sampled_from(RANDOM_STATUSES),
                st.floats(0, 2 * HOUR),  # created this long after T0
                st.sampled_from([0, 0, 0, 2, 10]),  # access count (10: +0.20, often kept)
            ),
            min_size=n,
            max_size=n,
        )
    )
    edges = draw(
        st.lists(
            st.tuples(
                st.integers(0, n - 1),
                st.integers(0, n - 1),
                st.sampled_from(RANDOM_EDGE_TYPES),
                st.sampled_from([0.1, 0.5, 1.0, 3.0]),
                st.floats(0, 2 * HOUR),  # written this long after T0
                st.sampled_from(["a", "b"]),
            ),
            max_size=3 * n,
        )
    )
    derived = draw(st.lists(st.integers(0, n - 1), max_size=n, unique=True))
    return {
        "concepts": concepts,
        "edges": edges,
        "derived": derived,
        "cap": draw(st.integers(1, 8)),
        "floor": draw(st.sampled_from([0.12, 0.12, 0.2, 0.3, 2.0])),
        "min_age": draw(st.sampled_from([0.0, 30.0, HOUR])),
        "edge_min_age": draw(st.sampled_from([0.0, AGE])),
        "now": T0 + draw(st.sampled_from([2 * HOUR + 1, 3 * HOUR, 10 * 86_400.0, 200 * 86_400.0])),
    }


@st.composite
def contradiction_world(draw: st.DrawFn) -> dict[str, Any]:
    """Graphs of contradictions and the evidence against them, where everything old is due
    (a floor of 2.0) and what stays is young or Venerable/Canonical: the #197 protection,
    its chains and mutual pairs, and the cap splitting them, come up on most examples."""
    n = draw(st.integers(2, 12))
    concepts = draw(
        st.lists(
            st.tuples(
                st.sampled_from(RANDOM_TYPES),
                st.sampled_from([Status.NONE] * 6 + [Status.VENERABLE, Status.CANONICAL]),
                st.sampled_from([0.0, 100.0, 200.0, 300.0, 2 * HOUR]),  # 2 h: young at now
                st.just(0),
            ),
            min_size=n,
            max_size=n,
        )
    )
    pair = st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))
    edges = draw(
        st.lists(
            st.tuples(
                pair,
                st.sampled_from([EdgeType.CONTRADICTS] * 3 + [EdgeType.DEPENDENCY]),
                st.sampled_from([50.0, 150.0, 250.0, 350.0, *[2 * HOUR + 0.5] * 3]),
                st.sampled_from(["a", "b"]),
            ),
            max_size=3 * n,
        )
    )
    return {
        "concepts": concepts,
        "edges": [(s, d, t, 1.0, at, agent) for (s, d), t, at, agent in edges],
        "derived": [],
        "cap": draw(st.integers(1, 6)),
        "floor": 2.0,
        "min_age": HOUR,
        "edge_min_age": draw(st.sampled_from([0.0, AGE])),
        "now": T0 + 2 * HOUR + 1,
    }


def build(store: Store, world: dict[str, Any]) -> tuple[Session, list[str]]:
    b = Builder(store)
    nodes: list[str] = []
    for i, (ctype, status, offset, access) in enumerate(world["concepts"]):
        nodes.append(b.concept(f"random {i}", ctype, at=T0 + offset, status=status, access=access))
    for src, dst, etype, weight, offset, agent in world["edges"]:
        if src != dst:
            b.edge(nodes[src], nodes[dst], etype, at=T0 + offset, weight=weight, agent=agent)
    if world["derived"]:
        b.derives([nodes[i] for i in world["derived"]], at=T0)
    return b.open(), nodes


def check_sweep(store: Store, world: dict[str, Any]) -> None:
    session, nodes = build(store, world)
    now = world["now"]
    s = GcSettings(
        per_sweep_cap=world["cap"],
        score_floor=world["floor"],
        min_age_s=world["min_age"],
        edge_min_age_s=world["edge_min_age"],
    )
    before = SessionGraph.load(store, session.name)  # an independent copy of the graph
    record = store.get_session(session.name)
    assert record is not None
    report = sweep(session, now, s, "mutations")
    after = ids(session)
    collected = set(nodes) - after
    assert collected == set(report.collected_ids)
    assert report.collected == len(collected) <= s.per_sweep_cap
    assert report.cap_bound == (report.deferred > 0)

    max_degree = before.max_degree
    interactions = interaction_count(before)
    for node in collected:
        c = before.concept(node)
        assert c is not None
        # never a protected concept
        assert c.status not in PROTECTED_STATUSES
        for e in before.edges_out(node, (EdgeType.CONTRADICTS,)):
            held = before.concept(e.dst)
            assert held is not None and held.status not in PROTECTED_STATUSES
        if c.concept_type is ConceptType.RESOURCE:
            assert set(before.dependents(node)) <= collected
        # and only a due one
        assert now - c.created_at >= s.min_age_s
        if before.edges_out(node) or before.edges_in(node):
            score = base_parts(
                before, c, now, max_degree=max_degree, interactions=interactions
            ).total
            assert score < s.bar(c.concept_type)
    # a contradicted concept still in memory keeps the correction recall shows for it
    for node in after:
        shown = is_contradicted(before, node, now, s.edge_min_age_s)
        if shown is not None:
            assert shown.by in after
    # no edge left pointing at a collected concept, in the store or the index
    assert_no_dangling_edges(session)
    # edges: those of collected concepts went with them, and every weak one of the rest
    # (CoOccurrence/Semantic, under 0.5, at least an hour old) was dropped; nothing else
    staying = {
        (e.src, e.dst, e.edge_type): e
        for e in before.iter_edges()
        if e.src not in collected and e.dst not in collected
    }
    weak = {
        key
        for key, e in staying.items()
        if e.edge_type in (EdgeType.COOCCURRENCE, EdgeType.SEMANTIC)
        and e.weight < 0.5
        and now - e.created_at >= HOUR
    }
    assert {(e.src, e.dst, e.edge_type) for e in store.edges(session.name)} == set(staying) - weak
    assert report.weak_edges == len(weak)
    record_after = store.get_session(session.name)
    assert record_after is not None
    assert (record_after.last_gc_at, record_after.last_gc_epoch) == (now, record.mutation_count)
    for node in after:
        if node in report.collected_ids:
            continue
        c = store.get_concept(session.name, node)
        assert c is not None and c.gc_survived in (0, 1)


@pytest.fixture(scope="module")
def shared_stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Store]]:
    """One store of each kind for the property; every example writes a fresh session."""
    stores: dict[str, Store] = {
        "memory": MemoryStore(),
        "sqlite": SqliteStore(tmp_path_factory.mktemp("gc-property") / "gc.db"),
    }
    yield stores
    for s in stores.values():
        s.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@settings(max_examples=150, deadline=None)
@given(world=random_world())
def test_gc_never_collects_a_protected_concept_nor_leaves_a_dangling_edge(
    kind: str, shared_stores: dict[str, Store], world: dict[str, Any]
) -> None:
    check_sweep(shared_stores[kind], world)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@settings(max_examples=150, deadline=None)
@given(world=contradiction_world())
def test_gc_keeps_every_correction_a_staying_concept_needs(
    kind: str, shared_stores: dict[str, Store], world: dict[str, Any]
) -> None:
    check_sweep(shared_stores[kind], world)
