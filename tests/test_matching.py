"""The rules for when two near texts state different facts: the merge guard (identifiers,
numbers, ordinals, negations, opposites, swapped roles) and the repeat rule's word order.

Rows marked ``# new`` were merged by the guard before #15 (it knew only identifiers, digit
numbers and negation words); each is a fact a similarity merge would have lost.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lambo_core.index.keywords import tokenize
from lambo_core.matching import (
    IDENTIFIERS_DIFFER,
    NEGATIONS_DIFFER,
    NUMBERS_DIFFER,
    OPPOSITES_DIFFER,
    ORDINALS_DIFFER,
    ROLES_SWAPPED,
    WORD_ORDER_DIFFERS,
    facts_differ,
    identifiers,
    merge_forbidden,
    negations,
    numbers,
    ordinals,
    roles_swapped,
)


@pytest.mark.parametrize(
    ("a", "b", "reason"),
    [
        # identifiers (case counts)
        ("retry_count is read first", "retry_limit is read first", IDENTIFIERS_DIFFER),
        ("use parseConfig here", "use loadConfig here", IDENTIFIERS_DIFFER),
        ("edit src/main.rs first", "edit src/lib.rs first", IDENTIFIERS_DIFFER),
        ("edit src/Main.rs first", "edit src/main.rs first", IDENTIFIERS_DIFFER),
        ("pin HTTP clients", "pin GRPC clients", IDENTIFIERS_DIFFER),
        ("bump to v1.2.3", "bump to v1.2.4", IDENTIFIERS_DIFFER),
        (
            "call session.close before exit",
            "call session.stop before exit",
            IDENTIFIERS_DIFFER,
        ),  # new
        # numbers: digits, then number words (new), mixed (new), compounds (new)
        ("the embedder listens on port 8080", "the embedder listens on port 8081", NUMBERS_DIFFER),
        ("agent-0 wrote fact 1", "agent-1 wrote fact 0", NUMBERS_DIFFER),  # swapped, same set
        (
            "tokens expire after one hour",
            "tokens expire after ninety minutes",
            NUMBERS_DIFFER,
        ),  # new
        ("flush retries three times", "flush retries five times", NUMBERS_DIFFER),  # new
        ("the flush retries 3 times", "the flush retries four times", NUMBERS_DIFFER),
        ("run twenty-five workers", "run twenty-six workers", NUMBERS_DIFFER),  # new
        ("keep a dozen backups", "keep twenty backups", NUMBERS_DIFFER),  # new
        ("retry twice", "retry thrice", NUMBERS_DIFFER),  # new
        ("the cache warms in half a minute", "the cache warms in a minute", NUMBERS_DIFFER),  # new
        (
            "each shard holds two million rows",
            "each shard holds three million rows",
            NUMBERS_DIFFER,
        ),  # new
        # ordinals: words (new) and digits (new: "2nd" and "3rd" read as the numbers 2 and 3
        # before, which also differ, but "first" and "second" were no number at all)
        ("fourth decision: keep SQLite", "third decision: keep SQLite", ORDINALS_DIFFER),  # new
        ("the 2nd attempt timed out", "the 3rd attempt timed out", ORDINALS_DIFFER),
        ("the first index scan is slow", "the second index scan is slow", ORDINALS_DIFFER),  # new
        ("we ship on the twentieth", "we ship on the twenty-first", ORDINALS_DIFFER),  # new
        ("the second option was chosen", "the option was chosen", ORDINALS_DIFFER),  # new
        # negations
        ("the cache is enabled", "the cache is not enabled", NEGATIONS_DIFFER),
        ("tests run in CI", "tests never run in CI", NEGATIONS_DIFFER),
        ("we can merge on Friday", "we can't merge on Friday", NEGATIONS_DIFFER),
        ("nobody reviews the config", "somebody reviews the config", NEGATIONS_DIFFER),  # new
        # a word against its opposite (new: the repeat rule had them, the merge did not)
        ("the firewall allows port 22", "the firewall denies port 22", OPPOSITES_DIFFER),  # new
        ("start the embedder first", "stop the embedder first", OPPOSITES_DIFFER),  # new
        ("the build passed on main", "the build failed on main", OPPOSITES_DIFFER),  # new
        (
            "run the linter before the tests",
            "run the linter after the tests",
            OPPOSITES_DIFFER,
        ),  # new
        ("the token grants read access", "the token grants write access", OPPOSITES_DIFFER),  # new
        (
            "the next release drops py3.9",
            "the previous release drops py3.9",
            OPPOSITES_DIFFER,
        ),  # new
        ("the flag is on", "the flag is off", OPPOSITES_DIFFER),  # new
        # two shared words trading sides (new)
        ("the API depends on the cache", "the cache depends on the API", ROLES_SWAPPED),  # new
        (
            "copy from staging to production",
            "copy from production to staging",
            ROLES_SWAPPED,
        ),  # new
        (
            "run the migration then the backfill",
            "run the backfill then the migration",
            ROLES_SWAPPED,
        ),  # new
    ],
)
def test_a_difference_that_forbids_a_merge(a: str, b: str, reason: str) -> None:
    assert merge_forbidden(a, b) == reason
    assert merge_forbidden(b, a) == reason


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("The cat is sleeping on the sofa.", "A cat naps on the couch."),
        ("deploys need a green build", "a green build is needed before deploying"),
        ("port 8080 is the default", "the default is port 8080"),  # a copula reads both ways
        ("the flush retries 3 times", "the flush retries three times"),  # one value, two spellings
        ("the cache keeps 10,000 entries", "the cache keeps 10000 entries"),
        ("the cache keeps ten thousand entries", "the cache keeps 10,000 entries"),
        ("the 1st migration adds sessions", "the first migration adds sessions"),
        ("wait 1 second between tries", "wait one second between tries"),  # a unit, not 2nd
        ("the hub does not forward writes", "the hub doesn't forward writes"),
        ("users cannot delete sessions", "users can't delete sessions"),
        ("Priya approved the design doc", "the design doc was approved by Priya"),  # passive
        ("the dashboard refreshes every 30 seconds", "every 30 seconds the dashboard refreshes"),
        ("a hundred and five workers", "105 workers"),
        ("Case Test", "case test"),  # case outside an identifier
    ],
)
def test_rewordings_may_merge(a: str, b: str) -> None:
    assert merge_forbidden(a, b) is None
    assert merge_forbidden(b, a) is None


def test_the_merge_does_not_check_word_order_but_the_repeat_rule_does() -> None:
    # Rewordings reorder words all the time: measured on tests/bench/merge_pairs.json, the
    # order of shared words refuses about half the same-fact pairs; swapped roles refuse two.
    a, b = "the cold start takes 2 s on a laptop", "on a laptop the cold start takes 2 s"
    assert merge_forbidden(a, b) is None
    assert facts_differ(a, b, word_order=True) == WORD_ORDER_DIFFERS


def test_extractors() -> None:
    assert identifiers("call load_config then parseArgs in src/a.py") == [
        "load_config",
        "parseArgs",
        "src/a.py",
    ]
    assert numbers("3 retries, 1.5 s apart, 10,000 max") == ["3", "1.5", "10000"]
    assert numbers("ninety minutes, twenty-five workers, two hundred and five rows") == [
        "90",
        "25",
        "205",
    ]
    assert numbers("one thousand five hundred, three million, a dozen, twice") == [
        "1500",
        "3000000",
        "12",
        "2",
    ]
    assert numbers("one, two, three") == ["1", "2", "3"]
    assert numbers("the 4th try") == [] and ordinals("the 4th try") == ["4th"]
    assert ordinals("first, 2nd, third, twenty-first, tenth") == [
        "1th",
        "2th",
        "3th",
        "21th",
        "10th",
    ]
    assert ordinals("wait one second") == [] and ordinals("the second replica") == ["2th"]
    assert negations("it does not and won't") == {"not"}
    assert negations("cannot, never, without it") == {"not", "never", "without"}


def test_roles_swapped_reads_the_pivot_both_ways() -> None:
    assert roles_swapped(tokenize("Alice reports to Bob"), tokenize("Bob reports to Alice"))
    assert not roles_swapped(tokenize("Alice reports to Bob"), tokenize("Alice reports to Bob"))
    assert not roles_swapped(tokenize("X is Y"), tokenize("Y is X"))  # no pivot but a copula
    assert not roles_swapped(tokenize("a b"), tokenize("b a"))  # two words, no third


def _swapped_by_definition(a: list[str], b: list[str]) -> bool:
    """roles_swapped read literally: a pivot with one shared word moving from before it to
    after it and another moving the other way (first occurrences, passives skipped)."""
    pos_a = {w: i for i, w in reversed(list(enumerate(a)))}
    pos_b = {w: i for i, w in reversed(list(enumerate(b)))}
    shared = [w for w in pos_a if w in pos_b and w not in {"the", "is"}]
    aux = {"is"}
    for p in shared:
        if (pos_a[p] > 0 and a[pos_a[p] - 1] in aux) != (pos_b[p] > 0 and b[pos_b[p] - 1] in aux):
            continue
        after = any(pos_a[w] < pos_a[p] and pos_b[w] > pos_b[p] for w in shared)
        before = any(pos_a[w] > pos_a[p] and pos_b[w] < pos_b[p] for w in shared)
        if after and before:
            return True
    return False


WORDS = st.lists(st.sampled_from(["x", "y", "z", "w", "the", "is"]), max_size=7)


@given(WORDS, WORDS)
def test_property_roles_swapped_is_its_definition(a: list[str], b: list[str]) -> None:
    assert roles_swapped(a, b) is _swapped_by_definition(a, b)
