"""The "is this concept currently contradicted" rule and the stale report, on SessionGraph.

Times are plain seconds: T0 is when the hit was written; ``now`` is passed in,
so the 60 s evidence age floor is tested without a clock.
"""

from __future__ import annotations

from typing import Any

from lambo_core.contradiction import (
    STALE_BYTES_MAX,
    STALE_ROWS_MAX,
    is_contradicted,
    stale_dependents,
)
from lambo_core.index.graph import SessionGraph
from lambo_core.model import Concept, ConceptType, Edge, EdgeType, new_id
from lambo_core.text import canonical_key

S = "s"
T0 = 1_000_000.0
AGE = 60.0


class G:
    """A SessionGraph with helpers that date every write."""

    def __init__(self) -> None:
        self.graph = SessionGraph(S)

    def concept(
        self,
        content: str,
        at: float = T0,
        *,
        agent: str = "a",
        about: float | None = None,
        interaction: str | None = None,
    ) -> str:
        c = Concept(
            id=new_id(),
            session=S,
            content=content,
            canonical_key=canonical_key(content),
            concept_type=ConceptType.LOGIC,
            created_at=at,
            about_time=at if about is None else about,
            agent_id=agent,
            interaction_id=interaction or new_id(),
        )
        self.graph.add_concept(c)
        return c.id

    def edge(
        self,
        src: str,
        dst: str,
        etype: EdgeType,
        at: float,
        *,
        agent: str = "a",
        about: float | None = None,
        interaction: str | None = None,
    ) -> None:
        about = at if about is None else about
        self.graph.add_edge(
            Edge(S, src, dst, etype, 1.0, interaction or new_id(), agent, at, about)
        )

    def cite(self, src: str, dst: str, at: float, **kw: Any) -> None:
        self.edge(src, dst, EdgeType.DEPENDENCY, at, **kw)

    def contradict(self, src: str, dst: str, at: float, **kw: Any) -> None:
        self.edge(src, dst, EdgeType.CONTRADICTS, at, **kw)


def test_an_uncontradicted_concept_is_not_flagged() -> None:
    g = G()
    hit = g.concept("user schema")
    assert is_contradicted(g.graph, hit, T0 + 1000, AGE) is None
    assert is_contradicted(g.graph, "no-such-node", T0, AGE) is None


def test_a_contradiction_without_evidence_fires_at_once() -> None:
    g = G()
    hit = g.concept("user schema")
    fix = g.concept("accounts replaced the users table", T0 + 10, agent="c")
    g.contradict(fix, hit, T0 + 10, agent="c")
    info = is_contradicted(g.graph, hit, T0 + 10, AGE)
    assert info is not None
    assert (info.node_id, info.by, info.at, info.agent_id) == (hit, fix, T0 + 10, "c")
    assert info.evidence_at is None


def test_the_contradiction_must_be_newer_than_the_hit() -> None:
    g = G()
    hit = g.concept("user schema", T0 + 100)
    fix = g.concept("accounts replaced the users table", T0 + 200)
    g.contradict(fix, hit, T0 + 200, about=T0 + 50)  # backdated before the hit
    assert is_contradicted(g.graph, hit, T0 + 1000, AGE) is None
    g2 = G()
    hit2 = g2.concept("user schema", T0 + 100)
    fix2 = g2.concept("accounts replaced the users table", T0 + 200)
    g2.contradict(fix2, hit2, T0 + 200, about=T0 + 100)  # same date: not strictly newer
    assert is_contradicted(g2.graph, hit2, T0 + 1000, AGE) is None


def test_aged_newer_evidence_outweighs_an_older_contradiction() -> None:
    g = G()
    hit = g.concept("user schema")
    fix = g.concept("accounts replaced the users table", T0 + 10, agent="c")
    g.contradict(fix, hit, T0 + 10, agent="c")
    user = g.concept("the login query reads the user schema", T0 + 20, agent="b")
    g.cite(user, hit, T0 + 20, agent="b")
    # Under the age floor the citation does not count yet.
    assert is_contradicted(g.graph, hit, T0 + 20 + AGE - 0.001, AGE) is not None
    # At the floor it counts, and it is newer than the contradiction: quiet.
    assert is_contradicted(g.graph, hit, T0 + 20 + AGE, AGE) is None


def test_older_evidence_does_not_outweigh_a_newer_contradiction() -> None:
    g = G()
    hit = g.concept("user schema")
    user = g.concept("the login query reads the user schema", T0 + 5, agent="b")
    g.cite(user, hit, T0 + 5, agent="b")
    fix = g.concept("accounts replaced the users table", T0 + 500, agent="c")
    g.contradict(fix, hit, T0 + 500, agent="c")
    info = is_contradicted(g.graph, hit, T0 + 10_000, AGE)
    assert info is not None and info.evidence_at == T0 + 5


def test_evidence_dated_like_the_contradiction_outweighs_it() -> None:
    g = G()
    hit = g.concept("user schema")
    fix = g.concept("accounts replaced the users table", T0 + 10, agent="c")
    g.contradict(fix, hit, T0 + 10, agent="c")
    user = g.concept("the login query reads the user schema", T0 + 10, agent="b")
    g.cite(user, hit, T0 + 10, agent="b")
    assert is_contradicted(g.graph, hit, T0 + 10 + AGE, AGE) is None


