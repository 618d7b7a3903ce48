"""Replacement candidates, the possibly-superseded flag and the stale report on receipts.

Real SQLite, real MiniLM (merge threshold 0.73), real apply worker; a
ManualClock, moved on 1 s after each write (so no two writes are dated
alike) and by hand where ages matter. Each write waits for its receipt before
the next one is sent, so every hit a write reads is already in the index.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lambo_core.clock import ManualClock
from lambo_core.embed.onnx import OnnxEmbedder
from lambo_core.model import EdgeType, short_id
from lambo_core.receipts import ReceiptState, ReceiptView, render_line
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import SqliteStore
from lambo_core.supersession import one_value_changed
from lambo_core.writes import WritePipeline
from lambo_core.writes.builder import CANDIDATE_BYTES

CLAUSE = (
    "replacement candidate(s): existing concepts this write may replace (nothing recorded; "
    "cite one in against on a later call only if it really is replaced)"
)
MERGED = "; merged with this write, may be replaced"
NEWER = (
    "; newer: dated after this write, so it may replace this write, not the other way round; "
    "do not cite it in against"
)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def pipeline(tmp_path: Path, minilm: OnnxEmbedder, clock: ManualClock) -> Iterator[WritePipeline]:
    store = SqliteStore(tmp_path / "x.db")
    p = WritePipeline(Session.open(store, "s", EmbedderPlan.ready(minilm), clock=clock)).start()
    yield p
    p.close()


def c(content: str, ctype: str = "logic", **kw: Any) -> dict[str, Any]:
    return {"content": content, "concept_type": ctype, **kw}


def settled(p: WritePipeline, ack: Any, agent: str) -> ReceiptView:
    """Wait for the write; then move the clock on 1 s, so no two writes are dated alike."""
    view = p.session.receipts.wait(ack.structured["receipt"], agent, p.session.name, 30_000)
    assert view.state is ReceiptState.APPLIED, view.detail
    clock = p.session.clock
    assert isinstance(clock, ManualClock)
    clock.advance(1.0)
    return view


def derive(p: WritePipeline, *concepts: dict[str, Any], agent: str = "a", **kw: Any) -> ReceiptView:
    ack = p.submit("lambo_derive", {"agent_id": agent, "concepts": list(concepts), **kw})
    return settled(p, ack, agent)


def one(
    p: WritePipeline, content: str, ctype: str = "logic", *, agent: str = "a", **kw: Any
) -> str:
    """Write one concept (``kw``: event_time for the call, the rest for the concept); its id."""
    call = {"event_time": kw.pop("event_time")} if "event_time" in kw else {}
    view = derive(p, c(content, ctype, **kw), agent=agent, **call)
    assert view.data["created_count"] == 1, view.detail
    return str(view.data["created"][0])


def candidates(view: ReceiptView) -> list[dict[str, Any]]:
    return list(view.data["replacement_candidates"]["candidates"])


# -- replacement candidates ---------------------------------------------------------------


def test_a_changed_port_lists_the_old_fact_and_flags_a_supersession(
    pipeline: WritePipeline, clock: ManualClock
) -> None:
    old = one(pipeline, "the embedder listens on port 8080")
    clock.advance(10)
    view = derive(pipeline, c("the embedder listens on port 8081"))
    new = view.data["created"][0]
    rows = candidates(view)
    assert len(rows) == 1 and view.data["replacement_candidates"]["total"] == 1
    row = rows[0]
    assert set(row) == {"id", "node_id", "excerpt", "cosine", "new_id"}  # no merged/newer
    assert row["id"] == short_id(old) and row["node_id"] == old
    assert row["excerpt"] == "the embedder listens on port 8080"
    assert row["new_id"] == short_id(new)
    assert 0.73 <= row["cosine"] < 1.0 and row["cosine"] == round(row["cosine"], 4)
    first, *lines = view.detail.split("\n")
    assert first == (
        "derived 1 concept(s): 1 created (1 embedded), 0 matched existing; "
        f"1 possible undeclared supersession(s) flagged; 1 {CLAUSE}"
    )
    assert lines == [
        f'- {short_id(old)} "the embedder listens on port 8080" '
        f"(cosine {row['cosine']:.4f}, for {short_id(new)})"
    ]
    # Rendered like the spec's example: the candidate line indented under the receipt.
    rendered = render_line(view).split("\n")
    assert rendered[1].startswith(f'  - {short_id(old)} "the embedder listens on port 8080"')
    assert view.data["possible_supersessions"] == 1

    # The flag is an edge newer -> older, in RAM and in the store (no CHECK on edge_type).
    graph = pipeline.session.index.graph
    assert graph.edge(new, old, EdgeType.SUPERSEDES_SUSPECTED) is not None
    assert graph.edge(old, new, EdgeType.SUPERSEDES_SUSPECTED) is None
    assert graph.blast_radius(old) == 0  # a suspicion adds no dependent
    stored = [
        e for e in pipeline.session.store.edges("s") if e.edge_type is EdgeType.SUPERSEDES_SUSPECTED
    ]
    assert [(e.src, e.dst) for e in stored] == [(new, old)]


def test_the_durable_outcome_keeps_only_the_summary(pipeline: WritePipeline) -> None:
    one(pipeline, "the embedder listens on port 8080")
    ack = pipeline.submit(
        "lambo_derive", {"agent_id": "a", "concepts": [c("the embedder listens on port 8081")]}
    )
    view = settled(pipeline, ack, "a")
    assert "\n" in view.detail and candidates(view)
    intent = pipeline.session.store.get_intent(ack.structured["receipt"])
    assert intent is not None and intent.outcome is not None
    assert intent.outcome["detail"] == view.detail.split("\n")[0]
    assert "replacement_candidates" not in intent.outcome["data"]
    assert intent.outcome["data"]["possible_supersessions"] == 1


def test_a_receipt_without_candidates_reads_as_before(pipeline: WritePipeline) -> None:
    one(pipeline, "the embedder listens on port 8080")
    view = derive(pipeline, c("quarterly revenue grew by eight percent"))
    assert view.detail == "derived 1 concept(s): 1 created (1 embedded), 0 matched existing"
    assert "replacement_candidates" not in view.data
    assert "possible_supersessions" not in view.data
    assert "stale_report" not in view.data  # no against on this write


def test_a_change_before_the_predicate_is_listed_but_not_flagged(pipeline: WritePipeline) -> None:
    old = one(pipeline, "J1 round-1 verdict: pass")
    view = derive(pipeline, c("J2 round-1 verdict: pass"))
    assert [r["node_id"] for r in candidates(view)] == [old]
    assert "possible_supersessions" not in view.data
    assert "supersession" not in view.detail
    assert pipeline.session.index.graph.edges_in(old, (EdgeType.SUPERSEDES_SUSPECTED,)) == []


def test_the_concept_merged_with_is_listed_and_marked(pipeline: WritePipeline) -> None:
    old = one(pipeline, "flush retries three times")
    view = derive(pipeline, c("the flush retries 3 times"))  # one number, two spellings: merges
    assert view.data["matched"] == [old] and view.data["semantic_merged"] == 1
    rows = candidates(view)
    assert len(rows) == 1
    assert rows[0]["merged"] is True and "newer" not in rows[0]
    assert rows[0]["id"] == short_id(old) and rows[0]["new_id"] == short_id(old)
    assert view.detail.split("\n")[1].endswith(f", for {short_id(old)}){MERGED}")
    assert "supersession" not in view.detail  # only a created concept can be flagged


def test_concepts_tied_for_the_merge_are_each_marked(pipeline: WritePipeline) -> None:
    # MiniLM's tokenizer drops accents, so these two embed identically; against keeps
    # the second from merging into the first.
    first = one(pipeline, "the café opens at nine")
    second = one(pipeline, "the cafe opens at nine", against=[short_id(first)])
    view = derive(pipeline, c("the cafe opens at nine every morning"))
    assert view.data["semantic_merged"] == 1
    rows = candidates(view)
    assert {r["node_id"] for r in rows} == {first, second}
    assert all(r["merged"] for r in rows)
    target = view.data["matched"][0]
    assert {r["new_id"] for r in rows} == {short_id(target)}
    assert rows[0]["cosine"] == rows[1]["cosine"]


def test_a_newer_candidate_is_marked_and_the_flag_points_at_the_backfill(
    pipeline: WritePipeline,
) -> None:
    current = one(pipeline, "the embedder listens on port 8081")
    # A backfill: an older fact recorded after its replacement.
    view = derive(
        pipeline, c("the embedder listens on port 8080"), event_time="2024-01-01T00:00:00Z"
    )
    backfill = view.data["created"][0]
    (row,) = candidates(view)
    assert row["node_id"] == current and row["newer"] is True and "merged" not in row
    assert view.detail.split("\n")[1].endswith(NEWER)
    graph = pipeline.session.index.graph
    # The later fact (by about-time) is the possible replacement.
    assert graph.edge(current, backfill, EdgeType.SUPERSEDES_SUSPECTED) is not None
    assert graph.edge(backfill, current, EdgeType.SUPERSEDES_SUSPECTED) is None


def test_two_concepts_dated_alike_are_not_flagged_nor_marked_newer(
    pipeline: WritePipeline,
) -> None:
    when = "2024-01-01T00:00:00Z"
    one(pipeline, "the embedder listens on port 8080", event_time=when)
    view = derive(pipeline, c("the embedder listens on port 8081"), event_time=when)
    (row,) = candidates(view)
    assert "newer" not in row
    assert "possible_supersessions" not in view.data


def test_other_types_and_entities_are_never_candidates(pipeline: WritePipeline) -> None:
    one(pipeline, "the embedder listens on port 8080", "logic")
    view = derive(pipeline, c("the embedder listens on port 8081", "observation"))
    assert "replacement_candidates" not in view.data and "possible_supersessions" not in view.data
    one(pipeline, "service mesh version 1.4", "entity")
    view = derive(pipeline, c("service mesh version 1.5", "entity"))
    assert "replacement_candidates" not in view.data and "possible_supersessions" not in view.data


def test_a_pair_tied_by_depends_on_or_against_is_neither_listed_nor_flagged(
    pipeline: WritePipeline,
) -> None:
    old = one(pipeline, "the embedder listens on port 8080")
    view = derive(pipeline, c("the embedder listens on port 8081", depends_on=[short_id(old)]))
    assert "replacement_candidates" not in view.data and "possible_supersessions" not in view.data
    view = derive(pipeline, c("the embedder listens on port 8082", against=[short_id(old)]))
    rows = candidates(view) if "replacement_candidates" in view.data else []
    assert old not in {r["node_id"] for r in rows}  # 8081 may be listed; 8080 never
    created = view.data["created"][0]
    graph = pipeline.session.index.graph
    assert graph.edge(created, old, EdgeType.SUPERSEDES_SUSPECTED) is None


def test_concepts_of_the_same_call_are_never_listed(pipeline: WritePipeline) -> None:
    view = derive(
        pipeline,
        c("the embedder listens on port 8080"),
        c("the embedder listens on port 8081"),
    )
    assert view.data["created_count"] == 2
    assert "replacement_candidates" not in view.data and "possible_supersessions" not in view.data


def test_at_most_three_per_new_concept_closest_first(pipeline: WritePipeline) -> None:
    for port in (8001, 8002, 8003, 8004, 8005):
        one(pipeline, f"the embedder listens on port {port}")
    view = derive(pipeline, c("the embedder listens on port 8000"))
    rows = candidates(view)
    assert len(rows) == 3 and view.data["replacement_candidates"]["total"] == 3
    cosines = [r["cosine"] for r in rows]
    assert cosines == sorted(cosines, reverse=True)
    # Every near older value is flagged, not only the three listed.
    new = view.data["created"][0]
    flagged = pipeline.session.index.graph.edges_out(new, (EdgeType.SUPERSEDES_SUSPECTED,))
    assert len(flagged) == view.data["possible_supersessions"] == 5


def test_rows_are_bounded_at_2048_bytes_with_the_true_total(pipeline: WritePipeline) -> None:
    stem = "the nightly backup job of the billing service writes its archive to the bucket on shard"
    for n in (1, 2, 3):
        one(pipeline, f"{stem} alpha number {n}", "observation")
    view = derive(
        pipeline,
        *[
            c(f"{stem} {name} number 9", "observation")
            for name in ("alpha", "beta", "gamma", "delta")
        ],
    )
    block = view.data["replacement_candidates"]
    assert block["total"] == 12  # three per new concept
    rows = block["candidates"]
    sizes = [len(json.dumps(r, ensure_ascii=False, separators=(",", ":")).encode()) for r in rows]
    assert sum(sizes) <= CANDIDATE_BYTES and len(rows) < 12
    assert sum(sizes) + sizes[0] > CANDIDATE_BYTES  # the next row would not have fitted
    lines = view.detail.split("\n")
    assert lines[0].endswith(f"; 12 {CLAUSE}")
    assert len(lines) == 1 + len(rows) + 1
    assert (
        lines[-1] == f"- … {12 - len(rows)} more not listed (the receipt lists at most 2048 bytes)"
    )
    for row in rows:
        assert row["excerpt"].endswith("…") and len(row["excerpt"]) == 81


# -- the one-value rule ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("newer", "older", "flag"),
    [
        ("the embedder listens on port 8081", "the embedder listens on port 8080", True),
        ("lease TTL is 45s", "lease TTL is 30s", True),
        ("J2 round-1 verdict: pass", "J1 round-1 verdict: pass", False),  # before the predicate
        ("the J2 round-1 verdict is pass", "the J1 round-1 verdict is pass", False),  # the issue's
        ("service J2 retries 3 times", "service J1 retries 3 times", False),  # before the verb
        ("the fourth decision is to use redis", "the third decision is to use redis", False),
        ("the worker retries 4 times", "the worker retries 3 times", True),
        ("set timeout=45", "set timeout=30", True),  # a value glued to its key
        ("timeout=45 for uploads", "timeout=30 for uploads", True),
        ("retries: 4", "retries: 3", True),
        ("tokens expire after ninety minutes", "tokens expire after sixty minutes", True),
        ("build 7 passed", "build 8 passed", False),  # no predicate word: the subject is 1 token
        ("port 8081 on host b", "port 8080 on host a", False),  # two values at once
        ("the embedder listens on port 8081 now", "the embedder listens on port 8080", False),
        ("same text", "same text", False),
        ("8081", "8080", False),
    ],
)
def test_one_value_changed(newer: str, older: str, flag: bool) -> None:
    assert one_value_changed(newer, older) is flag


# -- the stale report ---------------------------------------------------------------------


def test_against_reports_dependents_resting_on_the_contradicted_concept(
    pipeline: WritePipeline, clock: ManualClock
) -> None:
    ruling = one(pipeline, "GET /api/v1/memo (list all)", "entity", agent="a")
    clock.advance(5)
    dep = one(pipeline, "list-all returns every memo", depends_on=[short_id(ruling)], agent="b")
    clock.advance(500)  # the citation has aged in, but it is older than the contradiction
    view = derive(
        pipeline,
        c(
            "list-all removed in v0.22; the replacement pages at 10",
            "observation",
            against=[ruling],
        ),
        agent="c",
    )
    assert view.data["stale_report"] == {
        "total": 1,
        "rows": [{"node_id": dep, "snippet": "list-all returns every memo", "cited_id": ruling}],
    }
    lines = view.detail.split("\n")
    assert lines[0].endswith("; 1 contradiction(s) recorded")
    assert lines[1:] == [
        "1 dependent(s) now rest on a contradicted concept "
        "(direct depends_on citations; lambo_stale lists them):",
        f'- {short_id(dep)} "list-all returns every memo" cites {short_id(ruling)}',
    ]


def test_a_contradiction_outweighed_by_newer_evidence_reports_nothing_stale(
    pipeline: WritePipeline, clock: ManualClock
) -> None:
    ruling = one(pipeline, "the users table holds accounts", agent="a")
    clock.advance(5)
    one(pipeline, "login reads the users table", depends_on=[short_id(ruling)], agent="b")
    clock.advance(120)
    # Backdated before the citation: outweighed, so nothing rests on a contradicted concept.
    event = "2025-10-09T08:53:23Z"  # ManualClock's start + 3 s: after the ruling (+0 s),
    # before the citation (+6 s)
    view = derive(
        pipeline,
        c("accounts moved out of the users table", "observation", against=[ruling]),
        agent="c",
        event_time=event,
    )
    assert view.data["stale_report"] == {"total": 0, "rows": []}
    assert "\n" not in view.detail  # no line when nothing is stale


def test_a_fresh_citation_does_not_count_until_it_ages_in(
    pipeline: WritePipeline, clock: ManualClock
) -> None:
    ruling = one(pipeline, "the users table holds accounts", agent="a")
    clock.advance(30)
    contradict_first = derive(
        pipeline,
        c("accounts moved out of the users table", "observation", against=[ruling]),
        agent="c",
    )
    assert contradict_first.data["stale_report"] == {"total": 0, "rows": []}  # no dependents
    clock.advance(1)
    dep = one(pipeline, "login reads the users table", depends_on=[short_id(ruling)], agent="b")
    # Newer than the contradiction, but not yet 60 s old: the concept is still contradicted.
    p = pipeline.submit(
        "lambo_record_action",
        {"agent_id": "d", "action": "ran the nightly audit", "against": [short_id(ruling)]},
    )
    view = settled(pipeline, p, "d")
    assert [r["node_id"] for r in view.data["stale_report"]["rows"]] == [dep]
    clock.advance(61)
    p = pipeline.submit(
        "lambo_record_action",
        {"agent_id": "d", "action": "ran the weekly audit", "against": [short_id(ruling)]},
    )
    view = settled(pipeline, p, "d")
    # The newest contradiction (this action) is newer than the aged citation again.
    assert [r["node_id"] for r in view.data["stale_report"]["rows"]] == [dep]
    assert view.detail.split("\n")[1].startswith("1 dependent(s) now rest on")


def test_stale_report_rows_are_bounded_by_bytes(
    pipeline: WritePipeline, clock: ManualClock
) -> None:
    ruling = one(pipeline, "the users table holds accounts", "entity", agent="a")
    for i in range(30):
        one(
            pipeline,
            f"report {i:02d} reads the users table to count active accounts every hour",
            "observation",
            depends_on=[short_id(ruling)],
            agent="b",
        )
    clock.advance(5)
    view = derive(
        pipeline,
        c("accounts moved out of the users table", "observation", against=[ruling]),
        agent="c",
    )
    report = view.data["stale_report"]
    assert report["total"] == 30
    used = sum(len((r["node_id"] + r["cited_id"] + r["snippet"]).encode()) for r in report["rows"])
    assert used <= 2048 and len(report["rows"]) < 30
    assert view.detail.split("\n")[-1] == (
        f"- … {30 - len(report['rows'])} more; lambo_stale pages through them all"
    )
