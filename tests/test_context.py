"""The context block, byte for byte: label lines, warning lines, the budget edge, truncation."""

from __future__ import annotations

import math

import pytest

from lambo_core.context import (
    HitBlock,
    byte_budget,
    estimate_tokens,
    pillar_line,
    render_context,
    truncate_block,
    utf8_len,
)
from lambo_core.recall.legs import NOTICE_LOADING
from lambo_core.selection import Skipped, also_label

ID_A = "ddbc8bc8-52ed-465b-9a2a-b0066bda51ad"
ID_B = "3f9c2a10-0000-4000-8000-000000000000"
ID_C = "8c41d0e2-0000-4000-8000-000000000000"

PLAIN = HitBlock(ID_A, "stdio wire check", "Entity", False, 0.8565231086776713, 0)
PILLAR = HitBlock(
    ID_B,
    "user schema owns the account table, the session table and the audit table, and every "
    "migration that touches them needs a review from the data team before it ships",
    "Entity",
    True,
    1.44,
    8,
    (pillar_line(8),),
)
SMALL = HitBlock(ID_C, "accounts replaced the users table", "Observation", False, 0.36, 0)


# -- estimates -------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 3, 4, 7, 8, 100, 1749, 1750, 1751])
def test_tokens_are_ceil_bytes_over_3_5(size: int) -> None:
    assert estimate_tokens("x" * size) == math.ceil(size / 3.5)


def test_tokens_count_utf8_bytes_not_characters() -> None:
    assert estimate_tokens("⚑") == 1  # 3 bytes
    assert estimate_tokens("⚑⚑⚑") == 3  # 9 bytes -> ceil(2.57)
    assert utf8_len("—") == 3


@pytest.mark.parametrize("tokens", [1, 2, 22, 23, 500, 100_000])
def test_byte_budget_is_the_largest_size_within_the_estimate(tokens: int) -> None:
    budget = byte_budget(tokens)
    assert math.ceil(budget / 3.5) <= tokens < math.ceil((budget + 1) / 3.5)


# -- label and warning lines -------------------------------------------------------------------


def test_label_line_as_the_spec_example() -> None:
    rendered = render_context([PLAIN], 500)
    assert rendered.context == "stdio wire check [Entity] (score 0.86, id ddbc8bc8)"
    assert rendered.included == (True,) and rendered.truncated is None


def test_canonical_blast_radius_and_pillar_lines() -> None:
    block = HitBlock(ID_B, "user schema", "Entity", True, 1.95, 14, (pillar_line(14),))
    assert render_context([block], 500).context == (
        "user schema [Entity, canonical] (score 1.95, id 3f9c2a10, blast radius 14)\n"
        "⚑ Load-bearing pillar — 14 nodes depend on this. Modify with caution."
    )


def test_blast_radius_below_the_pillar_threshold_has_no_line() -> None:
    block = HitBlock(ID_C, "lease TTL is 45s", "Logic", False, 0.7149, 3)
    assert render_context([block], 500).context == (
        "lease TTL is 45s [Logic] (score 0.71, id 8c41d0e2, blast radius 3)"
    )


def test_every_type_label() -> None:
    for label in ("Entity", "Logic", "Constraint", "Resource", "Observation"):
        block = HitBlock(ID_A, "x", label, False, 0.5, 0)
        assert block.label_line() == f"x [{label}] (score 0.50, id ddbc8bc8)"


def test_blocks_are_separated_by_one_blank_line() -> None:
    block = HitBlock(ID_B, "user schema", "Entity", True, 1.95, 14, (pillar_line(14),))
    assert render_context([block, SMALL, PLAIN], 500).context == (
        "user schema [Entity, canonical] (score 1.95, id 3f9c2a10, blast radius 14)\n"
        "⚑ Load-bearing pillar — 14 nodes depend on this. Modify with caution.\n"
        "\n"
        "accounts replaced the users table [Observation] (score 0.36, id 8c41d0e2)\n"
        "\n"
        "stdio wire check [Entity] (score 0.86, id ddbc8bc8)"
    )


def test_content_is_kept_as_written() -> None:
    block = HitBlock(ID_A, "Ünïcode — naïve café [x] (y)", "Logic", False, 0.123, 0)
    assert render_context([block], 500).context == (
        "Ünïcode — naïve café [x] (y) [Logic] (score 0.12, id ddbc8bc8)"
    )


