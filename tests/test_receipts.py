"""ReceiptBook: ids, bounds, scope, piggyback, retention, waits, rendering."""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import anyio
import pytest

from lambo_core.clock import ManualClock
from lambo_core.limits import WAIT_MS_MAX
from lambo_core.receipts import (
    AGENT_WAIT_BOUND,
    BOUND,
    DEFAULT_DETAILS,
    LANE_BOUND,
    RETAIN_MAX,
    SERVER_WAIT_BOUND,
    ReceiptBook,
    ReceiptState,
    ReceiptView,
    clamp_wait_ms,
    parse_receipt_id,
    render_line,
    render_piggyback,
    to_structured,
)
from lambo_core.receipts.waits import WaitTicket

ID_RE = re.compile(r"lwr1\.[0-9a-f]{16}\.[0-9a-f]+\.[1-9][0-9]*")
S = ReceiptState
# Bounded timeout for anything that synchronises threads: a failure, never a pacing.
DEADLINE_S = 10.0


def rid(view: ReceiptView) -> str:
    assert view.receipt_id is not None
    return view.receipt_id


def eventually(predicate: Any) -> None:
    """Poll a condition another thread makes true, failing after DEADLINE_S."""
    end = time.monotonic() + DEADLINE_S
    while not predicate():
        assert time.monotonic() < end, "condition never became true"
        time.sleep(0.001)


# ------------------------------------------------------------------ ids


def test_id_format_seq_and_start_time() -> None:
    clock = ManualClock(1_760_000_000.5)
    book = ReceiptBook(clock, nonce=0x708217EBBF356946)
    first, second = book.issue("a", "s", "lambo_derive"), book.issue("a", "s", "lambo_derive")
    start_hex = f"{1_760_000_000_500:x}"
    assert rid(first) == f"lwr1.708217ebbf356946.{start_hex}.1"
    assert rid(second) == f"lwr1.708217ebbf356946.{start_hex}.2"
    assert first.state is S.PENDING
    assert parse_receipt_id(rid(second)) == ("708217ebbf356946", start_hex, 2)


def test_ids_unique_across_many_issues_and_two_books() -> None:
    one, two = ReceiptBook(), ReceiptBook()
    assert one.nonce != two.nonce
    ids: set[str] = set()
    for book in (one, two):
        for i in range(3000):
            view = book.issue(f"agent-{i % 40}", "s", "lambo_derive")
            assert view.state is S.PENDING
            assert ID_RE.fullmatch(rid(view))
            ids.add(rid(view))
            book.settle(rid(view), S.APPLIED)
    assert len(ids) == 6000


def test_spec_example_id_parses() -> None:
    assert parse_receipt_id("lwr1.708217ebbf356946.1a01fa59db7.15") == (
        "708217ebbf356946",
        "1a01fa59db7",
        15,
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "lwr1",
        "lwr1.708217ebbf356946.1a01fa59db7",
        "lwr2.708217ebbf356946.1a01fa59db7.15",
        "LWR1.708217EBBF356946.1A01FA59DB7.15",
        "lwr1.708217ebbf35694.1a01fa59db7.15",  # 15-hex nonce
        "lwr1.708217ebbf356946.1a01fa59db7.0",
        "lwr1.708217ebbf356946.1a01fa59db7.015",
        "lwr1.708217ebbf356946.1a01fa59db7.15.1",
        "lwr1.708217ebbf356946.1a01fa59db7.１５",  # full-width digits
        "lwr1.708217ebbf356946.1a01fa59db7.15; DROP TABLE",
        "lwr1.708217ebbf356946.1a01fa59db7." + "1" * 60,
        "x" * 10_000,
    ],
)
def test_malformed_ids_are_never_issued_and_never_echoed(text: str) -> None:
    book = ReceiptBook()
    assert parse_receipt_id(text) is None
    view = book.lookup(text, "a", "s")
    assert view.state is S.NEVER_ISSUED
    assert view.receipt_id is None
    if text:
        assert text not in render_line(view)
        assert text not in str(to_structured(view))
    assert book.wait(text, "a", "s", 1000).state is S.NEVER_ISSUED


def test_seq_this_process_never_issued() -> None:
    book = ReceiptBook(nonce=1)
    issued = book.issue("a", "s", "lambo_derive")
    nonce, start, seq = parse_receipt_id(rid(issued)) or ("", "", 0)
    unissued = f"lwr1.{nonce}.{start}.{seq + 1}"
    view = book.lookup(unissued, "a", "s")
    assert view.state is S.NEVER_ISSUED
    assert view.receipt_id == unissued
    assert view.detail == DEFAULT_DETAILS[S.NEVER_ISSUED]


