"""The recall quality bench's labelled sets meet their rules (issue #15); no model needed.

The conversation parts (when they are in tests/bench/conversations) are of the size the
issue asks for and pass the writers' checker; the checker itself is tested on a small
sample written here, broken one rule at a time. The identifier set is deterministic, 300
facts each carrying exactly one identifier (found here by patterns of our own, not the
generator's), all unique, in families of near neighbours, each question naming its fact's.
"""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.bench import quality_metrics as qm
from tests.bench import quality_sets
from tests.bench.identifier_set import HEAVY_USE_RECALLS, generate
from tests.bench.quality_sets import check_conversations, conversation_parts

# -- conversations -------------------------------------------------------------------------

PARTS = conversation_parts()


@pytest.mark.skipif(not PARTS, reason="no conversation parts in tests/bench/conversations yet")
def test_the_conversation_parts_are_large_enough_and_pass_the_checker() -> None:
    parts = [json.loads(p.read_text(encoding="utf-8")) for p in PARTS]
    report = check_conversations(parts, [p.name for p in PARTS])
    assert report.problems == []
    assert report.size_problems() == []
    labelled = quality_sets.conversations()
    assert len(labelled.writes) == report.turns >= quality_sets.MIN_TURNS
    assert len(labelled.questions) >= quality_sets.MIN_QUESTIONS


def _sample() -> dict[str, Any]:
    return {
        "about": "a sample",
        "speakers": ["Maya", "Tom"],
        "sessions": [
            {
                "id": "Z01",
                "date": "2026-02-03",
                "turns": [
                    {"id": "Z01-001", "speaker": "Maya", "text": "Jess lent me her tent."},
                    {"id": "Z01-002", "speaker": "Tom", "text": "ha, fair enough"},
                ],
            },
            {
                "id": "Z02",
                "date": "2026-03-01",
                "turns": [
                    {"id": "Z02-001", "speaker": "Tom", "text": "Jess lives in Leeds now."},
                    {"id": "Z02-002", "speaker": "Maya", "text": "I adopted a dog named Biscuit."},
                ],
            },
        ],
        "questions": [
            {
                "id": "Z-q1",
                "kind": "single",
                "question": "Who lent Maya a tent?",
                "evidence": ["Z01-001"],
                "answer": "Jess",
            },
            {
                "id": "Z-q2",
                "kind": "multi_hop",
                "question": "Where does the friend who lent Maya the tent live?",
                "evidence": ["Z01-001", "Z02-001"],
                "answer": "Leeds",
            },
            {
                "id": "Z-q3",
                "kind": "temporal",
                "question": "When did Tom say Jess lives in Leeds?",
                "evidence": ["Z02-001"],
                "answer": "2026-03-01",
            },
            {
                "id": "Z-q4",
                "kind": "paraphrase",
                "question": "What is the animal companion she took in called?",
                "evidence": ["Z02-002"],
                "answer": "Biscuit",
            },
        ],
    }


def test_a_well_formed_sample_passes_and_is_counted() -> None:
    report = check_conversations([_sample()])
    assert report.problems == []
    assert (report.sessions, report.turns) == (2, 4)
    assert report.questions == {"single": 1, "multi_hop": 1, "temporal": 1, "paraphrase": 1}
    short = report.size_problems()
    assert "4 turns (at least 2000)" in short
    assert "1 paraphrase questions (at least 60)" in short


def _turn(part: dict[str, Any], n: int) -> dict[str, Any]:
    turn: dict[str, Any] = part["sessions"][0]["turns"][n]
    return turn


def _question(part: dict[str, Any], n: int) -> dict[str, Any]:
    question: dict[str, Any] = part["questions"][n]
    return question