# -- the also part: hits skipped as repeats (spec: "Duplicate hits.") ---------------------------

SKIPPED_IDS = (
    "82c3dcb0-0000-4000-8000-000000000000",
    "1a2b3c4d-0000-4000-8000-000000000000",
    "5e6f7a8b-0000-4000-8000-000000000000",
    "9f8e7d6c-0000-4000-8000-000000000000",
    "e31def21-0000-4000-8000-000000000000",
)
ID_D = "4bf3835a-0000-4000-8000-000000000000"
DOGFOOD = "dogfood store carries no durable embedding for 92 of 100 concepts"


def _also(count: int) -> str:
    return also_label([Skipped(node_id, "same_content") for node_id in SKIPPED_IDS[:count]])


def test_label_with_one_also_id_as_the_spec_example() -> None:
    block = HitBlock(ID_D, DOGFOOD, "Entity", False, 1.38, 0, also=_also(1))
    assert render_context([block], 500).context == (
        f"{DOGFOOD} [Entity] (score 1.38, id 4bf3835a, also 82c3dcb0)"
    )


def test_label_with_three_also_ids_names_all_three() -> None:
    block = HitBlock(ID_D, DOGFOOD, "Entity", False, 1.38, 0, also=_also(3))
    assert block.label_line() == (
        f"{DOGFOOD} [Entity] (score 1.38, id 4bf3835a, also 82c3dcb0, 1a2b3c4d, 5e6f7a8b)"
    )


def test_label_with_five_also_ids_names_three_then_more() -> None:
    block = HitBlock(ID_D, DOGFOOD, "Entity", False, 1.38, 0, also=_also(5))
    assert block.label_line() == (
        f"{DOGFOOD} [Entity] (score 1.38, id 4bf3835a, also 82c3dcb0, 1a2b3c4d, 5e6f7a8b, +2 more)"
    )


def test_also_goes_before_the_blast_radius_and_the_lines_follow() -> None:
    block = HitBlock(
        ID_B, "user schema", "Entity", True, 1.95, 14, (pillar_line(14),), also=_also(5)
    )
    assert render_context([block], 500).context == (
        "user schema [Entity, canonical] (score 1.95, id 3f9c2a10, also 82c3dcb0, 1a2b3c4d, "
        "5e6f7a8b, +2 more, blast radius 14)\n"
        "⚑ Load-bearing pillar — 14 nodes depend on this. Modify with caution."
    )


def test_no_also_is_byte_identical() -> None:
    plain = HitBlock(ID_C, "lease TTL is 45s", "Logic", False, 0.7149, 3)
    assert HitBlock(ID_C, "lease TTL is 45s", "Logic", False, 0.7149, 3, also="") == plain
    assert (
        plain.label_line() == "lease TTL is 45s [Logic] (score 0.71, id 8c41d0e2, blast radius 3)"
    )
    assert _also(0) == ""


def test_also_counts_toward_max_tokens() -> None:
    with_also = HitBlock(ID_A, "stdio wire check", "Entity", False, 0.86, 0, also=_also(5))
    need = estimate_tokens(with_also.text())
    assert need > estimate_tokens(PLAIN.text())
    assert render_context([PLAIN, with_also], 500).included == (True, True)
    two = PLAIN.text() + "\n\n" + with_also.text()
    assert render_context([PLAIN, with_also], estimate_tokens(two)).included == (True, True)
    short = render_context([PLAIN, with_also], estimate_tokens(two) - 1)
    assert short.context == PLAIN.text() and short.included == (True, False)


def test_a_cut_first_block_keeps_its_also_with_the_label() -> None:
    block = HitBlock(ID_B, "y" * 400, "Logic", False, 0.9, 0, also=_also(1))
    cut = truncate_block(block, 200)
    assert cut is not None
    assert "… [Logic] (score 0.90, id 3f9c2a10, also 82c3dcb0)\n[truncated: " in cut


# -- the budget edge ---------------------------------------------------------------------------


