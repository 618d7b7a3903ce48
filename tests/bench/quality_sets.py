"""The labelled sets of the recall quality bench, as writes and questions (issue #15).

Three sets, one shape (``LabelledSet``): what to write through lambo_derive, call by call,
and the questions with the items that answer them.

- **agent facts**: ``recall_quality_data.json``, 330 facts coding agents store, written
  three per call, and 177 questions.
- **conversations**: every ``conversations/part_*.json``, loaded into ONE session in file
  order, each dialogue turn written alone as an observation ``"<speaker>: <text>"`` dated
  by its session's date; questions of four kinds (single, multi_hop, temporal,
  paraphrase). ``check_conversations`` holds the rules a part must meet.
- **identifiers**: generated from a seed (``identifier_set.py``), with heavy use before
  the questions.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lambo_core.recall.legs import keyword_query
from tests.bench.identifier_set import CONCEPT_TYPES, generate

HERE = Path(__file__).resolve().parent
AGENT_FACTS = HERE / "recall_quality_data.json"
CONVERSATIONS = HERE / "conversations"
AGENT_FACTS_PER_CALL = 3
KINDS = ("single", "multi_hop", "temporal", "paraphrase")
# What the issue asks of the conversation set as a whole.
MIN_TURNS = 2000
MIN_SESSIONS = 20
MIN_QUESTIONS = 300
MIN_PER_KIND = 60
MAX_TURN_WORDS = 60


@dataclass(frozen=True)
class Item:
    """One concept to write: the set's own id for it, its text and type."""

    id: str
    text: str
    concept_type: str


@dataclass(frozen=True)
class Write:
    """One lambo_derive call."""

    items: tuple[Item, ...]
    event_time: str | None = None  # RFC3339, the historical about-time


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    evidence: tuple[str, ...]  # item ids; a question is answered when they are recalled
    kind: str = ""  # the set's own kind of question, for the breakdown by kind


@dataclass
class LabelledSet:
    name: str
    about: str
    writes: list[Write]
    questions: list[Question]
    # ordinary recalls made before the questions, whose access counts are kept
    heavy_use: list[str] = field(default_factory=list)

    def items(self) -> Iterable[Item]:
        for write in self.writes:
            yield from write.items


# -- agent facts -------------------------------------------------------------------------


def agent_facts(path: Path = AGENT_FACTS) -> LabelledSet:
    data = json.loads(path.read_text(encoding="utf-8"))
    facts = [Item(f["id"], f["text"], f["type"]) for f in data["facts"]]
    writes = [
        Write(tuple(facts[i : i + AGENT_FACTS_PER_CALL]))
        for i in range(0, len(facts), AGENT_FACTS_PER_CALL)
    ]
    questions = [Question(q["id"], q["question"], tuple(q["relevant"])) for q in data["questions"]]
    about = f"{len(facts)} agent facts, {AGENT_FACTS_PER_CALL} per derive"
    return LabelledSet("agent facts", about, writes, questions)


# -- conversations -----------------------------------------------------------------------


def conversation_parts(directory: Path = CONVERSATIONS) -> list[Path]:
    return sorted(directory.glob("part_*.json"))


def turn_text(speaker: str, text: str) -> str:
    """A turn as it is stored: alone, with its speaker."""
    return f"{speaker}: {text}"


def conversations(directory: Path = CONVERSATIONS) -> LabelledSet:
    """Every part in ``directory``, in file order, as one set; refuses a part that breaks
    ``check_conversations``'s rules (a broken label would score as a miss)."""
    paths = conversation_parts(directory)
    if not paths:
        raise FileNotFoundError(f"no conversations/part_*.json in {directory}")
    parts = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    report = check_conversations(parts, [p.name for p in paths])
    if report.problems:
        raise ValueError("the conversation parts break the set's rules:\n" + report.text())
    writes, questions = [], []
    for part in parts:
        for session in part["sessions"]:
            event_time = f"{session['date']}T12:00:00Z"
            for turn in session["turns"]:
                text = turn_text(turn["speaker"], turn["text"])
                writes.append(Write((Item(turn["id"], text, "observation"),), event_time))
        questions += [
            Question(q["id"], q["question"], tuple(q["evidence"]), q["kind"])
            for q in part["questions"]
        ]
    about = (
        f"{len(paths)} part(s): {report.sessions} dated sessions, {report.turns} turns "
        "each derived alone"
    )
    return LabelledSet("conversations", about, writes, questions)