# ------------------------------------------------------------- bounds


def test_lane_bound_at_64_and_one_past() -> None:
    book = ReceiptBook()
    views = [book.issue("a", "s", "lambo_derive") for _ in range(LANE_BOUND)]
    assert all(v.state is S.PENDING for v in views)
    over = book.issue("a", "s", "lambo_derive")
    assert over.state is S.DROPPED
    assert "nothing was written" in over.detail
    assert "your lane of 64 outstanding writes is full" in over.detail
    # the same agent through another session shares the lane; another agent does not
    assert book.issue("a", "other", "lambo_record_action").state is S.DROPPED
    assert book.issue("b", "s", "lambo_derive").state is S.PENDING
    stats = book.stats()
    assert (stats.outstanding, stats.accepted, stats.dropped) == (65, 65, 2)
    assert stats.dropped_closed == 0
    # the dropped receipt answers its owner, and never rides a later response
    assert book.lookup(rid(over), "a", "s").state is S.DROPPED
    assert book.take_piggyback("a", "s") == []


def test_settling_frees_a_lane_slot() -> None:
    book = ReceiptBook()
    views = [book.issue("a", "s", "lambo_derive") for _ in range(LANE_BOUND)]
    assert book.issue("a", "s", "lambo_derive").state is S.DROPPED
    assert book.settle(rid(views[0]), S.FAILED, "embedder timed out; nothing was written")
    assert book.issue("a", "s", "lambo_derive").state is S.PENDING
    assert book.issue("a", "s", "lambo_derive").state is S.DROPPED


def test_server_bound_at_1024_and_one_past() -> None:
    book = ReceiptBook()
    agents = BOUND // LANE_BOUND
    for n in range(agents):
        for _ in range(LANE_BOUND):
            assert book.issue(f"agent-{n}", "s", "lambo_derive").state is S.PENDING
    assert book.stats().outstanding == BOUND
    over = book.issue("fresh-agent", "s", "lambo_derive")
    assert over.state is S.DROPPED
    assert "the server's queue of 1024 outstanding writes is full" in over.detail
    assert "lane" not in over.detail
    assert "nothing was written" in over.detail


def test_closing_drops_with_its_own_reason_and_counter() -> None:
    book = ReceiptBook()
    pending = book.issue("a", "s", "lambo_derive")
    book.close()
    assert book.closing
    late = book.issue("a", "s", "lambo_derive")
    assert late.state is S.DROPPED
    assert "shutting down" in late.detail and "nothing was written" in late.detail
    stats = book.stats()
    assert (stats.dropped, stats.dropped_closed, stats.outstanding) == (1, 1, 1)
    # the shutdown settles what was admitted
    assert book.settle(rid(pending), S.INTENT_DURABLE)
    assert book.stats().deferred == 1


# -------------------------------------------------------------- settle


def test_settle_records_outcome_and_counters() -> None:
    book = ReceiptBook()
    a, b = book.issue("a", "s", "lambo_derive"), book.issue("a", "s", "lambo_derive")
    data = {"created": ["n1"], "created_count": 1, "state": "ignored"}
    assert book.settle(rid(a), S.APPLIED, "derived 1 concept(s)", data)
    assert book.settle(rid(b), S.FAILED)
    assert not book.settle(rid(a), S.FAILED), "a settled receipt stays settled"
    got = book.lookup(rid(a), "a", "s")
    assert (got.state, got.detail, got.data["created"]) == (
        S.APPLIED,
        "derived 1 concept(s)",
        ["n1"],
    )
    assert book.lookup(rid(b), "a", "s").detail == DEFAULT_DETAILS[S.FAILED]
    stats = book.stats()
    assert (stats.applied, stats.failed, stats.outstanding, stats.accepted) == (1, 1, 0, 2)


@pytest.mark.parametrize(
    "state",
    [
        s
        for s in ReceiptState
        if s not in (S.APPLIED, S.FAILED, S.INTENT_DURABLE, S.CLOSE_UNFLUSHED)
    ],
)
def test_settle_refuses_states_a_worker_cannot_reach(state: ReceiptState) -> None:
    book = ReceiptBook()
    view = book.issue("a", "s", "lambo_derive")
    with pytest.raises(ValueError):
        book.settle(rid(view), state)


