"""Receipts across a session and its layers: at most 8 per response, each book with receipts
waiting giving at least one, nothing lost; routing by the id's nonce; the pending answer
while a layer is down."""

from __future__ import annotations

import pytest

from lambo_core.clock import ManualClock
from lambo_core.receipts import (
    PIGGYBACK_MAX,
    PiggybackSource,
    ReceiptBook,
    ReceiptState,
    ReceiptView,
    fair_piggyback,
    fair_shares,
    layer_down_view,
    render_line,
    to_structured,
)

S = ReceiptState


def rid(view: ReceiptView) -> str:
    assert view.receipt_id is not None
    return view.receipt_id


def settled(book: ReceiptBook, n: int, agent: str = "a", session: str = "lambo") -> list[str]:
    """``n`` receipts issued under (agent, session) and settled applied, in that order."""
    ids = [rid(book.issue(agent, session, "lambo_derive")) for _ in range(n)]
    for receipt_id in ids:
        assert book.settle(receipt_id, S.APPLIED)
    return ids


@pytest.mark.parametrize(
    ("waiting", "shares"),
    [
        ([], []),
        ([0, 0], [0, 0]),
        ([3], [3]),
        ([20], [8]),
        ([10, 1], [7, 1]),
        ([1, 10], [1, 7]),
        ([10, 2], [6, 2]),
        ([8, 8], [4, 4]),
        ([3, 3, 3], [3, 3, 2]),
        ([2, 0, 9], [2, 0, 6]),
        ([1] * 9, [1] * 8 + [0]),  # past 8 books the bound wins; the ninth waits its turn
    ],
)
def test_fair_shares(waiting: list[int], shares: list[int]) -> None:
    assert fair_shares(waiting) == shares
    assert sum(shares) <= PIGGYBACK_MAX


def test_fair_shares_with_another_limit() -> None:
    assert fair_shares([5, 5], limit=3) == [2, 1]
    assert fair_shares([5, 5], limit=0) == [0, 0]
    assert fair_shares([5], limit=-1) == [0]


def test_fair_piggyback_spreads_eight_over_the_books_and_loses_nothing() -> None:
    clock = ManualClock()
    project, layer = ReceiptBook(clock), ReceiptBook(clock)
    own = settled(project, 10)
    layered = settled(layer, 2)  # the layer's writes through lambo, queued under lambo
    sources = [PiggybackSource(project, "lambo"), PiggybackSource(layer, "lambo")]
    first = fair_piggyback("a", sources)
    assert [v.receipt_id for v in first] == own[:6] + layered
    second = fair_piggyback("a", sources)
    assert [v.receipt_id for v in second] == own[6:]
    assert fair_piggyback("a", sources) == []


def test_a_book_with_one_receipt_waiting_always_gets_a_slot() -> None:
    project, layer = ReceiptBook(), ReceiptBook()
    settled(project, 30)
    (only,) = settled(layer, 1)
    views = fair_piggyback(
        "a", [PiggybackSource(project, "lambo"), PiggybackSource(layer, "lambo")]
    )
    assert len(views) == 8 and views[-1].receipt_id == only


def test_fair_piggyback_keeps_the_responses_own_ack_queued() -> None:
    project, layer = ReceiptBook(), ReceiptBook()
    ack, later = settled(layer, 2)
    sources = [PiggybackSource(project, "lambo"), PiggybackSource(layer, "lambo", exclude=ack)]
    assert layer.waiting("a", "lambo", exclude=ack) == 1
    assert [v.receipt_id for v in fair_piggyback("a", sources)] == [later]
    assert [v.receipt_id for v in layer.take_piggyback("a", "lambo")] == [ack]


def test_waiting_counts_what_take_piggyback_would_hand_out() -> None:
    book = ReceiptBook()
    ids = settled(book, 3)
    pending = book.issue("a", "lambo", "lambo_derive")
    settled(book, 2, session="general")  # another key
    assert book.waiting("a", "lambo") == 3
    assert book.waiting("b", "lambo") == 0
    assert book.waiting("a", "general") == 2
    # A lookup by another session is refused and consumes nothing; the owner's consumes.
    assert book.lookup(ids[0], "a", "general").state is S.FORBIDDEN
    assert book.waiting("a", "lambo") == 3
    assert book.lookup(ids[0], "a", "lambo").state is S.APPLIED
    assert book.waiting("a", "lambo") == 2
    book.settle(rid(pending), S.FAILED, "no")
    assert book.waiting("a", "lambo") == 3
    assert len(book.take_piggyback("a", "lambo")) == 3
    assert book.waiting("a", "lambo") == 0


def test_waiting_counts_a_receipt_settled_twice_once() -> None:
    book = ReceiptBook()
    view = book.issue("a", "lambo", "lambo_derive")
    book.settle(rid(view), S.CLOSE_UNFLUSHED)
    book.settle(rid(view), S.INTENT_DURABLE)  # a retried flush changes the close outcome
    assert book.waiting("a", "lambo") == 1


def test_issued_here_reads_the_nonce_and_the_start() -> None:
    clock = ManualClock()
    book = ReceiptBook(clock, nonce=7)
    mine = rid(book.issue("a", "lambo", "lambo_derive"))
    other = rid(ReceiptBook(clock, nonce=8).issue("a", "lambo", "lambo_derive"))
    clock.advance(5)
    restarted = ReceiptBook(clock, nonce=7)  # same nonce, a later process start
    assert book.issued_here(mine) and book.issued_here(f"  {mine} ")
    assert not book.issued_here(other)
    assert not restarted.issued_here(mine)
    for junk in ("", "lwr1.x", "not a receipt", "lwr1." + "0" * 16 + ".1.0"):
        assert not book.issued_here(junk)


def test_the_layer_down_answer_is_pending_and_says_to_ask_again() -> None:
    receipt_id = "lwr1.00000000000000aa.1.3"
    view = layer_down_view(f" {receipt_id} ", "general")
    assert view.state is S.PENDING and not view.settled
    assert render_line(view) == (
        f"receipt {receipt_id}: pending — this receipt may belong to layer general, which is "
        "not serving right now; ask again"
    )
    assert to_structured(view) == {
        "receipt": receipt_id,
        "state": "pending",
        "detail": "this receipt may belong to layer general, which is not serving right now; "
        "ask again",
    }