def test_budget_edge_exactly_at_and_one_token_short() -> None:
    two = "stdio wire check [Entity] (score 0.86, id ddbc8bc8)\n\n" + SMALL.text()
    need = estimate_tokens(two)  # separator included
    at = render_context([PLAIN, SMALL], need)
    assert at.context == two and at.included == (True, True)
    short = render_context([PLAIN, SMALL], need - 1)
    assert short.context == "stdio wire check [Entity] (score 0.86, id ddbc8bc8)"
    assert short.included == (True, False) and short.truncated is None


def test_single_block_edge_exactly_at_and_one_token_short() -> None:
    text = PLAIN.text()
    assert render_context([PLAIN], estimate_tokens(text)).context == text
    # one token short: the block does not fit whole, so it is cut with a marker, and that
    # marker is longer than the text saved: nothing fits, the context is empty
    assert render_context([PLAIN], estimate_tokens(text) - 1).context == ""


def test_a_block_that_does_not_fit_stops_the_context() -> None:
    big = HitBlock(ID_B, "y" * 400, "Logic", False, 0.9, 0)
    rendered = render_context([PLAIN, big, SMALL], 60)
    # SMALL would fit on its own, but never follows a skipped block
    assert rendered.context == PLAIN.text()
    assert rendered.included == (True, False, False)


def test_empty_hits_give_an_empty_context() -> None:
    assert render_context([], 500) == render_context([], 1)
    assert render_context([], 500).context == ""


# -- truncation of the first block -----------------------------------------------------------------


def test_truncation_keeps_label_and_warning_lines_when_they_fit() -> None:
    rendered = render_context([PILLAR, SMALL], 70)
    assert rendered.context == (
        "user schema owns the account t… [Entity, canonical] "
        "(score 1.44, id 3f9c2a10, blast radius 8)\n"
        "⚑ Load-bearing pillar — 8 nodes depend on this. Modify with caution.\n"
        "[truncated: 38 tokens left out; lambo_inspect 3f9c2a10 for the full concept]"
    )
    assert rendered.truncated == 0 and rendered.included == (True, False)
    assert estimate_tokens(rendered.context) <= 70


def test_truncation_drops_warning_lines_before_the_label() -> None:
    rendered = render_context([PILLAR], 60)
    assert rendered.context == (
        "user schema owns the account table, the session table and the audit… "
        "[Entity, canonical] (score 1.44, id 3f9c2a10, blast radius 8)\n"
        "[truncated: 48 tokens left out; lambo_inspect 3f9c2a10 for the full concept]"
    )


def test_truncation_drops_the_label_last() -> None:
    rendered = render_context([PILLAR], 30)
    assert rendered.context == (
        "user schema owns the acco…\n"
        "[truncated: 78 tokens left out; lambo_inspect 3f9c2a10 for the full concept]"
    )
    assert estimate_tokens(rendered.context) == 30


def test_the_marker_counts_what_was_left_out() -> None:
    rendered = render_context([PILLAR], 30)
    first, _ = rendered.context.split("\n")
    kept = utf8_len(first) - utf8_len("…")
    left_out = utf8_len(PILLAR.text()) - kept
    assert f"[truncated: {math.ceil(left_out / 3.5)} tokens left out;" in rendered.context


@pytest.mark.parametrize("tokens", range(22, 85))
def test_truncated_context_never_exceeds_the_budget(tokens: int) -> None:
    rendered = render_context([PILLAR, SMALL], tokens)
    assert estimate_tokens(rendered.context) <= tokens
    if rendered.context:
        assert rendered.truncated == 0
        assert rendered.context.endswith("lambo_inspect 3f9c2a10 for the full concept]")


def test_a_budget_under_the_marker_gives_an_empty_context() -> None:
    for tokens in (1, 10, 22, 23):
        rendered = render_context([PILLAR], tokens)
        assert rendered.context == "" and rendered.included == (False,)
        assert rendered.truncated is None
    assert render_context([PILLAR], 24).context == (
        "user…\n[truncated: 84 tokens left out; lambo_inspect 3f9c2a10 for the full concept]"
    )


def test_cut_never_splits_a_combining_mark_from_its_letter() -> None:
    block = HitBlock(ID_A, "e\u0301" * 200, "Logic", False, 0.5, 0)
    cut = truncate_block(block, byte_budget(40))
    assert cut is not None
    text = cut.split("…")[0]
    assert text.endswith("e\u0301")