def test_retried_close_turns_close_unflushed_into_intent_durable() -> None:
    book = ReceiptBook()
    view = book.issue("a", "s", "lambo_derive")
    assert book.settle(rid(view), S.CLOSE_UNFLUSHED)
    assert book.stats().abandoned == 1
    assert book.settle(rid(view), S.INTENT_DURABLE)
    stats = book.stats()
    assert (stats.abandoned, stats.deferred) == (0, 1)
    assert [v.state for v in book.take_piggyback("a", "s")] == [S.INTENT_DURABLE]
    assert not book.settle(rid(view), S.APPLIED)


def test_withdrawn_receipt_frees_its_slot_and_was_never_issued() -> None:
    book = ReceiptBook()
    view = book.issue("a", "s", "lambo_derive")
    assert book.withdraw(rid(view))
    assert not book.withdraw(rid(view))
    assert book.lookup(rid(view), "a", "s").state is S.NEVER_ISSUED
    assert book.lookup(rid(view), "b", "s").state is S.NEVER_ISSUED
    stats = book.stats()
    assert (stats.accepted, stats.outstanding) == (0, 0)
    assert book.take_piggyback("a", "s") == []


# ----------------------------------------------------- scope, piggyback


def test_forbidden_for_another_agent_or_session_and_it_does_not_consume() -> None:
    book = ReceiptBook()
    view = book.issue("a", "s", "lambo_derive")
    for agent, session in (("b", "s"), ("a", "other")):
        answer = book.lookup(rid(view), agent, session)
        assert answer.state is S.FORBIDDEN
        assert answer.data == {}
        assert book.wait(rid(view), agent, session, 50).state is S.FORBIDDEN
    book.settle(rid(view), S.APPLIED, "derived 1 concept(s)", {"created": ["n1"]})
    assert book.lookup(rid(view), "b", "s").state is S.FORBIDDEN
    assert book.lookup(rid(view), "a", "other").state is S.FORBIDDEN
    assert book.take_piggyback("b", "s") == []
    # still owed to its owner after the forbidden asks
    assert [v.receipt_id for v in book.take_piggyback("a", "s")] == [rid(view)]


def test_owner_lookup_consumes_the_piggyback() -> None:
    book = ReceiptBook()
    first, second = book.issue("a", "s", "lambo_derive"), book.issue("a", "s", "lambo_derive")
    # a pending lookup consumes nothing: the outcome is still owed
    assert book.lookup(rid(first), "a", "s").state is S.PENDING
    book.settle(rid(first), S.APPLIED)
    book.settle(rid(second), S.APPLIED)
    assert book.lookup(rid(first), "a", "s").state is S.APPLIED
    assert [v.receipt_id for v in book.take_piggyback("a", "s")] == [rid(second)]
    # still answerable by id after delivery
    assert book.lookup(rid(first), "a", "s").state is S.APPLIED


def test_piggyback_at_most_8_oldest_first_each_once() -> None:
    book = ReceiptBook()
    views = [book.issue("a", "s", "lambo_derive") for _ in range(20)]
    other = book.issue("a", "s2", "lambo_derive")
    book.settle(rid(other), S.APPLIED)
    order = list(reversed(views))  # settle order, not issue order, is what "oldest" means
    for view in order:
        book.settle(rid(view), S.APPLIED)
    batches = [book.take_piggyback("a", "s") for _ in range(4)]
    assert [len(b) for b in batches] == [8, 8, 4, 0]
    delivered = [v.receipt_id for batch in batches for v in batch]
    assert delivered == [rid(v) for v in order]
    assert [v.receipt_id for v in book.take_piggyback("a", "s2")] == [rid(other)]
    assert book.take_piggyback("b", "s") == []
    assert len(book.take_piggyback("a", "s", limit=3)) == 0


def test_piggyback_limit_is_respected() -> None:
    book = ReceiptBook()
    for _ in range(5):
        book.settle(rid(book.issue("a", "s", "lambo_derive")), S.APPLIED)
    assert len(book.take_piggyback("a", "s", limit=2)) == 2
    assert len(book.take_piggyback("a", "s")) == 3


# ----------------------------------------------------------- retention


