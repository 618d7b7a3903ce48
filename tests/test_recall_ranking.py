"""Recall's ranking: the question decides, exact names win, standing breaks near-ties, and
a hit placed out of score order says why on its label (issue #15)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lambo_core.embed.onnx import OnnxEmbedder
from lambo_core.model import Status
from lambo_core.recall import Ranking, RecallResult, recall
from lambo_core.recall.fusion import (
    BASE_MAX,
    BASE_MIN,
    STANDING_SPAN,
    Candidate,
    Scorer,
    order_candidates,
    standing,
)
from lambo_core.recall.names import FOLDED_MATCH, NameMatcher, name_shares, question_names
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import SqliteStore
from lambo_core.writes import WritePipeline
from tests.test_recall import DEFAULTS, SPEC_RANKING, T0, Mem, assert_mcp_shape, minilm, nid

__all__ = ["minilm"]  # the module-scoped model fixture, shared with test_recall


def ask(session: Session, query: str, ranking: Ranking | None = None, **kw: Any) -> RecallResult:
    args = {"agent_id": "agent-a", "query": query, "traversal_depth": 0, **kw}
    result = recall(session, args, defaults=DEFAULTS, ranking=ranking)
    assert_mcp_shape(result)
    return result


def contents(result: RecallResult) -> list[str]:
    return [hit["content"] for hit in result.hits]


# =====================================================================================
# exact names in a question
# =====================================================================================


@pytest.mark.parametrize(
    ("question", "names"),
    [
        ("what is LAMBO-131 about?", ["LAMBO-131"]),
        ("anything on E4045?", ["E4045"]),
        ("why did we touch src/lease_7.rs", ["src/lease_7.rs"]),
        ("what changed in 3f9c2a1", ["3f9c2a1"]),
        ("v1.4.2 release notes", ["v1.4.2"]),
        ("who owns SessionIndex?", ["SessionIndex"]),
        ("what is leg_cache for", ["leg_cache"]),
        ("what does README.md say", ["README.md"]),
        ("is it safe to delete SG-Base-VPC", ["SG-Base-VPC"]),
        ('what did we say about "cold start"', ["cold start"]),
        ("what did we say about “cold  start”?", ["cold start"]),
        ("compare E4041 and E4045", ["E4041", "E4045"]),
        # not names: plain words, acronyms the keyword leg matches anyway, quantities
        ("what about the API?", []),
        ("meet at 3pm on the 2nd, 10k run", []),
        ("e.g. a follow-up", []),
        ("what port does the embedder use", []),
        ("", []),
    ],
)
def test_question_names(question: str, names: list[str]) -> None:
    assert question_names(question) == names


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        ("LAMBO-131", "LAMBO-131 tracks the flaky lease renewal", 1.0),
        ("LAMBO-131", "fixed in LAMBO-131.", 1.0),
        ("LAMBO-131", "see lambo-131 for the details", FOLDED_MATCH),
        ("LAMBO-131", "LAMBO-1310 is another ticket", 0.0),
        ("LAMBO-131", "XLAMBO-131 is not it", 0.0),
        ("LAMBO-131", "LAMBO-131-b is a sub-ticket", 0.0),
        ("E4045", "E4041 means the lease expired", 0.0),
        ("v1.4.2", "shipped in v1.4.2.1", 0.0),
        ("v1.4.2", "shipped in v1.4.2, then v1.4.3", 1.0),
        ("src/lease_7.rs", "src/lease_17.rs holds the timer", 0.0),
        ("src/lease_7.rs", "the timer lives in src/lease_7.rs", 1.0),
        ("cold start", "a cold  start takes 3 s", 1.0),
    ],
)
def test_a_name_is_matched_whole_and_exactly(name: str, text: str, match: float) -> None:
    assert NameMatcher([name]).matches(text) == [match]


def test_a_name_is_a_literal_pattern_with_nothing_to_backtrack_on() -> None:
    # a phrase's words are matched over whitespace collapsed beforehand, never with \s+
    matcher = NameMatcher(question_names('"cold start" and "a a a"'))
    assert matcher.matches("a   cold\n start, then a a a a") == [1.0, 1.0]
    for exact, folded in matcher._patterns:
        assert "+" not in exact.pattern and "*" not in exact.pattern
        assert not exact.flags & re.IGNORECASE and not folded.flags & re.IGNORECASE


def test_a_name_many_concepts_carry_counts_less_for_each() -> None:
    shares = name_shares({"a": [1.0, 0.0], "b": [1.0, 1.0], "c": [0.0, 0.0]})
    # name 0 is carried by two concepts (half each), name 1 by one; "c" carries none
    assert shares == {"a": pytest.approx(0.25), "b": pytest.approx(0.75)}
    assert name_shares({}) == {}


def tickets(mem: Mem) -> None:
    """LAMBO-131 among near-named tickets, the neighbours used heavily and load-bearing."""
    texts = {
        1: "LAMBO-111 tracks the lease renewal timer on linux",
        2: "LAMBO-123 tracks the lease renewal retries on linux",
        3: "LAMBO-311 tracks the lease renewal logging on linux",
        4: "LAMBO-131 tracks a flaky test on macOS",
    }
    for n, text in texts.items():
        status = Status.CANONICAL if n != 4 else Status.NONE
        mem.write([(nid(n), text, "logic")], status=status, at=T0 + n)
    for i in range(12):  # the neighbours are load-bearing: many dependents
        for n in (1, 2, 3):
            mem.write(
                [(nid(100 + 3 * i + n), f"job {i} {n} waits on the lease", "logic")],
                deps=[(nid(100 + 3 * i + n), nid(n))],
                at=T0 + 100 + i,
            )


@pytest.mark.parametrize(
    "question",
    [
        "what is LAMBO-131 about?",
        "anything on lambo-131",
        "LAMBO-131 lease renewal on linux",  # every other word fits the neighbours better
    ],
)
def test_an_exact_name_wins_over_popular_neighbours(question: str) -> None:
    mem = Mem()
    tickets(mem)
    session = mem.session()
    session.access_counts.restore({nid(1): 50, nid(2): 50, nid(3): 50})
    result = ask(session, question)
    assert contents(result)[0] == "LAMBO-131 tracks a flaky test on macOS"


# =====================================================================================
# standing breaks near-ties and never outranks a clearly better match
# =====================================================================================


def test_standing_is_bounded_by_its_span() -> None:
    assert standing(BASE_MIN, False) == 0.0
    assert standing(BASE_MAX, True) == pytest.approx(STANDING_SPAN)
    for base in (BASE_MIN - 1, BASE_MIN, 0.3, 0.9, BASE_MAX, BASE_MAX + 1):
        for canonical in (False, True):
            assert 0.0 <= standing(base, canonical) <= STANDING_SPAN
    assert standing(0.5, True) > standing(0.5, False)  # Canonical first among near-ties


def test_a_clearly_better_match_always_ranks_above_any_standing() -> None:
    session = popular_pillar().session()
    session.access_counts.restore({nid(1): 40})
    # the pillar: Canonical, ten dependents, used; the fresh concept: nothing of the kind
    for ranking, first in ((Ranking(), "fresh"), (SPEC_RANKING, "pillar")):
        scorer = Scorer(session, T0 + 3600, ranking)
        pillar = Candidate(nid(1), keyword=1.0, relevance=0.5)
        fresh = Candidate(nid(2), keyword=1.0, relevance=0.5 + STANDING_SPAN + 1e-6)
        assert scorer.score(pillar) and scorer.score(fresh)
        assert pillar.base > fresh.base + 0.5
        ordered = order_candidates([pillar, fresh], ranking)
        assert (ordered[0] is fresh) == (first == "fresh"), ranking


def test_canonical_status_outweighs_every_other_standing() -> None:
    assert standing(BASE_MIN, True) >= standing(BASE_MAX, False)


def popular_pillar() -> Mem:
    """A Canonical, heavily used pillar that shares one word with the question, and a fresh
    concept that is the question's answer."""
    mem = Mem()
    mem.write([(nid(1), "the deploy pipeline", "entity")], status=Status.CANONICAL)
    for i in range(10):
        mem.write(
            [(nid(10 + i), f"service {i} ships through it", "logic")],
            deps=[(nid(10 + i), nid(1))],
            at=T0 + i,
        )
    mem.write([(nid(2), "staging deploy freezes on friday afternoons", "logic")], at=T0 + 50)
    for i in range(3):  # push both out of the recent leg
        mem.write([(nid(30 + i), f"unrelated note {i}", "observation")], at=T0 + 60 + i)
    return mem


