"""The labelled near pairs of tests/bench/merge_pairs.json, checked against the merge guard
with no model: the guard refuses every different-facts pair of a category it covers and
allows every same-fact pair but the few it refuses on purpose (each says why)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lambo_core.matching import merge_forbidden

PAIRS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "bench" / "merge_pairs.json").read_text(encoding="utf-8")
)["pairs"]
# The categories the guard decides from the text alone. A changed subject ("staging" for
# "production") is left to the embedding: no rule on words tells it from a synonym.
COVERED = {
    "number",
    "number word",
    "ordinal",
    "negation",
    "opposite",
    "identifier",
    "swapped order",
}


def test_the_set_is_large_and_labelled() -> None:
    assert len(PAIRS) >= 200
    assert {p["why"] for p in PAIRS if not p["same"]} >= COVERED | {"subject"}
    assert sum(p["same"] for p in PAIRS) >= 90
    assert all(set(p) <= {"a", "b", "same", "why", "guard_keeps_apart"} for p in PAIRS)
    assert len({(p["a"], p["b"]) for p in PAIRS}) == len(PAIRS)


@pytest.mark.parametrize(
    "pair", [p for p in PAIRS if not p["same"] and p["why"] in COVERED], ids=lambda p: p["a"]
)
def test_the_guard_refuses_different_facts(pair: dict[str, Any]) -> None:
    assert merge_forbidden(pair["a"], pair["b"]) is not None
    assert merge_forbidden(pair["b"], pair["a"]) is not None


@pytest.mark.parametrize("pair", [p for p in PAIRS if p["same"]], ids=lambda p: p["a"])
def test_the_guard_allows_one_fact_reworded(pair: dict[str, Any]) -> None:
    refused = merge_forbidden(pair["a"], pair["b"])
    if "guard_keeps_apart" in pair:
        assert refused is not None and refused in pair["guard_keeps_apart"]
    else:
        assert refused is None