def test_retention_by_time() -> None:
    clock = ManualClock()
    book = ReceiptBook(clock)
    settled, pending = book.issue("a", "s", "t"), book.issue("a", "s", "t")
    book.settle(rid(settled), S.APPLIED)
    clock.advance(299)
    assert book.lookup(rid(settled), "a", "s").state is S.APPLIED
    clock.advance(2)
    view = book.lookup(rid(settled), "a", "s")
    assert view.state is S.EXPIRED
    assert "300 seconds" in view.detail and "recall" in view.detail
    # pending receipts are never evicted, however old
    clock.advance(10_000)
    assert book.lookup(rid(pending), "a", "s").state is S.PENDING
    assert book.stats().receipts_retained == 1


def test_expired_receipt_is_not_piggybacked() -> None:
    clock = ManualClock()
    book = ReceiptBook(clock)
    book.settle(rid(book.issue("a", "s", "t")), S.APPLIED)
    clock.advance(301)
    assert book.take_piggyback("a", "s") == []


def test_retention_by_count() -> None:
    book = ReceiptBook(ManualClock())
    pending = book.issue("a", "s", "t")
    ids = []
    for _ in range(RETAIN_MAX + 1):
        view = book.issue("a", "s", "t")
        book.settle(rid(view), S.APPLIED)
        ids.append(rid(view))
    assert book.stats().receipts_retained == RETAIN_MAX
    # one pending + 4096 settled would be 4097: the two oldest settled go, never the pending
    assert book.lookup(ids[0], "a", "s").state is S.EXPIRED
    assert book.lookup(ids[1], "a", "s").state is S.EXPIRED
    assert book.lookup(ids[2], "a", "s").state is S.APPLIED
    assert book.lookup(ids[-1], "a", "s").state is S.APPLIED
    assert book.lookup(rid(pending), "a", "s").state is S.PENDING


def test_retention_by_count_with_no_pending() -> None:
    book = ReceiptBook(ManualClock())
    ids: list[str] = []
    for _ in range(RETAIN_MAX + 1):
        view = book.issue(f"agent-{len(ids) % 7}", "s", "t")
        book.settle(rid(view), S.APPLIED)
        ids.append(rid(view))
    assert book.lookup(ids[0], "agent-0", "s").state is S.EXPIRED
    assert book.lookup(ids[1], "agent-1", "s").state is S.APPLIED
    assert book.stats().receipts_retained == RETAIN_MAX


# --------------------------------------------------------------- foreign


def test_foreign_ids_go_to_the_hook() -> None:
    calls: list[tuple[str, str, str]] = []

    def hook(receipt_id: str, agent_id: str, session: str) -> Any:
        calls.append((receipt_id, agent_id, session))
        if receipt_id.endswith(".1"):
            return (S.APPLIED_AFTER_RESTART, "derived 1 concept(s)", {"created_count": 1})
        if receipt_id.endswith(".2"):
            return (S.PENDING_REPLAY, "", {})
        return None

    previous = ReceiptBook(nonce=1)
    old = [rid(previous.issue("a", "s", "t")) for _ in range(3)]
    book = ReceiptBook(nonce=2, foreign_lookup=hook)
    got = book.lookup(old[0], "a", "s")
    assert (got.state, got.detail, dict(got.data)) == (
        S.APPLIED_AFTER_RESTART,
        "derived 1 concept(s)",
        {"created_count": 1},
    )
    assert book.lookup(old[1], "a", "s").detail == DEFAULT_DETAILS[S.PENDING_REPLAY]
    assert book.lookup(old[2], "a", "s").state is S.RESTART_LOST
    assert book.wait(old[0], "a", "s", 100).state is S.APPLIED_AFTER_RESTART
    assert calls[:3] == [(old[0], "a", "s"), (old[1], "a", "s"), (old[2], "a", "s")]


def test_foreign_id_without_a_hook_is_restart_lost() -> None:
    other = rid(ReceiptBook(nonce=1).issue("a", "s", "t"))
    view = ReceiptBook(nonce=2).lookup(other, "a", "s")
    assert view.state is S.RESTART_LOST
    assert view.receipt_id == other


def test_same_nonce_other_start_time_is_another_process() -> None:
    clock = ManualClock()
    earlier = ReceiptBook(clock, nonce=7)
    clock.advance(5)
    later = ReceiptBook(clock, nonce=7)
    assert later.lookup(rid(earlier.issue("a", "s", "t")), "a", "s").state is S.RESTART_LOST