def test_age_is_measured_from_the_write_not_its_event_time() -> None:
    g = G()
    hit = g.concept("user schema")
    fix = g.concept("accounts replaced the users table", T0 + 10, agent="c")
    g.contradict(fix, hit, T0 + 10, agent="c")
    # A citation written at T0+1000 with an event_time of T0+900: its age runs from
    # T0+1000, its date (for outweighing) is T0+900.
    user = g.concept("the login query reads the user schema", T0 + 1000, agent="b")
    g.cite(user, hit, T0 + 1000, agent="b", about=T0 + 900)
    assert is_contradicted(g.graph, hit, T0 + 1000 + 30, AGE) is not None  # 30 s old
    assert is_contradicted(g.graph, hit, T0 + 1000 + AGE, AGE) is None


def test_a_backdated_contradiction_reads_as_outweighed() -> None:
    g = G()
    hit = g.concept("user schema")
    user = g.concept("the login query reads the user schema", T0 + 100, agent="b")
    g.cite(user, hit, T0 + 100, agent="b")
    fix = g.concept("accounts replaced the users table", T0 + 500, agent="c")
    g.contradict(fix, hit, T0 + 500, agent="c", about=T0 + 50)  # historical ingest
    assert is_contradicted(g.graph, hit, T0 + 10_000, AGE) is None


def test_children_count_as_evidence() -> None:
    g = G()
    hit = g.concept("auth design")
    fix = g.concept("auth was redesigned", T0 + 10, agent="c")
    g.contradict(fix, hit, T0 + 10, agent="c")
    child = g.concept("tokens expire after 1h", T0 + 20, agent="b")
    g.edge(hit, child, EdgeType.HIERARCHICAL, T0 + 20, agent="b")
    assert is_contradicted(g.graph, hit, T0 + 20 + AGE, AGE) is None


def test_own_evidence_does_not_count() -> None:
    g = G()
    hit = g.concept("user schema")
    fix = g.concept("accounts replaced the users table", T0 + 10, agent="c")
    g.contradict(fix, hit, T0 + 10, agent="c")
    # The declaring agent's own later citation does not silence it ...
    mine = g.concept("c's later note on the user schema", T0 + 20, agent="c")
    g.cite(mine, hit, T0 + 20, agent="c")
    # ... nor does the contradicting concept citing the hit itself (another agent's write).
    g.cite(fix, hit, T0 + 30, agent="d")
    assert is_contradicted(g.graph, hit, T0 + 10_000, AGE) is not None
    # Another agent's citation does.
    other = g.concept("b reads the user schema", T0 + 40, agent="b")
    g.cite(other, hit, T0 + 40, agent="b")
    assert is_contradicted(g.graph, hit, T0 + 10_000, AGE) is None


def test_a_concept_written_with_the_hit_is_not_evidence() -> None:
    g = G()
    call = new_id()
    hit = g.concept("user schema", interaction=call)
    sibling = g.concept("users have emails", interaction=call, agent="b")
    fix = g.concept("accounts replaced the users table", T0 + 10, agent="c")
    g.contradict(fix, hit, T0 + 10, agent="c")
    # Even cited later by another write, the sibling was written with the hit.
    g.cite(sibling, hit, T0 + 20, agent="b")
    assert is_contradicted(g.graph, hit, T0 + 10_000, AGE) is not None
    # A citation declared by the hit's own write does not count either.
    g2 = G()
    call2 = new_id()
    hit2 = g2.concept("user schema", interaction=call2)
    older = g2.concept("an older concept", T0 - 100, agent="b")
    g2.cite(older, hit2, T0 + 20, agent="b", interaction=call2)
    fix2 = g2.concept("accounts replaced the users table", T0 + 10, agent="c")
    g2.contradict(fix2, hit2, T0 + 10, agent="c")
    assert is_contradicted(g2.graph, hit2, T0 + 10_000, AGE) is not None


def test_a_removed_contradicting_concept_lapses_the_warning() -> None:
    g = G()
    hit = g.concept("user schema")
    fix = g.concept("accounts replaced the users table", T0 + 10, agent="c")
    g.contradict(fix, hit, T0 + 10, agent="c")
    assert is_contradicted(g.graph, hit, T0 + 20, AGE) is not None
    g.graph.remove_concept(fix)
    assert is_contradicted(g.graph, hit, T0 + 20, AGE) is None


def test_the_newest_contradiction_wins_then_key_then_id() -> None:
    g = G()
    hit = g.concept("user schema")
    old = g.concept("zzz an older correction", T0 + 10, agent="c")
    g.contradict(old, hit, T0 + 10, agent="c")
    new = g.concept("zzz a newer correction", T0 + 20, agent="d")
    g.contradict(new, hit, T0 + 20, agent="d")
    info = is_contradicted(g.graph, hit, T0 + 30, AGE)
    assert info is not None and info.by == new
    tie = g.concept("aaa same date, earlier key", T0 + 20, agent="e")
    g.contradict(tie, hit, T0 + 20, agent="e")
    info = is_contradicted(g.graph, hit, T0 + 30, AGE)
    assert info is not None and info.by == tie