def test_standing_never_lifts_a_concept_over_a_clearly_better_match() -> None:
    session = popular_pillar().session()
    session.access_counts.restore({nid(1): 40})
    result = ask(session, "when does the staging deploy freeze on friday afternoons")
    assert contents(result)[:2] == [
        "staging deploy freezes on friday afternoons",
        "the deploy pipeline",
    ]
    assert result.hits[0]["score"] > result.hits[1]["score"]
    # the spec system's formula lets standing decide: the pillar first (Canonical first)
    spec = ask(session, "when does the staging deploy freeze on friday afternoons", SPEC_RANKING)
    assert contents(spec)[0] == "the deploy pipeline"
    assert "; canonical first)" in spec.context.split("\n")[0]


def test_canonical_first_among_equally_good_matches() -> None:
    mem = Mem()
    mem.write([(nid(1), "flush retries keep the lease", "logic")], at=T0)
    mem.write([(nid(2), "flush retries keep the lock", "logic")], status=Status.CANONICAL, at=T0)
    for i in range(3):
        mem.write([(nid(30 + i), f"unrelated note {i}", "observation")], at=T0 + 1 + i)
    result = ask(mem.session(), "flush retries")
    assert contents(result)[:2] == ["flush retries keep the lock", "flush retries keep the lease"]
    assert "; canonical first" not in result.context  # its score put it there