def test_cut_drops_trailing_space_before_the_ellipsis() -> None:
    block = HitBlock(ID_A, "aaaa " * 100, "Logic", False, 0.5, 0)
    cut = truncate_block(block, byte_budget(30))
    assert cut is not None and " …" not in cut


# -- the header (dependency answers) ------------------------------------------------------

HEADER = 'Answered by graph traversal: 2 concepts depend on "user schema" (id 3f9c2a10).'


def test_header_goes_first_with_a_blank_line() -> None:
    rendered = render_context([PLAIN, SMALL], 500, header=HEADER)
    assert rendered.context == HEADER + "\n\n" + PLAIN.text() + "\n\n" + SMALL.text()
    assert rendered.header_shown


def test_header_is_dropped_rather_than_the_first_block() -> None:
    need = estimate_tokens(HEADER + "\n\n" + PLAIN.text())
    assert render_context([PLAIN], need, header=HEADER).context == HEADER + "\n\n" + PLAIN.text()
    rendered = render_context([PLAIN], need - 1, header=HEADER)
    assert rendered.context == PLAIN.text() and not rendered.header_shown


def test_header_alone_when_there_are_no_hits() -> None:
    assert render_context([], 500, header=HEADER).context == HEADER


# -- the notice (a recall without its vector leg says so first) --------------------------------

NOTICE = NOTICE_LOADING


def test_the_notice_is_the_first_line_then_the_blocks() -> None:
    rendered = render_context([PLAIN, SMALL], 500, notice=NOTICE)
    assert rendered.context == NOTICE + "\n\n" + PLAIN.text() + "\n\n" + SMALL.text()
    assert rendered.notice_shown and rendered.included == (True, True)
    assert render_context([], 500, notice=NOTICE).context == NOTICE


def test_the_notice_counts_toward_the_budget_and_blocks_get_the_rest() -> None:
    both = NOTICE + "\n\n" + PLAIN.text() + "\n\n" + SMALL.text()
    exact = estimate_tokens(both)
    assert render_context([PLAIN, SMALL], exact, notice=NOTICE).context == both
    tighter = render_context([PLAIN, SMALL], exact - 1, notice=NOTICE)
    assert tighter.context == NOTICE + "\n\n" + PLAIN.text()
    assert tighter.included == (True, False) and estimate_tokens(tighter.context) <= exact - 1


def test_after_the_notice_a_first_block_too_big_is_cut_within_what_is_left() -> None:
    budget = estimate_tokens(NOTICE) + 45
    rendered = render_context([PILLAR, SMALL], budget, notice=NOTICE)
    first, rest = rendered.context.split("\n\n")
    assert first == NOTICE
    assert rest == (
        "user schema owns… [Entity, canonical] (score 1.44, id 3f9c2a10, blast radius 8)\n"
        "[truncated: 63 tokens left out; lambo_inspect 3f9c2a10 for the full concept]"
    )
    assert rendered.truncated == 0 and rendered.included == (True, False)
    assert estimate_tokens(rendered.context) <= budget


def test_the_notice_goes_before_a_header() -> None:
    rendered = render_context([PLAIN], 500, header=HEADER, notice=NOTICE)
    assert rendered.context == NOTICE + "\n\n" + HEADER + "\n\n" + PLAIN.text()
    assert rendered.notice_shown and rendered.header_shown


def test_the_notice_alone_when_nothing_else_fits_and_none_when_it_does_not_fit() -> None:
    just = estimate_tokens(NOTICE)
    alone = render_context([PLAIN], just, notice=NOTICE)
    assert alone.context == NOTICE and alone.included == (False,) and alone.notice_shown
    # a budget too small for the notice itself renders as without it
    small = render_context([PLAIN], just - 1, notice=NOTICE)
    assert small == render_context([PLAIN], just - 1) and not small.notice_shown


@pytest.mark.parametrize("tokens", range(1, 130, 3))
def test_a_context_with_the_notice_never_exceeds_the_budget(tokens: int) -> None:
    rendered = render_context([PILLAR, SMALL], tokens, notice=NOTICE)
    assert estimate_tokens(rendered.context) <= tokens
    assert rendered.notice_shown == rendered.context.startswith(NOTICE)
