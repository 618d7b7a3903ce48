"""lambo_recall's lines about fresh writes and near-repeats, byte for byte.

The high-risk alert, conflict lines (concurrent edits and another agent's
reservation), possibly superseded (#198) and ``[selection] skip_redundant``
(#181). Sessions are written straight into a MemoryStore with fixed ids and
times (``tests.test_recall.Mem``), and the session's ManualClock sets "now".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from lambo_core.locks import Reservation
from lambo_core.model import Edge as GraphEdge
from lambo_core.model import EdgeType, Interaction, InteractionKind, Status, WriteBatch
from lambo_core.recall import Ranking, RecallDefaults, RecallResult, recall
from lambo_core.selection import SelectionRules
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import SqliteStore
from lambo_core.writes import WritePipeline
from tests.test_recall import SPEC_RANKING, T0, Mem, assert_mcp_shape, minilm, nid

__all__ = ["minilm"]  # a module-scoped fixture shared with test_recall

NOW = T0 + 3600  # 2025-10-09T09:53:20Z


def ask(
    session: Session,
    query: str,
    *,
    defaults: RecallDefaults | None = None,
    agent: str = "agent-a",
    holder: Any = None,
    ranking: Ranking | None = SPEC_RANKING,
    **kw: Any,
) -> RecallResult:
    """A recall under the spec system's ranking (its examples' scores), unless told."""
    result = recall(
        session,
        {"agent_id": agent, "query": query, "traversal_depth": 0, **kw},
        defaults=defaults or RecallDefaults(),
        holder=holder,
        ranking=ranking,
    )
    session.access_counts.drain()  # so one recall's hits do not raise the next one's scores
    assert_mcp_shape(result)
    return result


def add_edges(mem: Mem, edges: Sequence[tuple[str, str, EdgeType]], at: float, agent: str) -> None:
    """One call that only adds edges (as a merge or an action citing existing concepts does)."""
    mem.calls += 1
    iid = f"{mem.calls:08x}-1111-4000-8000-000000000000"
    inter = Interaction(iid, "s", agent, InteractionKind.ACTION, at, at, "call")
    made = [GraphEdge("s", a, b, kind, 1.0, iid, agent, at, at) for a, b, kind in edges]
    mem.store.apply(WriteBatch("s", inter, [], made))


# =====================================================================================
# the short-lived high-risk alert
# =====================================================================================


def schema_with_dependents(n: int, status: Status = Status.CANONICAL) -> Mem:
    mem = Mem()
    mem.write([(nid(1), "user schema", "entity")], status=status)
    for i in range(n):
        mem.write(
            [(nid(10 + i), f"handler {i} reads it", "logic")],
            deps=[(nid(10 + i), nid(1))],
            at=T0 + 60 * (i + 1),
        )
    return mem


def test_golden_high_risk_alert_on_a_fresh_write_to_a_load_bearing_concept() -> None:
    mem = schema_with_dependents(5, status=Status.NONE)
    add_edges(mem, [(nid(12), nid(1), EdgeType.MODIFIES)], at=NOW - 12, agent="agent-b")
    result = ask(mem.session(at=NOW), "user schema", top_k=1)
    line = (
        "⚡ High risk: load-bearing (blast radius 5) and written 12 s ago by agent-b "
        "(at 2025-10-09T09:53:08Z); re-check it before building on it"
    )
    assert result.context == (
        "user schema [Entity] (score 2.38, id 00000001, blast radius 5)\n"
        "⚑ Load-bearing pillar — 5 nodes depend on this. Modify with caution.\n" + line
    )
    assert result.warnings[1] == line
    # short-lived: 30 s after the write it has lapsed by itself
    assert "High risk" not in ask(mem.session(at=NOW + 19), "user schema", top_k=1).context


def test_high_risk_names_the_status_and_counts_a_contradiction_as_a_fresh_write() -> None:
    mem = schema_with_dependents(1)
    mem.write(
        [(nid(50), "accounts replaced the users table", "observation")],
        against=[(nid(50), nid(1))],
        at=NOW - 3,
        agent="agent-c",
    )
    result = ask(mem.session(at=NOW), "user schema", top_k=1)
    assert (
        "⚡ High risk: load-bearing (Canonical) and written 3 s ago by agent-c "
        "(at 2025-10-09T09:53:17Z); re-check it before building on it"
    ) in result.warnings
    # not load-bearing: a fresh write alone says nothing
    plain = Mem()
    plain.write([(nid(1), "user schema", "entity")], at=NOW - 1)
    assert ask(plain.session(at=NOW), "user schema").warnings == []


# =====================================================================================
# conflicts: concurrent edits and reservations
# =====================================================================================


def test_golden_conflict_when_two_agents_edit_a_concept_within_30_seconds() -> None:
    mem = Mem()
    mem.write([(nid(1), "deploy script", "resource")])
    add_edges(mem, [(nid(1), nid(1), EdgeType.MODIFIES)], at=NOW - 20, agent="agent-a")
    mem.write([(nid(2), "release job", "resource")], deps=[(nid(2), nid(1))], at=NOW - 5)
    add_edges(mem, [(nid(2), nid(1), EdgeType.PRODUCES)], at=NOW - 4, agent="agent-b")
    result = ask(mem.session(at=NOW), "deploy script", top_k=1)
    line = (
        "⚡ Conflict: agent-a, agent-b edited this in the last 30 s; "
        "reserve it with lambo_reserve before changing it"
    )
    assert result.context == (
        "deploy script [Resource] (score 1.13, id 00000001, blast radius 1)\n" + line + "\n\n"
        # the release job was written by agent-a and given a produces edge by agent-b: it
        # is under concurrent edit too, so it is kept past top_k, and its label says so
        "release job [Resource] (score 0.55, id 00000002; kept past top_k)\n" + line
    )
    assert result.warnings == [line, line]
    # once the window has passed, the line has lapsed
    assert ask(mem.session(at=NOW + 30), "deploy script", top_k=1).warnings == []


def test_one_agent_or_a_contradiction_makes_no_conflict() -> None:
    mem = Mem()
    mem.write([(nid(1), "deploy script", "resource")])
    mem.write([(nid(2), "release job", "resource")], deps=[(nid(2), nid(1))], at=NOW - 5)
    mem.write(
        [(nid(3), "deploy script was removed", "observation")],
        against=[(nid(3), nid(1))],
        at=NOW - 2,
        agent="agent-b",
    )
    result = ask(mem.session(at=NOW), "deploy script", top_k=1)
    assert not any("Conflict" in w for w in result.warnings)


def test_a_conflicted_hit_is_kept_past_top_k() -> None:
    mem = Mem()
    mem.write([(nid(1), "deploy script for staging", "resource")])
    mem.write([(nid(2), "deploy script for production", "resource")], at=T0 + 1)
    mem.write([(nid(3), "deploy script", "resource")], at=T0 + 2)
    add_edges(mem, [(nid(1), nid(1), EdgeType.MODIFIES)], at=NOW - 9, agent="agent-a")
    add_edges(mem, [(nid(2), nid(1), EdgeType.DEPENDENCY)], at=NOW - 8, agent="agent-b")
    result = ask(mem.session(at=NOW), "deploy script for production", top_k=1)
    assert [h["node_id"] for h in result.hits] == [nid(2), nid(1)]
    assert "⚡ Conflict: agent-a, agent-b edited this" in result.context.split("\n\n")[1]


def test_another_agents_reservation_is_a_conflict_line_the_callers_own_is_not() -> None:
    mem = Mem()
    mem.write([(nid(1), "deploy script", "resource")])
    session = mem.session(at=NOW)
    held = Reservation(nid(1), "agent-b", NOW + 29.5)

    def holder(node_id: str) -> Reservation | None:
        return held if node_id == nid(1) else None

    result = ask(session, "deploy script", holder=holder)
    assert result.warnings == [
        "⚡ Conflict: reserved by agent-b until 2025-10-09T09:53:50Z; coordinate before changing it"
    ]
    assert ask(session, "deploy script", holder=holder, agent="agent-b").warnings == []


# =====================================================================================
# possibly superseded, not declared (#198)
# =====================================================================================


def port_pair(*, declared: EdgeType | None = None) -> Mem:
    mem = Mem()
    mem.write([(nid(1), "the embedder listens on port 8080", "logic")])
    mem.write([(nid(2), "the embedder listens on port 8081", "logic")], at=T0 + 60)
    add_edges(mem, [(nid(2), nid(1), EdgeType.SUPERSEDES_SUSPECTED)], at=T0 + 60, agent="lambo")
    if declared is not None:
        add_edges(mem, [(nid(2), nid(1), declared)], at=T0 + 61, agent="agent-a")
    return mem


LINE_ON = RecallDefaults(supersession_line="on")
SUPERSEDED = (
    '⚠ Possibly superseded by "the embedder listens on port 8081" (id 00000002), not declared'
)


def test_golden_possibly_superseded_line_when_both_are_shown() -> None:
    session = port_pair().session()
    result = ask(session, "embedder port 8080", defaults=LINE_ON)
    assert result.context == (
        "the embedder listens on port 8080 [Logic] (score 0.92, id 00000001)\n"
        + SUPERSEDED
        + "\n\nthe embedder listens on port 8081 [Logic] (score 0.64, id 00000002)"
    )
    assert result.warnings == [SUPERSEDED]
    assert result.hits[0]["possibly_superseded_by"] == nid(2)
    assert "possibly_superseded_by" not in result.hits[1]


def test_possibly_superseded_field_without_the_line_where_it_is_not_shown() -> None:
    session = port_pair().session()
    for defaults in (RecallDefaults(), RecallDefaults(supersession_line="off")):
        # auto: this session has no measured embedding contract (no contract at all)
        result = ask(session, "embedder port 8080", defaults=defaults)
        assert result.warnings == [] and "Possibly" not in result.context
        assert result.hits[0]["possibly_superseded_by"] == nid(2)
    # the newer concept not in the result: no line, the field still names it
    alone = ask(session, "port 8080", defaults=LINE_ON, top_k=1)
    assert [h["node_id"] for h in alone.hits] == [nid(1)]
    assert alone.warnings == [] and alone.hits[0]["possibly_superseded_by"] == nid(2)


@pytest.mark.parametrize("declared", [EdgeType.CONTRADICTS, EdgeType.DEPENDENCY])
def test_possibly_superseded_lapses_once_the_pair_is_declared(declared: EdgeType) -> None:
    session = port_pair(declared=declared).session()
    result = ask(session, "embedder port 8080", defaults=LINE_ON)
    assert "Possibly superseded" not in result.context
    assert all("possibly_superseded_by" not in h for h in result.hits)


# =====================================================================================
# [selection] skip_redundant (#181)
# =====================================================================================


def repeats() -> Session:
    mem = Mem()
    mem.write([(nid(1), "deploys run blue green", "logic")], at=T0 + 3)
    mem.write([(nid(2), "deploys  run blue green", "logic")], at=T0 + 2)  # spacing only
    mem.write([(nid(3), "Deploys run blue green", "logic")], at=T0 + 1)  # case counts
    mem.write([(nid(4), "deploys run canary first", "logic")], at=T0)
    return mem.session()


SKIP = RecallDefaults(selection=SelectionRules(skip_redundant=True))


def test_skip_redundant_off_is_byte_identical_and_on_names_the_repeat() -> None:
    session = repeats()
    off = ask(session, "deploys run blue green", top_k=3)
    assert [h["node_id"] for h in off.hits] == [nid(1), nid(2), nid(3)]
    assert all("skipped_redundant" not in h for h in off.hits)
    on = ask(session, "deploys run blue green", top_k=3, defaults=SKIP)
    assert [h["node_id"] for h in on.hits] == [nid(1), nid(3), nid(4)]
    assert on.context.split("\n")[0] == (
        "deploys run blue green [Logic] (score 0.81, id 00000001, also 00000002)"
    )
    assert on.hits[0]["skipped_redundant"] == [{"node_id": nid(2), "signal": "same_content"}]
    assert all("skipped_redundant" not in h for h in on.hits[1:])
    # nothing repeated among the hits (two values of one setting are never repeats):
    # the same bytes as with the setting off
    ports = port_pair().session()
    plain = ask(ports, "embedder port", top_k=3)
    assert len(plain.hits) == 2
    assert ask(ports, "embedder port", top_k=3, defaults=SKIP) == plain


def test_a_hit_with_a_warning_line_of_its_own_is_never_skipped() -> None:
    mem = Mem()
    # Canonical sorts first, so the repeat with the pillar line comes second
    mem.write([(nid(1), "deploys run blue green", "logic")], at=T0 + 3, status=Status.CANONICAL)
    mem.write([(nid(2), "deploys  run blue green", "logic")], at=T0 + 2)
    for i in range(5):
        mem.write([(nid(10 + i), f"job {i}", "logic")], deps=[(nid(10 + i), nid(2))], at=T0)
    result = ask(mem.session(), "deploys run blue green", top_k=2, defaults=SKIP)
    assert [h["node_id"] for h in result.hits] == [nid(1), nid(2)]
    assert all("skipped_redundant" not in h for h in result.hits)
    assert "⚑ Load-bearing pillar — 5 nodes" in result.context


def test_auto_shows_the_line_only_under_a_measured_contract() -> None:
    from lambo_core.embed.catalog import supersession_line_measured

    assert supersession_line_measured({"kind": "onnx", "model": None, "dim": 1024})  # bge-m3
    assert not supersession_line_measured({"kind": "onnx", "model": "minilm", "dim": 384})
    assert not supersession_line_measured({"kind": "none", "model": None, "dim": 0})
    assert not supersession_line_measured(None)


def test_a_real_write_flags_the_pair_and_recall_carries_it(tmp_path: Any, minilm: Any) -> None:
    """Through the write pipeline and MiniLM: the merge refuses (numbers differ), the write
    flags the pair, and recall names the newer concept on the older hit."""
    pipeline = WritePipeline(
        Session.open(SqliteStore(tmp_path / "p.db"), "s", EmbedderPlan.ready(minilm))
    ).start()
    try:
        details = []
        for port in (8080, 8081):
            ack = pipeline.submit(
                "lambo_derive",
                {
                    "agent_id": "agent-a",
                    "concepts": [
                        {"content": f"the embedder listens on port {port}", "concept_type": "logic"}
                    ],
                },
            )
            view = pipeline.session.receipts.wait(ack.structured["receipt"], "agent-a", "s", 30_000)
            details.append(view.detail)
        assert "1 possible undeclared supersession(s) flagged" in details[1]
        session = pipeline.session
        by_text = {c.content: c.id for c in session.index.graph.iter_concepts()}
        older = by_text["the embedder listens on port 8080"]
        newer = by_text["the embedder listens on port 8081"]
        auto = ask(session, "which port does the embedder listen on")
        hit = next(h for h in auto.hits if h["node_id"] == older)
        assert hit["possibly_superseded_by"] == newer
        assert "Possibly superseded" not in auto.context  # MiniLM: not measured for it
        shown = ask(session, "which port does the embedder listen on", defaults=LINE_ON)
        assert (
            '⚠ Possibly superseded by "the embedder listens on port 8081" '
            f"(id {newer[:8]}), not declared"
        ) in shown.warnings
    finally:
        pipeline.close()
