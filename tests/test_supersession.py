"""Possibly superseded, not declared: the subject/predicate split and which refused merges
may flag (spec: lambo_recall, "Possibly superseded, not declared")."""

from __future__ import annotations

import pytest

from lambo_core.supersession import Side, flags, subject_length


@pytest.mark.parametrize(
    ("text", "subject"),
    [
        ("the embedder listens on port 8080", "the embedder"),
        ("lease TTL is 45s", "lease TTL"),
        ("J1 round-1 verdict: pass", "J1 round-1 verdict:"),
        ("the J1 round-1 verdict is pass", "the J1 round-1 verdict"),
        ("timeout = 30", "timeout ="),
        ("uses port 8080", ""),  # an imperative: the predicate comes first
        ("the worker thrice daily", "the worker"),  # no predicate word: a determiner and a word
        ("release on friday", "release"),  # no predicate word: the first word
        ("build 7 green", "build 7"),  # ... and a number after it: a name and its number
        ("the job 12 green", "the job 12"),
    ],
)
def test_the_subject_is_what_comes_before_the_predicate(text: str, subject: str) -> None:
    tokens = text.split()
    assert tokens[: subject_length(tokens)] == subject.split()


def side(node_id: str, content: str, at: float) -> Side:
    return Side(node_id, content, at)


@pytest.mark.parametrize(
    ("older", "newer", "flagged"),
    [
        ("the embedder listens on port 8080", "the embedder listens on port 8081", True),
        ("the J1 round-1 verdict is pass", "the J2 round-1 verdict is pass", False),
        ("tokens expire after sixty minutes", "tokens expire after ninety minutes", True),
        ("the release is in its third week", "the release is in its fourth week", True),
        ("port 8080 on host a", "port 8081 on host b", False),  # two values at once
        ("the cache is enabled", "the cache is not enabled", False),  # a negation, not a value
        ("the flag is on", "the flag is off", False),  # an opposite, not a value
        ("the cache is warm", "the cache is warm now", False),  # merges: nothing refused
    ],
)
def test_which_pairs_flag(older: str, newer: str, flagged: bool) -> None:
    pair = flags(side("a", older, 1.0), side("b", newer, 2.0), lambda _a, _b: False)
    assert (pair is not None) is flagged
    if pair is not None:
        assert (pair[0].node_id, pair[1].node_id) == ("b", "a")


def test_a_pair_dated_alike_or_linked_is_never_flagged() -> None:
    older = side("a", "the embedder listens on port 8080", 1.0)
    newer = side("b", "the embedder listens on port 8081", 1.0)
    assert flags(older, newer, lambda _a, _b: False) is None
    later = side("b", newer.content, 2.0)
    assert flags(older, later, lambda _a, _b: True) is None
