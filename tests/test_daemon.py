"""The session daemon: cycles on the writer thread, the contradiction list and its budget,
the sweep hook, and what lambo_stats reports. Injected clock; cycles called directly."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from lambo_core.canon.rules import CanonRules
from lambo_core.clock import ManualClock
from lambo_core.config import load_config
from lambo_core.daemon import Daemon
from lambo_core.embed.loader import LoadedModels
from lambo_core.errors import StoreError
from lambo_core.model import Status
from lambo_core.recall import RecallDefaults, recall
from lambo_core.serve import ServeOptions, open_service, stop_service
from lambo_core.service import MemoryService, ToolResult
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import MemoryStore
from lambo_core.text import canonical_key
from lambo_core.writes import WritePipeline

T0 = 1_760_000_000.0
PLAN = EmbedderPlan(lazy=None, contract=None)
AGE = 60.0


def status_of(session: Session, node_id: str) -> Status:
    concept = session.index.graph.concept(node_id)
    assert concept is not None, node_id
    return concept.status


class World:
    def __init__(self, rules: CanonRules | None = None) -> None:
        self.store = MemoryStore()
        self.clock = ManualClock(T0)
        self.session = Session.open(self.store, "s", PLAN, clock=self.clock)
        self.pipeline = WritePipeline(self.session).start()
        self.daemon = Daemon(self.session, rules or CanonRules())

    def submit(self, agent: str, concepts: list[dict[str, Any]]) -> None:
        ack = self.pipeline.submit("lambo_derive", {"agent_id": agent, "concepts": concepts})
        assert ack.structured["receipt_state"] == "pending", ack.text
        assert self.pipeline.wait_idle(10)

    def derive(self, content: str, agent: str = "agent-a", **kw: Any) -> str:
        self.submit(agent, [{"content": content, "concept_type": "logic"} | kw])
        found = self.session.index.graph.concepts_with_key(canonical_key(content))
        assert len(found) == 1
        return str(found[0].id)


@pytest.fixture
def world() -> Iterator[World]:
    w = World()
    yield w
    w.pipeline.close()


# =====================================================================================
# the contradiction list
# =====================================================================================


def test_a_contradiction_is_listed_from_the_next_cycle(world: World) -> None:
    schema = world.derive("user schema")
    world.clock.advance(5)
    accounts = world.derive("accounts replaced users", agent="agent-b", against=[schema])
    assert not world.daemon.listed(schema)  # not on the write's own next read
    world.daemon.cycle()
    assert world.daemon.listed(schema) and not world.daemon.listed(accounts)
    info = world.daemon.contradiction(schema)
    assert info is not None and info.by == accounts and info.agent_id == "agent-b"
    assert world.daemon.counters()["contradictions_listed"] == 1

    # newer supporting evidence, once past the age floor, lapses it at the next cycle
    world.clock.advance(5)
    world.derive("login reads users", agent="agent-c", depends_on=[schema])
    world.clock.advance(AGE - 1)
    world.daemon.cycle()
    assert world.daemon.listed(schema)
    world.clock.advance(1)
    world.daemon.cycle()
    assert not world.daemon.listed(schema)


def test_the_contradiction_budget_keeps_canonical_first_then_newest() -> None:
    w = World(CanonRules(contradiction_budget=2))
    try:
        old = w.derive("old fact")
        mid = w.derive("middle fact")
        top = w.derive("pillar fact")
        with w.session.index.lock:
            w.session.index.graph.set_status(top, Status.CANONICAL)
        for i, target in enumerate((top, old, mid)):
            w.clock.advance(10)
            w.derive(f"correction {i}", agent="agent-b", against=[target])
        w.daemon.cycle()
        # the Canonical one first, then the newest contradiction; the oldest is cut
        assert w.daemon.listed(top) and w.daemon.listed(mid) and not w.daemon.listed(old)
        counters = w.daemon.counters()
        assert counters["contradictions_listed"] == 2
        assert counters["contradictions_dropped"] == 1
    finally:
        w.pipeline.close()


# =====================================================================================
# the cycle: counters, the sweep hook, a store that refuses
# =====================================================================================


def test_sweeps_run_after_each_cycle_with_the_daemons_time(world: World) -> None:
    seen: list[tuple[str, float]] = []

    def failing(session: Session, now: float) -> None:
        raise RuntimeError("boom")

    world.daemon.sweeps += [failing, lambda s, now: seen.append((s.name, now))]
    world.daemon.cycle()
    world.clock.advance(7)
    world.daemon.cycle()
    assert seen == [("s", T0), ("s", T0 + 7)]
    assert world.daemon.counters()["canonization_cycles"] == 2


def test_a_store_refusal_stops_the_cycle_and_is_counted(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = world.derive("user schema")
    for agent in ("agent-b", "agent-c", "agent-d"):
        world.derive(f"{agent} reads it", agent=agent, depends_on=[schema])
    world.clock.advance(AGE)

    def refuse(*args: Any) -> None:
        raise StoreError("the store is not answering")

    monkeypatch.setattr(world.store, "set_status", refuse)
    report = world.daemon.cycle()
    assert report.failed == "store error: the store is not answering" and report.steps == []
    assert status_of(world.session, schema) is Status.NONE
    assert world.daemon.counters()["canonization_cycles"] == 1
    assert world.daemon.failed_cycles == 1
    monkeypatch.undo()
    assert [s.node_id for s in world.daemon.cycle().steps] == [schema]


def test_attach_runs_cycles_on_the_writer_thread() -> None:
    """The cycle goes through WritePipeline.every, so it runs on the apply worker's thread."""
    w = World(CanonRules(cycle_interval_s=0.01))
    ran = threading.Event()
    threads: list[str] = []

    def note(session: Session, now: float) -> None:
        threads.append(threading.current_thread().name)
        ran.set()

    try:
        w.daemon.sweeps.append(note)
        w.daemon.attach(w.pipeline)
        assert ran.wait(10), "the pipeline never ran the daemon's cycle"
        assert threads[0] == "lambo-apply-s"
        assert w.daemon.counters()["canonization_cycles"] >= 1
    finally:
        w.pipeline.close()