# =====================================================================================
# a readable order: every hit in score order, or its label says why not
# =====================================================================================


PLACEMENTS = (
    "; via graph)",
    "; kept past top_k)",
    "; canonical first)",
    "; recent, after the matches)",
)


def placed(label: str) -> bool:
    return label.endswith(PLACEMENTS)


def in_score_order_or_labelled(result: RecallResult) -> None:
    blocks = [b.split("\n")[0] for b in result.context.split("\n\n")]
    assert len(blocks) == len(result.hits)
    for i, hit in enumerate(result.hits[:-1]):
        if hit["score"] < result.hits[i + 1]["score"]:
            assert placed(blocks[i]) or placed(blocks[i + 1]), blocks[i : i + 2]


def test_expanded_hits_say_they_came_through_the_graph() -> None:
    mem = Mem()
    mem.write([(nid(1), "billing webhook signs payloads", "logic")])
    mem.write([(nid(2), "the retry queue is redis", "entity")], deps=[(nid(2), nid(1))])
    for i in range(3):
        mem.write([(nid(10 + i), f"unrelated {i}", "observation")], at=T0 + 10 + i)
    result = ask(mem.session(), "billing webhook", traversal_depth=1, top_k=10)
    blocks = result.context.split("\n\n")
    labels = {hit["content"]: line for hit, line in zip(result.hits, blocks, strict=True)}
    assert labels["the retry queue is redis"].endswith("; via graph)")
    assert ";" not in labels["billing webhook signs payloads"]
    in_score_order_or_labelled(result)


# =====================================================================================
# the same rules with the real vector leg
# =====================================================================================


@pytest.fixture
def identifiers(tmp_path: Path, minilm: OnnxEmbedder) -> Iterator[Session]:
    pipeline = WritePipeline(
        Session.open(SqliteStore(tmp_path / "ids.db"), "s", EmbedderPlan.ready(minilm))
    ).start()
    facts = [
        "E4041 means the lease expired before the flush",
        "E4045 means the lease was fenced by a newer hub",
        "E4044 means the lease file is unreadable",
        "LAMBO-111 tracks the slow cold start",
        "LAMBO-131 tracks the flaky takeover test",
        "LAMBO-311 tracks the slow flush on a full disk",
    ]
    for text in facts:
        ack = pipeline.submit(
            "lambo_derive",
            {"agent_id": "a", "concepts": [{"content": text, "concept_type": "logic"}]},
        )
        view = pipeline.session.receipts.wait(ack.structured["receipt"], "a", "s", 30_000)
        assert view.state.value == "applied", view.detail
    yield pipeline.session
    pipeline.close()


@pytest.mark.parametrize(
    ("question", "first"),
    [
        ("what is E4045 about?", "E4045 means the lease was fenced by a newer hub"),
        ("e4041?", "E4041 means the lease expired before the flush"),
        ("what is LAMBO-131 about", "LAMBO-131 tracks the flaky takeover test"),
        ("LAMBO-311 slow cold start", "LAMBO-311 tracks the slow flush on a full disk"),
    ],
)
def test_an_exact_name_wins_with_the_vector_leg(
    identifiers: Session, question: str, first: str
) -> None:
    result = ask(identifiers, question)
    assert contents(result)[0] == first
    in_score_order_or_labelled(result)