def test_expired_receipt_stays_its_owners() -> None:
    clock = ManualClock()
    book = ReceiptBook(clock)
    mine = rid(book.issue("a", "s", "t"))
    book.settle(mine, S.APPLIED)
    clock.advance(301)
    assert book.lookup(mine, "a", "s").state is S.EXPIRED
    assert book.lookup(mine, "b", "s").state is S.FORBIDDEN
    assert book.lookup(mine, "a", "other").state is S.FORBIDDEN
    assert book.wait(mine, "b", "s", 50).state is S.FORBIDDEN


def test_expired_receipt_whose_owner_was_forgotten_asks_the_intent() -> None:
    owners: dict[str, tuple[str, str]] = {}

    def hook(receipt_id: str, agent_id: str, session: str) -> Any:
        if receipt_id not in owners:
            return None
        if owners[receipt_id] != (agent_id, session):
            return (S.FORBIDDEN, "", {})
        return (S.APPLIED_AFTER_RESTART, "applied", {})

    clock = ManualClock()
    book = ReceiptBook(clock, foreign_lookup=hook)
    first = rid(book.issue("a", "s", "t"))
    owners[first] = ("a", "s")
    book.settle(first, S.APPLIED)
    clock.advance(301)
    book._evicted.clear()  # as if more than EVICTED_OWNERS_MAX had been let go since
    assert book.lookup(first, "b", "s").state is S.FORBIDDEN
    assert book.lookup(first, "a", "s").state is S.EXPIRED


class ReplayingStore:
    """Stands in for the durable intents: pending until the test applies one."""

    def __init__(self) -> None:
        self.applied: set[str] = set()
        self.asked = 0

    def hook(self, receipt_id: str, agent_id: str, session: str) -> Any:
        self.asked += 1
        if receipt_id in self.applied:
            return (S.APPLIED_AFTER_RESTART, "derived 1 concept(s)", {})
        return (S.PENDING_REPLAY, "", {})


def waiting_on_a_replay() -> tuple[
    ReplayingStore, ReceiptBook, str, list[ReceiptView], threading.Thread
]:
    """A wait (in a thread, started) on an earlier server's receipt the store has pending."""
    store = ReplayingStore()
    old = rid(ReceiptBook(nonce=1).issue("a", "s", "t"))
    book = ReceiptBook(nonce=2, foreign_lookup=store.hook)
    got: list[ReceiptView] = []
    waiter = threading.Thread(target=lambda: got.append(book.wait(old, "a", "s", WAIT_MS_MAX)))
    waiter.start()
    return store, book, old, got, waiter


def test_wait_on_pending_replay_wakes_when_the_replay_settles() -> None:
    store, book, old, got, waiter = waiting_on_a_replay()
    eventually(lambda: store.asked >= 1 and book.stats().waits == 1)
    book.replay_settled()  # another intent settled: still pending, the wait goes on
    eventually(lambda: store.asked >= 2)
    assert not got
    store.applied.add(old)
    book.replay_settled()
    waiter.join(DEADLINE_S)
    assert [v.state for v in got] == [S.APPLIED_AFTER_RESTART]
    assert book.stats().waits == 0


def test_wait_on_pending_replay_ends_pending_replay_when_time_is_up() -> None:
    store = ReplayingStore()
    old = rid(ReceiptBook(nonce=1).issue("a", "s", "t"))
    book = ReceiptBook(nonce=2, foreign_lookup=store.hook)
    assert book.wait(old, "a", "s", 20).state is S.PENDING_REPLAY
    assert book.lookup(old, "a", "s").state is S.PENDING_REPLAY
    assert book.stats().waits == 0


def test_wait_async_on_pending_replay_and_its_cancel_frees_the_slots() -> None:
    store = ReplayingStore()
    old = rid(ReceiptBook(nonce=1).issue("a", "s", "t"))
    book = ReceiptBook(nonce=2, foreign_lookup=store.hook)

    async def main() -> None:
        with anyio.move_on_after(0.2):
            await book.wait_async(old, "a", "s", WAIT_MS_MAX)
        eventually(lambda: book.stats().waits == 0)
        async with anyio.create_task_group() as tg:
            answers: list[ReceiptView] = []

            async def wait() -> None:
                answers.append(await book.wait_async(old, "a", "s", WAIT_MS_MAX))

            tg.start_soon(wait)
            while store.asked < 2:
                await anyio.sleep(0.001)
            store.applied.add(old)
            book.replay_settled()
        assert [v.state for v in answers] == [S.APPLIED_AFTER_RESTART]

    anyio.run(main)
    assert book.stats().waits == 0