# =====================================================================================
# lambo_stats
# =====================================================================================


def call(service: MemoryService, tool: str, **args: Any) -> ToolResult:
    async def go() -> ToolResult:
        return await service.call(tool, args)

    return anyio.run(go)


def test_stats_report_the_policy_cycles_and_canonical_count(tmp_path: Path) -> None:
    (tmp_path / "lambo.toml").write_text('[embedder]\nmatch_strategy = "canonical"\n')
    config = load_config(
        env={"LAMBO_HOME": str(tmp_path), "LAMBO_PROMOTION_POLICY": "solo"}, cwd=tmp_path
    )
    clock = ManualClock(T0)
    session = Session.open(
        MemoryStore(), "s", EmbedderPlan.from_config(config, LoadedModels()), clock=clock
    )
    pipeline = WritePipeline(session).start()
    daemon = Daemon(session, config)
    service = MemoryService(session, pipeline, config, daemon)
    try:
        body = call(service, "lambo_stats", agent_id="a").structured
        assert body is not None
        assert body["promotion_policy"] == "Solo" and daemon.rules.policy == "solo"
        assert body["canonization_cycles"] == 0 and body["canonical_count"] == 0

        concepts = [{"content": f"note {i}", "concept_type": "logic"} for i in range(20)]
        pipeline.submit("lambo_derive", {"agent_id": "a", "concepts": concepts})
        pipeline.submit(
            "lambo_derive",
            {"agent_id": "a", "concepts": [{"content": "user schema", "concept_type": "entity"}]},
        )
        assert pipeline.wait_idle(10)
        for agent in ("b", "c", "d"):
            cites: list[dict[str, Any]] = [
                {"content": f"{agent} uses it {i}", "concept_type": "logic"} for i in range(2)
            ]
            for c in cites:
                c["depends_on"] = ["user schema"]
            pipeline.submit("lambo_derive", {"agent_id": agent, "concepts": cites})
        assert pipeline.wait_idle(10)
        with session.index.lock:  # as if garbage collection had kept it through 3 sweeps
            (schema,) = session.index.graph.concepts_with_key(canonical_key("user schema"))
            schema.gc_survived = 3
        clock.advance(AGE)
        for _ in range(3):
            daemon.cycle()
        result = call(service, "lambo_stats", agent_id="a")
        body = result.structured
        assert body is not None
        assert body["canonization_cycles"] == 3
        assert body["canonization_promotions"] == 3
        assert body["canonical_count"] == 1
        assert "canonization: promotion_policy Solo, 1 canonical, 3 cycles" in result.texts[0]
    finally:
        pipeline.close()


