"""Dependency questions read the right way round (#15): which phrasings traverse, and to whom.

Each row is a question and either the concept whose dependents it asks for, or None: the
question is not about anyone's dependents (or names no concept with some) and goes to ordinary
recall. Every concept below has dependents except "user db schema", so a wrongly read question
finds something to answer with.
"""

from __future__ import annotations

import pytest

from lambo_core.recall.dependency import DEPENDENCY_MARKERS
from lambo_core.session import Session
from tests.test_recall import Mem, anchor, ask, nid

CONCEPTS = [
    (1, "user schema", "entity"),
    (2, "auth middleware", "logic"),
    (3, "redis", "resource"),
    (4, "API", "entity"),
    (5, "SG-Base-VPC", "resource"),
    (6, "VPC-Enterprise-Prod", "resource"),
    (7, "SG-Base", "resource"),
    (8, "db", "entity"),
    (9, "user db schema", "entity"),
    (10, ".env", "resource"),
    (11, "src/main.rs", "resource"),
    (12, "blast radius calculator", "logic"),  # names with a marker phrase inside
    (13, "safe to delete list", "resource"),
    (14, "user-uses table", "entity"),
    (15, "what-if planner", "logic"),
    (16, "handlers", "logic"),
]
# (dependent, dependency): the auth middleware depends on the user schema, the API on redis...
DEPENDENCIES = [(2, 1), (4, 3), (12, 3), (13, 3), (15, 3), (16, 3), (6, 5)]
NO_DEPENDENTS = {9}


@pytest.fixture(scope="module")
def graph_session() -> Session:
    mem = Mem()
    mem.write([(nid(n), text, kind) for n, text, kind in CONCEPTS])
    for dependent, dependency in DEPENDENCIES:
        mem.write([], deps=[(nid(dependent), nid(dependency))])
    serial = 100
    for n, _text, _kind in CONCEPTS:
        if n in NO_DEPENDENTS:
            continue
        serial += 1  # one more dependent of its own each, so every name can anchor
        mem.write([(nid(serial), f"dependent {serial}", "logic")], deps=[(nid(serial), nid(n))])
    return mem.session()