def test_waits_on_pending_replay_count_against_the_bounds() -> None:
    store = ReplayingStore()
    earlier = ReceiptBook(nonce=1)
    old = [rid(earlier.issue(f"agent-{i % 2}", "s", "t")) for i in range(SERVER_WAIT_BOUND + 1)]
    book = ReceiptBook(nonce=2, foreign_lookup=store.hook)
    threads = [
        threading.Thread(target=book.wait, args=(old[i], f"agent-{i % 2}", "s", WAIT_MS_MAX))
        for i in range(SERVER_WAIT_BOUND)
    ]
    for t in threads:
        t.start()
    eventually(lambda: book.stats().waits == SERVER_WAIT_BOUND)
    # over the server's bound: answered at once with the current state
    assert book.wait(old[-1], "agent-0", "s", WAIT_MS_MAX).state is S.PENDING_REPLAY
    store.applied.update(old)
    book.replay_settled()
    for t in threads:
        t.join(DEADLINE_S)
    assert book.stats().waits == 0


# ----------------------------------------------------------------- waits


class RecordingBook(ReceiptBook):
    """Records the timeout each blocking wait was given instead of sleeping."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list[float] = []

    def _block_locked(self, ticket: Any) -> None:
        self.timeouts.append(ticket.timeout_s)


class BlockingRecordingBook(ReceiptBook):
    """Records the receipt and timeout of each blocking wait, then really blocks."""

    def __init__(self) -> None:
        super().__init__()
        self.blocked: list[tuple[str, float]] = []  # appended under the book's lock

    def _block_locked(self, ticket: Any) -> None:
        self.blocked.append((ticket.entry.receipt_id, ticket.timeout_s))
        super()._block_locked(ticket)

    def blocked_on(self, receipt_id: str) -> bool:
        return any(blocked == receipt_id for blocked, _ in list(self.blocked))


def test_clamp_wait_ms() -> None:
    assert clamp_wait_ms(-5) == 0
    assert clamp_wait_ms(0) == 0
    assert clamp_wait_ms(1500) == 1500
    assert clamp_wait_ms(WAIT_MS_MAX) == 34_000
    assert clamp_wait_ms(34_001) == 34_000
    assert clamp_wait_ms(10**12) == 34_000


def test_wait_applies_the_clamp() -> None:
    book = RecordingBook()
    view = book.issue("a", "s", "t")
    assert book.wait(rid(view), "a", "s", 10**9).state is S.PENDING
    assert book.wait(rid(view), "a", "s", 250).state is S.PENDING
    # zero and negative never block
    assert book.wait(rid(view), "a", "s", 0).state is S.PENDING
    assert book.wait(rid(view), "a", "s", -1).state is S.PENDING
    assert book.timeouts == [34.0, 0.25]
    assert book.stats().waits == 0


def test_wait_returns_as_soon_as_another_thread_settles() -> None:
    book = ReceiptBook()
    view = book.issue("a", "s", "t")
    result: list[ReceiptView] = []
    waiter = threading.Thread(target=lambda: result.append(book.wait(rid(view), "a", "s", 34_000)))
    started = time.monotonic()
    waiter.start()
    eventually(lambda: book.stats().waits == 1)
    settler = threading.Thread(target=book.settle, args=(rid(view), S.APPLIED, "derived"))
    settler.start()
    waiter.join(DEADLINE_S)
    settler.join(DEADLINE_S)
    assert not waiter.is_alive()
    assert time.monotonic() - started < DEADLINE_S
    assert result[0].state is S.APPLIED and result[0].detail == "derived"
    assert book.stats().waits == 0
    # the wait was the owner's read: nothing left to piggyback
    assert book.take_piggyback("a", "s") == []


def test_wait_on_settled_receipt_answers_at_once() -> None:
    book = RecordingBook()
    view = book.issue("a", "s", "t")
    book.settle(rid(view), S.FAILED)
    assert book.wait(rid(view), "a", "s", 34_000).state is S.FAILED
    assert book.timeouts == []


def test_wait_times_out_pending() -> None:
    book = BlockingRecordingBook()
    view = book.issue("a", "s", "t")
    answer = book.wait(rid(view), "a", "s", 60)
    assert answer.state is S.PENDING
    assert answer.detail == DEFAULT_DETAILS[S.PENDING]
    # it blocked once, for its 60 ms, and nothing settled it: it timed out
    assert book.blocked == [(rid(view), 0.06)]
    assert book.stats().waits == 0


def _start_waiters(
    book: ReceiptBook, agents: list[str]
) -> tuple[list[threading.Thread], list[str]]:
    threads, ids = [], []
    for agent in agents:
        receipt = rid(book.issue(agent, "s", "t"))
        ids.append(receipt)
        thread = threading.Thread(target=book.wait, args=(receipt, agent, "s", 34_000))
        thread.start()
        threads.append(thread)
    return threads, ids


def _settle_and_join(book: ReceiptBook, threads: list[threading.Thread], ids: list[str]) -> None:
    for receipt in ids:
        book.settle(receipt, S.APPLIED)
    for thread in threads:
        thread.join(DEADLINE_S)
        assert not thread.is_alive()


def test_seventeenth_concurrent_wait_answers_at_once() -> None:
    book = BlockingRecordingBook()
    agents = [f"agent-{i % 4}" for i in range(SERVER_WAIT_BOUND)]  # 4 each, under 8
    threads, ids = _start_waiters(book, agents)
    try:
        eventually(lambda: book.stats().waits == SERVER_WAIT_BOUND)
        extra = book.issue("agent-x", "s", "t")
        answer = book.wait(rid(extra), "agent-x", "s", 34_000)
        assert not book.blocked_on(rid(extra))  # answered at once
        assert answer.state is S.PENDING
        assert "this server already holds 16 waits" in answer.detail
    finally:
        _settle_and_join(book, threads, ids)
    assert book.stats().waits == 0


def test_ninth_wait_per_agent_answers_at_once() -> None:
    book = BlockingRecordingBook()
    threads, ids = _start_waiters(book, ["a"] * AGENT_WAIT_BOUND)
    try:
        eventually(lambda: book.stats().waits == AGENT_WAIT_BOUND)
        extra = book.issue("a", "s", "t")
        answer = book.wait(rid(extra), "a", "s", 34_000)
        assert not book.blocked_on(rid(extra))  # answered at once
        assert answer.state is S.PENDING
        assert "your agent_id already holds 8 waits" in answer.detail
        # another agent still has room on the server
        other = book.issue("b", "s", "t")
        assert book.wait(rid(other), "b", "s", 20).state is S.PENDING
    finally:
        _settle_and_join(book, threads, ids)


def test_wait_async_wakes_on_settle() -> None:
    book = ReceiptBook()
    view = book.issue("a", "s", "t")

    async def main() -> ReceiptView:
        async def settle_later() -> None:
            await anyio.to_thread.run_sync(lambda: eventually(lambda: book.stats().waits == 1))
            book.settle(rid(view), S.APPLIED, "derived")

        async with anyio.create_task_group() as group:
            group.start_soon(settle_later)
            with anyio.fail_after(DEADLINE_S):
                answer = await book.wait_async(rid(view), "a", "s", 34_000)
        return answer

    assert anyio.run(main).state is S.APPLIED
    assert book.stats().waits == 0


def test_wait_async_cancel_releases_the_slots() -> None:
    book = ReceiptBook()
    view = book.issue("a", "s", "t")

    async def main() -> None:
        with anyio.move_on_after(0.05):
            await book.wait_async(rid(view), "a", "s", 34_000)
        assert book.stats().waits == 0

    anyio.run(main)
    # the slot is free again: a fresh wait on the same receipt blocks and times out
    assert book.wait(rid(view), "a", "s", 10).state is S.PENDING


def test_abandoned_wait_does_not_consume_the_piggyback() -> None:
    book = ReceiptBook()
    view = book.issue("a", "s", "t")
    begun = book._begin_wait(rid(view), "a", "s", 34_000)
    assert isinstance(begun, WaitTicket)
    book.settle(rid(view), S.APPLIED)
    book._abandon_wait(begun)  # the caller was cancelled before the thread ran
    assert book._finish_wait(begun).state is S.APPLIED
    assert book.stats().waits == 0
    assert [v.receipt_id for v in book.take_piggyback("a", "s")] == [rid(view)]


def test_wait_async_answers_at_once_when_over_the_bound() -> None:
    book = ReceiptBook()
    threads, ids = _start_waiters(book, ["a"] * AGENT_WAIT_BOUND)
    try:
        eventually(lambda: book.stats().waits == AGENT_WAIT_BOUND)
        extra = book.issue("a", "s", "t")

        async def main() -> ReceiptView:
            with anyio.fail_after(1.0):
                return await book.wait_async(rid(extra), "a", "s", 34_000)

        assert "not waited" in anyio.run(main).detail
    finally:
        _settle_and_join(book, threads, ids)


# ----------------------------------------------------------- concurrency


def test_concurrent_issue_and_settle_keep_counters_consistent() -> None:
    book = ReceiptBook()
    per_thread = 400
    barrier = threading.Barrier(8)
    kept_pending: list[list[str]] = [[] for _ in range(8)]

    def work(n: int) -> None:
        barrier.wait(DEADLINE_S)
        agent = f"agent-{n % 2}"  # four threads per agent so the lane bound is hit
        for i in range(per_thread):
            view = book.issue(agent, f"s{n}", "t")
            if view.state is S.DROPPED:
                continue
            if i % 5 == 0:
                kept_pending[n].append(rid(view))
            else:
                book.settle(rid(view), S.APPLIED if i % 2 else S.FAILED)
            book.take_piggyback(agent, f"s{n}")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE_S * 3)
        assert not thread.is_alive()

    stats = book.stats()
    pending = sum(len(ids) for ids in kept_pending)
    assert stats.accepted + stats.dropped == 8 * per_thread
    assert stats.outstanding == pending
    assert stats.accepted == stats.applied + stats.failed + stats.outstanding
    assert stats.outstanding <= 2 * LANE_BOUND
    for n, ids in enumerate(kept_pending):
        for receipt in ids:
            assert book.settle(receipt, S.APPLIED)
        assert all(v.state is S.APPLIED for v in book.take_piggyback(f"agent-{n % 2}", f"s{n}"))
    assert book.stats().outstanding == 0


# ------------------------------------------------------------- rendering


def test_render_line_matches_the_spec_ack() -> None:
    view = ReceiptView(
        "lwr1.708217ebbf356946.1a01fa59db7.15", S.PENDING, DEFAULT_DETAILS[S.PENDING]
    )
    assert render_line(view) == (
        "receipt lwr1.708217ebbf356946.1a01fa59db7.15: pending — admitted, not yet applied; "
        "ask again"
    )


def test_render_piggyback_block() -> None:
    views = [
        ReceiptView("lwr1.0000000000000001.1.1", S.APPLIED, "derived 2 concept(s)\ncandidate x"),
        ReceiptView("lwr1.0000000000000001.1.2", S.DROPPED, "nothing was written: full"),
    ]
    assert render_piggyback(views) == (
        "write receipts:\n"
        "receipt lwr1.0000000000000001.1.1: applied — derived 2 concept(s)\n"
        "  candidate x\n"
        "receipt lwr1.0000000000000001.1.2: dropped — nothing was written: full"
    )
    assert render_piggyback([]) == ""


def test_to_structured_keeps_its_own_keys() -> None:
    view = ReceiptView(
        "lwr1.0000000000000001.1.1",
        S.APPLIED,
        "derived",
        {"created": ["n"], "created_count": 1, "state": "bogus", "receipt": "bogus"},
    )
    assert to_structured(view) == {
        "receipt": "lwr1.0000000000000001.1.1",
        "state": "applied",
        "detail": "derived",
        "created": ["n"],
        "created_count": 1,
    }


def test_every_state_has_a_readable_default_detail() -> None:
    assert set(DEFAULT_DETAILS) == set(ReceiptState)
    assert len(ReceiptState) == 12
    for state, detail in DEFAULT_DETAILS.items():
        assert detail and "\n" not in detail, state


def test_write_queue_keys() -> None:
    book = ReceiptBook()
    book.issue("a", "s", "t")
    keys = book.stats().write_queue_keys()
    assert keys["write_queue_bound"] == 1024
    assert keys["write_queue_lane_bound"] == 64
    assert keys["write_queue_outstanding"] == 1
    assert keys["receipts_retained"] == 1


def test_a_closing_server_answers_a_wait_on_pending_replay_at_once() -> None:
    _, book, _, got, waiter = waiting_on_a_replay()
    eventually(lambda: book.stats().waits == 1)
    book.close()  # the stop: no replay of this server will settle it now
    waiter.join(DEADLINE_S)
    assert not waiter.is_alive()
    assert [v.state for v in got] == [S.PENDING_REPLAY]
    assert book.stats().waits == 0