def test_open_service_lists_the_stores_contradictions_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh serve's daemon lists what the store already holds at once, then cycles every
    interval: no cycle (so no canonization step) at start."""
    earlier = World()
    schema = earlier.derive("user schema")
    earlier.clock.advance(5)
    accounts = earlier.derive("accounts replaced users", agent="agent-b", against=[schema])
    earlier.pipeline.close()

    listed_once = threading.Event()
    original = Daemon.list_contradictions

    def noting(daemon: Daemon) -> int:
        found = original(daemon)
        listed_once.set()
        return found

    monkeypatch.setattr(Daemon, "list_contradictions", noting)
    (tmp_path / "lambo.toml").write_text('[embedder]\nmatch_strategy = "canonical"\n')
    config = load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path)
    service = open_service(earlier.store, config, ServeOptions(session="s"))
    try:
        daemon = service.daemon
        assert daemon is not None
        assert listed_once.wait(10), "the daemon did not list contradictions at start"
        assert daemon.listed(schema) and not daemon.listed(accounts)
        assert daemon.listing == daemon.listed
        assert daemon.counters()["canonization_cycles"] == 0
        jobs = service.pipeline.periodic.jobs
        (job,) = [p for p in jobs if p.job != service.pipeline.flush_access_counts]
        assert job.interval_s == 60.0
    finally:
        stop_service(service)


class RecordingPipeline:
    """Stands in for WritePipeline.every: the test runs the registered job itself."""

    def __init__(self) -> None:
        self.jobs: list[tuple[float, Any, float | None]] = []

    def every(self, interval_s: float, job: Any, *, first_in_s: float | None = None) -> None:
        self.jobs.append((interval_s, job, first_in_s))


def test_the_start_pass_lists_contradictions_and_takes_no_canonization_step(
    world: World,
) -> None:
    schema = world.derive("user schema")
    for agent in ("agent-b", "agent-c", "agent-d"):
        world.derive(f"{agent} reads it", agent=agent, depends_on=[schema])
    world.clock.advance(AGE)
    target = world.derive("billing ledger")
    world.clock.advance(5)
    world.derive("billing moved to stripe", agent="agent-b", against=[target])

    pipeline = RecordingPipeline()
    world.daemon.attach(pipeline)  # type: ignore[arg-type]
    ((interval, job, first_in_s),) = pipeline.jobs
    assert (interval, first_in_s) == (60.0, 0.0)  # due at once, then every interval
    job()  # the start pass: the list alone
    assert world.daemon.listed(target)
    assert world.daemon.listing == world.daemon.listed
    assert world.daemon.counters()["canonization_cycles"] == 0
    assert status_of(world.session, schema) is Status.NONE  # nothing promoted
    job()  # one interval later: a whole cycle
    assert world.daemon.counters()["canonization_cycles"] == 1
    assert status_of(world.session, schema) is not Status.NONE


def test_recall_checks_every_hit_until_the_daemons_first_listing(world: World) -> None:
    """A daemon that has not listed yet leaves recall checking every hit; from its first
    listing on, a new contradiction waits for the next cycle (the spec's rule)."""
    defaults = RecallDefaults()  # the session has no embedder: nothing to wait for

    def ask(query: str) -> str:
        args = {"agent_id": "a", "query": query}
        return recall(world.session, args, defaults=defaults, listing=world.daemon.listing).context

    schema = world.derive("user schema")
    world.clock.advance(5)
    world.derive("accounts replaced the users table", agent="agent-b", against=[schema])
    assert world.daemon.listing is None  # made, not listed yet
    assert "⚠ Contradicted at" in ask("user schema")
    assert world.daemon.list_contradictions() == 1
    assert "⚠ Contradicted at" in ask("user schema")

    ledger = world.derive("billing ledger")
    world.clock.advance(5)
    world.derive("billing moved to stripe", agent="agent-b", against=[ledger])
    assert "⚠ Contradicted at" not in ask("billing ledger")  # not before the next cycle
    world.daemon.cycle()
    assert "⚠ Contradicted at" in ask("billing ledger")


# =====================================================================================
# the support memo
# =====================================================================================


def test_memoized_support_follows_new_aging_and_removed_citations() -> None:
    w = World(CanonRules(batch=1))
    try:
        schema = w.derive("user schema")
        other = w.derive("billing ledger")
        w.derive("b reads it", agent="agent-b", depends_on=[schema])
        w.derive("c reads it", agent="agent-c", depends_on=[schema])
        w.derive("b posts", agent="agent-b", depends_on=[other])
        w.clock.advance(AGE)
        # batch 1: the schema (two interactions) is taken first; the ledger waits, memoized
        assert [s.node_id for s in w.daemon.cycle().steps] == [schema]
        memo = w.daemon._state.memo
        assert other in memo and memo[other].support.interactions == 1
        # the ledger's only citation goes away: nothing supports it, so it is not looked at
        with w.session.index.lock:
            w.session.index.graph.remove_concept(
                w.session.index.graph.concepts_with_key(canonical_key("b posts"))[0].id
            )
        assert [s.node_id for s in w.daemon.cycle().steps] == []
        assert status_of(w.session, other) is Status.NONE

        # a third citation of the Candidate counts only once it ages past the floor
        w.derive("d reads it", agent="agent-d", depends_on=[schema])
        w.clock.advance(AGE - 1)
        assert w.daemon.cycle().steps == []
        assert memo[schema].support.interactions == 2 and memo[schema].until == w.clock.now() + 1
        w.clock.advance(1)
        assert [(s.node_id, s.to_status) for s in w.daemon.cycle().steps] == [
            (schema, Status.VENERABLE)
        ]
        # a sweep that ran drops the memo
        w.daemon.sweeps.append(lambda session, now: "swept")
        w.daemon.cycle()
        assert w.daemon._state.memo_at is None
    finally:
        w.pipeline.close()


# =====================================================================================
# garbage collection through the daemon
# =====================================================================================


def test_the_daemon_runs_garbage_collection_after_canonization() -> None:
    from lambo_core.gc.settings import GcSettings

    w = World()
    w.daemon.gc_settings = GcSettings(elapsed_s=3600.0, min_age_s=3600.0)
    try:
        stray = w.derive("a stray observation nobody cites", concept_type="observation")
        schema = w.derive("user schema")
        for agent in ("agent-b", "agent-c", "agent-d"):
            w.derive(f"{agent} reads it", agent=agent, depends_on=[schema])
        w.clock.advance(AGE)
        w.daemon.cycle()  # starts the session's gc clock; no sweep yet
        assert w.daemon.last_sweep is None
        record = w.store.get_session("s")
        assert record is not None and record.last_gc_at == w.clock.now()
        w.clock.advance(30 * 86_400)
        report = w.daemon.cycle()
        sweep = w.daemon.last_sweep
        assert sweep is not None and sweep.trigger == "elapsed"
        assert stray in sweep.collected_ids and stray not in w.session.index.graph
        assert schema in w.session.index.graph  # cited by three others: kept
        assert [s.node_id for s in report.steps] == [schema]  # canonization ran first
        assert w.daemon._state.memo_at is None  # the sweep made the memo start over
    finally:
        w.pipeline.close()


def test_a_config_brings_its_gc_settings(tmp_path: Path) -> None:
    (tmp_path / "lambo.toml").write_text("[gc]\nelapsed_s = 120.0\n")
    config = load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path)
    session = Session.open(MemoryStore(), "s", PLAN, clock=ManualClock(T0))
    daemon = Daemon(session, config)
    assert daemon.gc_settings is not None and daemon.gc_settings.elapsed_s == 120.0
    assert Daemon(session, CanonRules()).gc_settings is None