def test_an_outweighed_newest_does_not_hide_an_older_one_that_still_holds() -> None:
    # b's citation outweighs c's contradiction, but not b's own (your own evidence
    # does not count against you), so b's older contradiction is the one that holds.
    g = G()
    hit = g.concept("user schema")
    by_b = g.concept("b says the schema is gone", T0 + 10, agent="b")
    g.contradict(by_b, hit, T0 + 10, agent="b")
    by_c = g.concept("c says the schema is gone", T0 + 15, agent="c")
    g.contradict(by_c, hit, T0 + 15, agent="c")
    cite = g.concept("b cites the schema", T0 + 20, agent="b")
    g.cite(cite, hit, T0 + 20, agent="b")
    info = is_contradicted(g.graph, hit, T0 + 1000, AGE)
    assert info is not None and info.by == by_b  # c's is outweighed by b's citation


def test_stale_dependents_lists_direct_citations_only() -> None:
    g = G()
    hit = g.concept("GET /api/v1/memo (list all)")
    dep = g.concept("list-all returns every memo", T0 + 1, agent="b")
    g.cite(dep, hit, T0 + 1, agent="b")
    chain = g.concept("the UI shows every memo", T0 + 2, agent="b")
    g.cite(chain, dep, T0 + 2, agent="b")  # indirect: never counted
    child = g.concept("a child via parent_of", T0 + 2, agent="b")
    g.edge(hit, child, EdgeType.HIERARCHICAL, T0 + 2, agent="b")  # parent_of: never a row
    fix = g.concept("list-all removed in v0.22; the replacement pages at 10", T0 + 500, agent="c")
    g.contradict(fix, hit, T0 + 500, agent="c")
    report = stale_dependents(g.graph, [hit], T0 + 600, AGE)
    assert report.total == 1
    assert [r.as_dict() for r in report.rows] == [
        {"node_id": dep, "snippet": "list-all returns every memo", "cited_id": hit}
    ]
    assert report.as_dict()["total"] == 1


def test_stale_dependents_skip_uncontradicted_targets_and_self_contradictors() -> None:
    g = G()
    hit = g.concept("user schema")
    quiet = g.concept("payments table")
    g.cite(g.concept("reads payments", T0 + 1, agent="b"), quiet, T0 + 1, agent="b")
    dep = g.concept("reads users", T0 + 1, agent="b")
    g.cite(dep, hit, T0 + 1, agent="b")
    fix = g.concept("accounts replaced the users table", T0 + 500, agent="c")
    g.contradict(fix, hit, T0 + 500, agent="c")
    # A concept that cites the hit and also contradicts it is not "resting" on it.
    both = g.concept("cites and contradicts", T0 + 2, agent="d")
    g.cite(both, hit, T0 + 2, agent="d")
    g.contradict(both, hit, T0 + 3, agent="d")
    report = stale_dependents(g.graph, [hit, quiet, hit], T0 + 600, AGE)
    assert report.total == 1 and [r.node_id for r in report.rows] == [dep]


def test_stale_report_bounds_rows_and_bytes_but_keeps_the_total() -> None:
    g = G()
    hit = g.concept("user schema")
    for i in range(STALE_ROWS_MAX + 10):
        g.cite(g.concept(f"dependent {i:03d}", T0 + 1, agent="b"), hit, T0 + 1, agent="b")
    fix = g.concept("accounts replaced the users table", T0 + 500, agent="c")
    g.contradict(fix, hit, T0 + 500, agent="c")
    report = stale_dependents(g.graph, [hit], T0 + 600, AGE)
    assert report.total == STALE_ROWS_MAX + 10
    assert sum(r.size for r in report.rows) <= STALE_BYTES_MAX
    each = 36 + 36 + len("dependent 000")
    assert len(report.rows) == STALE_BYTES_MAX // each  # the byte cap binds first here
    # Without the byte cap (lambo_stale pages) the row cap binds.
    page = stale_dependents(g.graph, [hit], T0 + 600, AGE, max_bytes=None)
    assert len(page.rows) == STALE_ROWS_MAX and page.total == STALE_ROWS_MAX + 10
    # Ordered by dependent id under one cited concept.
    assert [r.node_id for r in page.rows] == sorted(r.node_id for r in page.rows)


def test_stale_snippets_are_one_line_and_capped() -> None:
    g = G()
    hit = g.concept("user schema")
    long = "é" * 100 + "\nsecond line"
    g.cite(g.concept(long, T0 + 1, agent="b"), hit, T0 + 1, agent="b")
    fix = g.concept("accounts replaced the users table", T0 + 500, agent="c")
    g.contradict(fix, hit, T0 + 500, agent="c")
    row = stale_dependents(g.graph, [hit], T0 + 600, AGE).rows[0]
    assert row.snippet == "é" * 80 + "…"
    assert row.size == 72 + len(row.snippet.encode("utf-8"))