# question -> the concept whose dependents it asks for (None: ordinary recall).
# "changed" marks the rows the reading before #15 got wrong (what it answered instead);
# "restored" the rows it got right and #15's first rewrite (f306743) got wrong.
PHRASINGS: list[tuple[str, str | None]] = [
    # the spec's five markers
    ("what depends on user schema", "user schema"),
    ("dependents of user schema", "user schema"),
    ("blast radius of user schema", "user schema"),
    ("is it safe to delete user schema", "user schema"),
    ("what uses redis", "redis"),
    # the spec's examples in its paragraph
    ("is it safe to delete SG-Base-VPC in VPC-Enterprise-Prod", "SG-Base-VPC"),
    ("blast radius of SG-Base", "SG-Base"),
    ("what depends on the user db schema", None),  # db inside a longer name, itself no dependents
    ("what uses config/.env", ".env"),
    ("what depends on src/main.rs", "src/main.rs"),
    ("what depends on mysrc/main.rs", None),
    # the case seen in #15 (changed: answered "user schema")
    ("is the auth middleware dependent on user schema", None),
    # reversed questions: about the first concept's own dependencies
    ("does the auth middleware depend on user schema", None),
    ("does the API depend on redis?", None),
    ("is the API dependent on redis?", None),  # changed: answered "redis"
    ("API dependent on redis?", None),  # changed: answered "redis"
    ("auth middleware relies on user schema?", None),
    ("the API uses redis", None),
    ("what is the API dependent on", None),  # changed: answered "API" (a name before the marker)
    ("what does the API depend on?", None),
    ("which services does redis depend on", None),
    ("does the API break if redis goes down", None),
    ("the API depends on redis; what depends on the API?", "API"),
    ("what if the API depends on redis", None),
    ("who said the API depends on redis", None),
    ("is the API which depends on redis slow?", None),  # changed: answered "redis"
    ("the handlers who use redis", None),
    # a question word (or anything/everything) is the subject: dependents of what follows
    ("what is dependent on user schema", "user schema"),
    ("does anything depend on redis?", "redis"),
    ("everything that depends on user schema", "user schema"),
    ("who uses redis", "redis"),
    ("what relies on the API", "API"),
    ("what would break if redis went down", "redis"),
    ("what else still depends on db?", "db"),  # changed: was ordinary recall
    ("which services depend on redis", "redis"),  # changed: was ordinary recall
    ("which services rely on redis", "redis"),  # changed: was ordinary recall
    ("what breaks if SG-Base changes", "SG-Base"),
    ("is it still safe to drop db", "db"),
    ("which handlers still use redis", "redis"),  # changed: was ordinary recall
    ("which version of the API depends on redis", "redis"),  # changed: was ordinary recall
    ("is there anything that relies on redis", "redis"),  # changed: was ordinary recall
    ("do any services depend on redis", "redis"),  # changed: was ordinary recall
    ("list which services use redis", "redis"),  # changed: was ordinary recall
    ("show me which handlers rely on redis", "redis"),  # changed: was ordinary recall
    ("what depends on user schema or the auth middleware", "user schema"),  # nearest after
    # the concept framed by "is X safe to delete" and "X's blast radius"
    ("is the user schema safe to delete?", "user schema"),
    # changed: answered "user schema" (the name after the marker, not the one it frames)
    ("is the auth middleware safe to delete now that user schema is gone", "auth middleware"),
    ("safe to delete redis?", "redis"),
    ("would it be safe to remove the API", "API"),
    ("user schema blast radius?", "user schema"),
    ("what is the auth middleware's blast radius", "auth middleware"),
    ("what's the blast radius if the API changes", "API"),
    # "blast radius for / on / in / :" puts X after; a plain word after it, no possessor
    ("what is the blast radius for user schema", "user schema"),  # restored: was ordinary recall
    ("blast radius for user schema?", "user schema"),  # restored: was ordinary recall
    ("blast radius: user schema", "user schema"),  # restored: was ordinary recall
    ("what's the blast radius on redis", "redis"),  # restored: was ordinary recall
    ("blast radius in user schema", "user schema"),  # restored: was ordinary recall
    ("what's the blast radius: redis", "redis"),  # restored: was ordinary recall
    ("user schema blast radius: how big?", "user schema"),  # a colon after a name is a label
    ("user schema's blast radius: how big?", "user schema"),
    ("the API blast radius is large", "API"),
    ("blast radius for the user db schema", None),
    ("the blast radius for", None),
    ("blast radius with redis", None),  # changed: answered "redis"
    ("user schema: blast radius?", None),  # changed: answered "user schema"
    ("is the redis blast radius calculator slow", None),  # changed: answered "redis"
    ("blast radius calculator uses redis", None),  # changed: answered "redis"
    ("is this safe to delete", None),
    # a marker phrase inside a name
    ("what depends on the blast radius calculator", "blast radius calculator"),
    ("is the blast radius calculator dependent on redis", None),  # changed: answered "redis"
    ("what uses the safe to delete list", "safe to delete list"),
    ("does the safe to delete list use redis", None),  # changed: answered "redis"
    ("is the user-uses table safe to delete", "user-uses table"),
    ("does the what-if planner depend on redis", None),
    ("what uses blast radius", None),  # a marker phrase does not anchor
    # spacing and invisible characters the tokenizer ignores
    ("is it safe  to delete user schema", "user schema"),  # changed: was ordinary recall
    ("what us\u200des redis", "redis"),  # changed: was ordinary recall
    # no question about dependents, or nothing named
    ("how is the user schema used by the API", None),
    ("user schema: what depends on it?", None),  # changed: answered "user schema"
    ("what depends on it", None),
    ("tell me about redis", None),
    ("redis", None),
]


@pytest.mark.parametrize(("query", "expected"), PHRASINGS)
def test_a_dependency_question_names_the_concept_it_asks_about(
    graph_session: Session, query: str, expected: str | None
) -> None:
    assert anchor(graph_session, query) == expected


def test_the_table_covers_every_kind_of_marker() -> None:
    assert len(PHRASINGS) >= 30
    questions = " ".join(q for q, _ in PHRASINGS).casefold()
    for phrase in DEPENDENCY_MARKERS:
        assert " ".join(phrase) in questions, phrase


def test_a_reversed_question_gets_an_ordinary_answer(graph_session: Session) -> None:
    seen = ask(graph_session, "is the auth middleware dependent on user schema", top_k=3)
    assert not seen.context.startswith("Answered by graph traversal")
    asked = ask(graph_session, "what depends on user schema", top_k=3)
    assert asked.context.startswith(
        'Answered by graph traversal: 2 concepts depend on "user schema" (id 00000001).\n\n'
    )
    assert {h["content"] for h in asked.hits} == {"auth middleware", "dependent 101"}


def test_the_header_names_the_framed_concept(graph_session: Session) -> None:
    result = ask(
        graph_session, "is the auth middleware safe to delete now that user schema is gone"
    )
    assert result.context.startswith(
        'Answered by graph traversal: 1 concept depends on "auth middleware" (id 00000002).\n\n'
    )
    assert [h["content"] for h in result.hits] == ["dependent 102"]
