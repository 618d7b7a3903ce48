"""The guards on a similarity merge: identifiers, numbers and negations must agree."""

from __future__ import annotations

import pytest

from lambo_core.matching import identifiers, merge_forbidden, negations, numbers


@pytest.mark.parametrize(
    ("a", "b", "why"),
    [
        ("the embedder listens on port 8080", "the embedder listens on port 8081", "numbers"),
        ("agent-0 wrote fact 1", "agent-1 wrote fact 0", "numbers"),  # swapped, same set
        ("retry_count is read first", "retry_limit is read first", "identifiers"),
        ("use parseConfig here", "use loadConfig here", "identifiers"),
        ("edit src/main.rs first", "edit src/lib.rs first", "identifiers"),
        ("pin HTTP clients", "pin GRPC clients", "identifiers"),
        ("bump to v1.2.3", "bump to v1.2.4", "identifiers"),
        ("the cache is enabled", "the cache is not enabled", "negations"),
        ("tests run in CI", "tests never run in CI", "negations"),
        ("we can merge on Friday", "we can't merge on Friday", "negations"),
    ],
)
def test_differences_that_forbid_a_merge(a: str, b: str, why: str) -> None:
    reason = merge_forbidden(a, b)
    assert reason is not None and why in reason


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("The cat is sleeping on the sofa.", "A cat naps on the couch."),
        ("deploys need a green build", "a green build is needed before deploying"),
        ("port 8080 is the default", "the default is port 8080"),
    ],
)
def test_rewordings_may_merge(a: str, b: str) -> None:
    assert merge_forbidden(a, b) is None


def test_extractors() -> None:
    assert identifiers("call load_config then parseArgs in src/a.py") == [
        "load_config",
        "parseArgs",
        "src/a.py",
    ]
    assert numbers("3 retries, 1.5 s apart, 10,000 max") == ["3", "1.5", "10,000"]
    assert negations("it does not and won't") == {"not", "won't", "n't"}