Change = Callable[[dict[str, Any]], object]
# a way to break the sample -> (how, what the checker must say)
BREAKS: dict[str, tuple[Change, str]] = {
    "duplicate turn id": (
        lambda p: _turn(p, 1).update(id="Z01-001"),
        "duplicate turn id Z01-001",
    ),
    "undeclared speaker": (
        lambda p: _turn(p, 1).update(speaker="Priya"),
        "Z01-002: speaker 'Priya' not in speakers",
    ),
    "long turn": (lambda p: _turn(p, 1).update(text="word " * 61), "Z01-002: 61 words"),
    "empty turn": (lambda p: _turn(p, 1).update(text="   "), "Z01-002: 0 words"),
    "dates out of order": (
        lambda p: p["sessions"][0].update(date="2026-04-01"),
        "sessions not in date order",
    ),
    "no date": (lambda p: p["sessions"][0].update(date="soon"), "session Z01 has no ISO date"),
    "missing evidence": (
        lambda p: _question(p, 0).update(evidence=["Z09-001"]),
        "Z-q1: evidence Z09-001 is not a turn",
    ),
    "multi_hop with one turn": (
        lambda p: _question(p, 1).update(evidence=["Z01-001"]),
        "Z-q2: multi_hop needs exactly 2",
    ),
    "single with three turns": (
        lambda p: _question(p, 0).update(evidence=["Z01-001", "Z01-002", "Z02-001"]),
        "Z-q1: single needs 1 (at most 2)",
    ),
    "no answer": (lambda p: _question(p, 2).update(answer=""), "Z-q3: no answer"),
    "unknown kind": (lambda p: _question(p, 2).update(kind="opinion"), "Z-q3: kind 'opinion'"),
    "duplicate question id": (
        lambda p: _question(p, 3).update(id="Z-q1"),
        "duplicate question id Z-q1",
    ),
    "paraphrase sharing a word": (
        lambda p: _question(p, 3).update(question="What is the dog she took in called?"),
        "Z-q4: paraphrase shares ['dog'] with Z02-002",
    ),
    "paraphrase naming the speaker": (
        lambda p: _question(p, 3).update(question="What did Maya call her animal companion?"),
        "Z-q4: paraphrase shares ['maya'] with Z02-002",
    ),
    "missing key": (lambda p: p.pop("speakers"), "missing speakers"),
}


def _broken(change: str) -> dict[str, Any]:
    part = copy.deepcopy(_sample())
    BREAKS[change][0](part)
    return part


@pytest.mark.parametrize("change", sorted(BREAKS))
def test_the_checker_names_each_broken_rule(change: str) -> None:
    problems = check_conversations([_broken(change)], ["part_z.json"]).problems
    assert any(BREAKS[change][1] in p for p in problems), problems


def test_evidence_may_name_an_earlier_part_but_not_a_later_one() -> None:
    first, second = _sample(), _sample()
    for session in second["sessions"]:
        session["id"] = session["id"].replace("Z", "Y")
        for turn in session["turns"]:
            turn["id"] = turn["id"].replace("Z", "Y")
    for q in second["questions"]:
        q["id"] = q["id"].replace("Z", "Y")
    second["questions"][0]["evidence"] = ["Z01-001"]  # a turn of the first part: fine
    assert check_conversations([first, second]).problems == []
    first["questions"][0]["evidence"] = ["Y01-001"]  # a turn of a later part: refused
    problems = check_conversations([first, second]).problems
    assert any("Z-q1: evidence Y01-001" in p for p in problems), problems


def test_the_loader_writes_each_turn_alone_dated_by_its_session(tmp_path: Path) -> None:
    (tmp_path / "part_z.json").write_text(json.dumps(_sample()), encoding="utf-8")
    labelled = quality_sets.conversations(tmp_path)
    assert [len(w.items) for w in labelled.writes] == [1, 1, 1, 1]
    first = labelled.writes[0]
    assert first.items[0].text == "Maya: Jess lent me her tent."
    assert first.items[0].concept_type == "observation"
    assert first.event_time == "2026-02-03T12:00:00Z"
    assert labelled.writes[2].event_time == "2026-03-01T12:00:00Z"
    assert [q.kind for q in labelled.questions] == [
        "single",
        "multi_hop",
        "temporal",
        "paraphrase",
    ]
    assert labelled.questions[1].evidence == ("Z01-001", "Z02-001")


def test_the_loader_refuses_broken_parts_and_an_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        quality_sets.conversations(tmp_path)
    (tmp_path / "part_z.json").write_text(json.dumps(_broken("missing evidence")), "utf-8")
    with pytest.raises(ValueError, match="Z-q1: evidence Z09-001"):
        quality_sets.conversations(tmp_path)


def test_the_agent_facts_set_is_written_three_per_call_and_labelled() -> None:
    labelled = quality_sets.agent_facts()
    items = {i.id for i in labelled.items()}
    assert len(items) == 330
    assert all(1 <= len(w.items) <= 3 for w in labelled.writes)
    assert len(labelled.questions) == 177
    assert all(set(q.evidence) <= items for q in labelled.questions)


# -- identifiers -------------------------------------------------------------------------