@dataclass
class ConversationReport:
    """What ``check_conversations`` counted and found wrong."""

    sessions: int = 0
    turns: int = 0
    questions: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    problems: list[str] = field(default_factory=list)

    def size_problems(self) -> list[str]:
        """Where the parts together fall short of the size the issue asks for."""
        short = []
        if self.turns < MIN_TURNS:
            short.append(f"{self.turns} turns (at least {MIN_TURNS})")
        if self.sessions < MIN_SESSIONS:
            short.append(f"{self.sessions} sessions (at least {MIN_SESSIONS})")
        if sum(self.questions.values()) < MIN_QUESTIONS:
            short.append(f"{sum(self.questions.values())} questions (at least {MIN_QUESTIONS})")
        for kind, n in self.questions.items():
            if n < MIN_PER_KIND:
                short.append(f"{n} {kind} questions (at least {MIN_PER_KIND})")
        return short

    def text(self) -> str:
        counts = f"{self.sessions} sessions, {self.turns} turns, questions {self.questions}"
        return "\n".join([counts, *(f"PROBLEM {p}" for p in self.problems)])


def content_words(text: str) -> set[str]:
    """The words the keyword leg searches for: lowercased tokens minus function words."""
    return set(keyword_query(text).split())


def check_conversations(
    parts: Sequence[dict[str, Any]], names: Sequence[str] | None = None
) -> ConversationReport:
    """The rules of the conversation set (those of the writers' checker): ids unique,
    speakers declared, turns of 1 to 60 words, sessions dated and in date order, every
    evidence a turn of this part or an earlier one, multi_hop with exactly 2 evidence turns
    and the others with 1 or 2, an answer, and no paraphrase sharing a content word with
    its evidence as stored."""
    report = ConversationReport()
    turns: dict[str, str] = {}  # turn id -> stored text
    question_ids: set[str] = set()
    for n, part in enumerate(parts):
        name = names[n] if names is not None else f"part {n + 1}"
        missing = [k for k in ("about", "speakers", "sessions", "questions") if k not in part]
        if missing:
            report.problems.append(f"{name}: missing {', '.join(missing)}")
            continue
        _check_sessions(name, part, turns, report)
        for question in part["questions"]:
            _check_question(question, turns, question_ids, report)
    return report


def _check_sessions(
    name: str, part: dict[str, Any], turns: dict[str, str], report: ConversationReport
) -> None:
    dates = []
    for session in part["sessions"]:
        report.sessions += 1
        try:
            dates.append(datetime.date.fromisoformat(session["date"]))
        except (KeyError, TypeError, ValueError):
            report.problems.append(f"{name}: session {session.get('id')} has no ISO date")
        for turn in session["turns"]:
            report.turns += 1
            tid = turn["id"]
            if tid in turns:
                report.problems.append(f"duplicate turn id {tid}")
            if turn["speaker"] not in part["speakers"]:
                report.problems.append(f"{tid}: speaker {turn['speaker']!r} not in speakers")
            words = len(turn["text"].split())
            if not 1 <= words <= MAX_TURN_WORDS:
                report.problems.append(f"{tid}: {words} words (1..{MAX_TURN_WORDS})")
            turns[tid] = turn_text(turn["speaker"], turn["text"])
    if dates != sorted(dates):
        report.problems.append(f"{name}: sessions not in date order")


def _check_question(
    question: dict[str, Any],
    turns: dict[str, str],
    seen: set[str],
    report: ConversationReport,
) -> None:
    qid, kind, evidence = question["id"], question["kind"], question["evidence"]
    if qid in seen:
        report.problems.append(f"duplicate question id {qid}")
    seen.add(qid)
    if kind not in KINDS:
        report.problems.append(f"{qid}: kind {kind!r}")
        return
    report.questions[kind] += 1
    report.problems += [
        f"{qid}: evidence {e} is not a turn of this part or an earlier one"
        for e in evidence
        if e not in turns
    ]
    if kind == "multi_hop" and len(evidence) != 2:
        report.problems.append(f"{qid}: multi_hop needs exactly 2 evidence turns")
    if kind != "multi_hop" and not 1 <= len(evidence) <= 2:
        report.problems.append(f"{qid}: {kind} needs 1 (at most 2) evidence turns")
    if not question.get("answer"):
        report.problems.append(f"{qid}: no answer")
    if kind == "paraphrase":
        asked = content_words(question["question"])
        for e in evidence:
            shared = asked & content_words(turns.get(e, ""))
            if shared:
                report.problems.append(f"{qid}: paraphrase shares {sorted(shared)} with {e}")


# -- identifiers -------------------------------------------------------------------------


def identifiers(seed: int | None = None) -> LabelledSet:
    generated = generate() if seed is None else generate(seed)
    writes = [Write((Item(f.id, f.text, CONCEPT_TYPES[f.kind]),)) for f in generated.facts]
    questions = [
        Question(q.id, q.question, (q.fact_id,), _kind_of(generated, q.fact_id))
        for q in generated.questions
    ]
    about = (
        f"{len(generated.facts)} facts with one identifier each, derived alone; "
        f"{len(generated.heavy_use)} topic recalls of heavy use before the questions"
    )
    return LabelledSet("identifiers", about, writes, questions, list(generated.heavy_use))


def _kind_of(generated: Any, fact_id: str) -> str:
    return next(str(f.kind) for f in generated.facts if f.id == fact_id)