# Our own patterns of an identifier, in the order they are looked for (a path first: it
# holds a snake_case stem).
IDENTIFIER_PATTERNS = {
    "path": re.compile(r"\b[\w.-]+(?:/[\w.-]+)+\.[a-z]+\b"),
    "ticket": re.compile(r"\b[A-Z][A-Z0-9]+-\d+\b"),
    "error": re.compile(r"\bE\d{4}\b"),
    "version": re.compile(r"\bv\d+(?:\.\d+)+\b"),
    "commit": re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,12}\b"),
    "camel": re.compile(r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b"),
    "snake": re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b"),
}


def identifiers_in(text: str) -> list[tuple[str, str]]:
    """(kind, identifier) for every identifier in ``text``, each span counted once."""
    found = []
    for kind, pattern in IDENTIFIER_PATTERNS.items():
        for match in pattern.finditer(text):
            found.append((kind, match.group()))
        text = pattern.sub(lambda m: " " * len(m.group()), text)
    assert not re.search(r"\d", text), f"a number outside any identifier: {text!r}"
    return found


def test_identifiers_in_finds_each_kind_once() -> None:
    text = "LAMBO-131 broke src/lease_7.rs in v1.4.12 (E4045, 3f9c2a1, LeaseRenewer, renew_now)"
    assert sorted(identifiers_in(text)) == [
        ("camel", "LeaseRenewer"),
        ("commit", "3f9c2a1"),
        ("error", "E4045"),
        ("path", "src/lease_7.rs"),
        ("snake", "renew_now"),
        ("ticket", "LAMBO-131"),
        ("version", "v1.4.12"),
    ]
    assert identifiers_in("the flaky lease renewal on mac laptops") == []


def test_the_identifier_set_is_deterministic() -> None:
    assert generate() == generate()
    assert generate(seed=1) == generate(seed=1)
    assert generate(seed=1).facts != generate().facts


@pytest.mark.parametrize("seed", [15, 1, 2])
def test_each_fact_carries_exactly_one_unique_identifier(seed: int) -> None:
    facts = generate(seed).facts
    assert len(facts) == 300
    for fact in facts:
        assert identifiers_in(fact.text) == [(fact.kind, fact.identifier)], fact.text
    assert len({f.identifier for f in facts}) == 300
    assert len({f.id for f in facts}) == 300
    kinds = Counter(f.kind for f in facts)
    assert set(kinds) == set(IDENTIFIER_PATTERNS)
    assert min(kinds.values()) >= 30


def _digits(identifier: str) -> str:
    return "".join(c for c in identifier if c.isdigit())


def _one_step(a: str, b: str) -> bool:
    """Same length, and one digit changed or two swapped (113 / 131, 4041 / 4045)."""
    if len(a) != len(b) or a == b:
        return False
    diff = [i for i in range(len(a)) if a[i] != b[i]]
    return len(diff) == 1 or (len(diff) == 2 and sorted(a) == sorted(b))


def _words(name: str) -> set[str]:
    """The words of a CamelCase or snake_case name, lowercased."""
    return {w.lower() for w in re.findall(r"[A-Z][a-z]+|[a-z]+", name)}


def test_identifiers_come_in_families_of_near_neighbours() -> None:
    facts = generate().facts
    families: dict[str, list[str]] = {}
    for fact in facts:
        families.setdefault(fact.family, []).append(fact.identifier)
    assert all(len(members) >= 4 for members in families.values())
    for name, members in families.items():
        kind = name.split("-")[0]
        for identifier in members:
            others = [m for m in members if m != identifier]
            if kind in ("ticket", "error"):  # each a digit or a swap away from another
                assert any(_one_step(_digits(identifier), _digits(o)) for o in others), name
            elif kind == "commit":  # a shared prefix of at least four hex digits
                assert all(o[:4] == identifier[:4] for o in others), name
            elif kind in ("path", "version"):  # the same shape, other numbers
                shape = re.sub(r"\d+", "#", identifier.split("/")[-1])
                assert any(re.sub(r"\d+", "#", o.split("/")[-1]) == shape for o in others)
            else:  # names sharing their words
                assert all(_words(identifier) & _words(o) for o in others), name
    tickets = {f.identifier for f in facts if f.kind == "ticket"}
    assert any(
        _digits(a) != _digits(b) and sorted(_digits(a)) == sorted(_digits(b))
        for a in tickets
        for b in tickets
    )  # anagram neighbours such as LAMBO-131 and LAMBO-311


def test_every_question_names_its_own_facts_identifier_and_no_other() -> None:
    generated = generate()
    by_id = {f.id: f for f in generated.facts}
    questions = generated.questions
    assert len(questions) == 300
    assert {q.fact_id for q in questions} == set(by_id)
    for q in questions:
        assert q.identifier == by_id[q.fact_id].identifier
        assert [i for _, i in identifiers_in(q.question)] == [q.identifier], q.question
    assert len({q.question.replace(q.identifier, "X") for q in questions}) >= 15  # phrasings


def test_one_question_in_three_names_a_near_neighbours_topic() -> None:
    generated = generate()
    by_id = {f.id: f for f in generated.facts}
    misremembered = [
        q
        for q in generated.questions
        if q.question.endswith("?") and " the one about " in q.question
    ]
    assert len(misremembered) == len(generated.questions) // 3
    for q in misremembered:
        fact = by_id[q.fact_id]
        topic = q.question.split(" the one about ", 1)[1].removesuffix("?")
        assert topic != fact.topic
        assert any(
            o.topic == topic for o in generated.facts if o.family == fact.family and o is not fact
        )


def test_heavy_use_asks_about_topics_without_identifiers() -> None:
    generated = generate()
    assert len(generated.heavy_use) == HEAVY_USE_RECALLS
    topics = {f.topic for f in generated.facts}
    for query in generated.heavy_use:
        assert identifiers_in(query) == []
        assert any(t in query for t in topics), query
    asked = Counter(t for q in generated.heavy_use for t in topics if t in q)
    most, least = asked.most_common()[0][1], asked.most_common()[-1][1]
    assert most >= 5 * least  # a few topics are popular: use piles up on their concepts


def test_the_identifier_set_as_writes_and_questions() -> None:
    labelled = quality_sets.identifiers()
    assert len(labelled.writes) == 300
    assert all(len(w.items) == 1 and w.event_time is None for w in labelled.writes)
    assert {i.concept_type for i in labelled.items()} <= {"observation", "resource", "entity"}
    items = {i.id for i in labelled.items()}
    assert all(len(q.evidence) == 1 and q.evidence[0] in items for q in labelled.questions)
    assert len(labelled.heavy_use) == HEAVY_USE_RECALLS


# -- the metrics ---------------------------------------------------------------------------


def test_recall_at_k_and_reciprocal_rank() -> None:
    ranked = ["a", "b", "c", "d", "e", "f"]
    assert qm.recall_at(ranked, {"a"}, 1) == 1.0
    assert qm.recall_at(ranked, {"b", "f"}, 5) == 0.5  # both needed: one of two found
    assert qm.recall_at(ranked, {"z"}, 5) == 0.0
    assert qm.reciprocal_rank(ranked, {"c", "e"}) == pytest.approx(1 / 3)
    assert qm.reciprocal_rank([*"abcdefghij", "k"], {"k"}) == 0.0  # past 10


def test_rrf_adds_one_over_k_plus_rank_per_list() -> None:
    # b: 1/62 + 1/61 beats a: 1/61 alone and c: 1/62 alone
    assert qm.rrf([["a", "b"], ["b", "c"]], k=60) == ["b", "a", "c"]
    assert qm.rrf([["x"], []]) == ["x"]


def _rows(default: tuple[float, float], best: tuple[float, float]) -> dict[str, qm.Row]:
    """Rows of one question each with the given (R@5, MRR@10)."""
    rows = {}
    for name in (*qm.BASELINES, qm.DEFAULT):
        r5, mrr = default if name == qm.DEFAULT else best
        row = qm.Row()
        row.r5, row.mrr, row.r1 = [r5], [mrr], [0.0]
        rows[name] = row
    return rows


def test_the_verdict_needs_a_margin_on_both_metrics() -> None:
    assert qm.verdict(_rows((0.8, 0.7), (0.7, 0.6))).beats
    assert not qm.verdict(_rows((0.8, 0.6), (0.7, 0.6))).beats  # a tie is not a win
    assert not qm.verdict(_rows((0.8, 0.5), (0.7, 0.6))).beats
    lost = qm.verdict(_rows((0.6, 0.7), (0.7, 0.6)))
    assert not lost.beats and lost.r5_margin == pytest.approx(-0.1)


def test_a_perfect_baseline_is_matched_not_beaten() -> None:
    tied = qm.verdict(_rows((1.0, 0.9), (1.0, 0.8)))
    assert tied.beats and tied.at_ceiling == ("R@5",)
    assert "a baseline is perfect on R@5, where matching it is enough" in tied.text()
    assert not qm.verdict(_rows((0.99, 0.9), (1.0, 0.8))).beats
