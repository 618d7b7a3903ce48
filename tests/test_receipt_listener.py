"""The settle listener of a receipt book: each write's outcome told once, in every state it
can end in, on the settling thread, and never a fault of the write (serve --ledger's
completion lines hear it). The book alone, then a real pipeline on MemoryStore and SQLite
without a model (the keyword-only path)."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from lambo_core.clock import ManualClock
from lambo_core.ledger_lines import completion_line
from lambo_core.ledger_writer import LedgerWriter
from lambo_core.model import WriteIntent
from lambo_core.receipts import (
    DEFAULT_DETAILS,
    ReceiptBook,
    ReceiptState,
    SettledReceipt,
    to_structured,
)
from lambo_core.serve_ledger import record_completions
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import MemoryStore, SqliteStore
from lambo_core.writes import WritePipeline

S = ReceiptState
KEYWORDS_ONLY = EmbedderPlan(lazy=None, contract=None)


class Heard:
    """A listener that keeps what it hears, and the thread it heard it on."""

    def __init__(self) -> None:
        self.told: list[SettledReceipt] = []
        self.threads: list[str] = []
        self.lock = threading.Lock()
        self.any = threading.Condition(self.lock)

    def __call__(self, settled: SettledReceipt) -> None:
        with self.any:
            self.told.append(settled)
            self.threads.append(threading.current_thread().name)
            self.any.notify_all()

    def states(self) -> list[ReceiptState]:
        with self.lock:
            return [t.view.state for t in self.told]


def rid(view: Any) -> str:
    assert view.receipt_id is not None
    return str(view.receipt_id)


def test_each_settle_state_is_told_once_with_its_owner() -> None:
    book = ReceiptBook(ManualClock())
    heard = Heard()
    book.listen(heard)
    for state in (S.APPLIED, S.FAILED, S.INTENT_DURABLE, S.CLOSE_UNFLUSHED):
        receipt = book.issue("agent-a", "s", "lambo_derive")
        assert book.settle(rid(receipt), state, "why", {"created_count": 1})
        assert not book.settle(rid(receipt), S.APPLIED)  # refused: not told again
    assert heard.states() == [S.APPLIED, S.FAILED, S.INTENT_DURABLE, S.CLOSE_UNFLUSHED]
    first = heard.told[0]
    assert (first.agent_id, first.session, first.tool) == ("agent-a", "s", "lambo_derive")
    assert first.view.detail == "why" and first.view.data == {"created_count": 1}


def test_a_pending_receipt_is_not_told_and_a_withdrawn_one_never() -> None:
    book = ReceiptBook(ManualClock())
    heard = Heard()
    book.listen(heard)
    receipt = book.issue("agent-a", "s", "lambo_record_action")
    assert heard.told == []
    assert book.withdraw(rid(receipt))  # its ack never went out: no write to tell of
    assert heard.told == []


def test_a_dropped_write_is_told_at_its_ack() -> None:
    book = ReceiptBook(ManualClock(), lane_bound=1)
    heard = Heard()
    book.listen(heard)
    book.issue("agent-a", "s", "lambo_derive")
    dropped = book.issue("agent-a", "s", "lambo_derive")
    assert dropped.state is S.DROPPED
    assert heard.states() == [S.DROPPED]
    assert heard.told[0].view.receipt_id == dropped.receipt_id


def test_a_retried_flush_tells_the_close_outcome_it_corrects() -> None:
    book = ReceiptBook(ManualClock())
    heard = Heard()
    book.listen(heard)
    receipt = book.issue("agent-a", "s", "lambo_derive")
    assert book.settle(rid(receipt), S.CLOSE_UNFLUSHED)
    assert book.settle(rid(receipt), S.INTENT_DURABLE)
    assert book.settle(rid(receipt), S.INTENT_DURABLE)  # the same outcome again: not retold
    assert heard.states() == [S.CLOSE_UNFLUSHED, S.INTENT_DURABLE]


def test_a_recovered_receipt_is_told_what_its_intent_keeps() -> None:
    book = ReceiptBook(ManualClock())
    heard = Heard()
    book.listen(heard)
    intent = WriteIntent("lwr1.x", "s", "agent-a", "lambo_derive", {}, 0.0, via="p")
    book.recovered(intent, S.APPLIED_AFTER_RESTART, {"data": {"created_count": 2}})
    assert heard.states() == [S.APPLIED_AFTER_RESTART]
    told = heard.told[0]
    assert told.session == "p"  # the session it was submitted through, as its receipt
    assert told.view.detail == DEFAULT_DETAILS[S.APPLIED_AFTER_RESTART]  # none kept
    assert told.view.data == {"created_count": 2}
    with pytest.raises(ValueError, match="cannot settle as applied"):
        book.recovered(intent, S.APPLIED, {"detail": "x"})


def test_a_listener_that_raises_fails_nothing(caplog: pytest.LogCaptureFixture) -> None:
    book = ReceiptBook(ManualClock())

    def broken(settled: SettledReceipt) -> None:
        raise RuntimeError("the listener broke")

    book.listen(broken)
    receipt = book.issue("agent-a", "s", "lambo_derive")
    with caplog.at_level(logging.ERROR, logger="lambo_core.receipts.ledger"):
        assert book.settle(rid(receipt), S.APPLIED)
    assert book.lookup(rid(receipt), "agent-a", "s").state is S.APPLIED
    assert "the settle listener failed" in caplog.text
    book.listen(None)  # and no listener: nothing is told, nothing fails
    other = book.issue("agent-a", "s", "lambo_derive")
    assert book.settle(rid(other), S.FAILED)


def derive(p: WritePipeline, content: str, agent: str = "agent-a") -> str:
    ack = p.submit(
        "lambo_derive",
        {"agent_id": agent, "concepts": [{"content": content, "concept_type": "logic"}]},
    )
    return str(ack.structured["receipt"])


def settled(p: WritePipeline, receipt: str, agent: str = "agent-a") -> Any:
    view = p.session.receipts.wait(receipt, agent, p.session.name, 30_000)
    assert view.state is not S.PENDING
    return view


def listened(store: Any, heard: Heard, *, start: bool = True) -> WritePipeline:
    session = Session.open(store, "s", KEYWORDS_ONLY)
    session.receipts.listen(heard)  # before the start: replays are told too
    pipeline = WritePipeline(session)
    return pipeline.start() if start else pipeline


def test_the_apply_worker_tells_each_applied_write_once_with_its_counts() -> None:
    heard = Heard()
    p = listened(MemoryStore(), heard)
    try:
        receipts = [derive(p, f"fact number {i}") for i in range(5)]
        receipts.append(derive(p, "fact number 0", agent="agent-b"))  # matched, not created
        views = [settled(p, r, "agent-b" if i == 5 else "agent-a") for i, r in enumerate(receipts)]
    finally:
        p.close()
    assert [t.view.receipt_id for t in heard.told] == receipts
    assert heard.states() == [S.APPLIED] * 6
    assert set(heard.threads) == {"lambo-apply-s"}
    for told, view in zip(heard.told, views, strict=True):
        line = completion_line(
            session=told.session,
            tool=told.tool,
            agent_id=told.agent_id,
            receipt=to_structured(told.view),
            at=0.0,
        )
        for key in ("created_count", "matched_count", "semantic_merged", "edges", "embedded"):
            assert line[key] == view.data[key]
    assert heard.told[5].agent_id == "agent-b" and heard.told[5].view.data["matched_count"] == 1


def test_a_write_failed_on_apply_is_told_failed() -> None:
    heard = Heard()
    p = listened(MemoryStore(), heard)
    try:
        ruling = settled(p, derive(p, "the old ruling"))
        cited = ruling.data["created"][0]
        with p.session.index.lock:  # the cited concept goes before the worker reaches it
            ack = p.submit(
                "lambo_derive",
                {
                    "agent_id": "agent-a",
                    "concepts": [
                        {"content": "a decision", "concept_type": "logic", "depends_on": [cited]}
                    ],
                },
            )
            p.session.store.delete_concepts("s", [cited])
            p.session.index.remove_concepts([cited])
        assert settled(p, str(ack.structured["receipt"])).state is S.FAILED
    finally:
        p.close()
    assert heard.states() == [S.APPLIED, S.FAILED]


def test_a_stop_tells_what_it_hands_on_and_the_next_server_tells_the_replays(
    tmp_path: Path,
) -> None:
    path = tmp_path / "r.db"
    heard = Heard()
    p = listened(SqliteStore(path), heard, start=False)  # its worker never applies them
    receipts = [derive(p, f"fact number {i}") for i in range(3)]
    p.close(2.0)
    assert heard.states() == [S.INTENT_DURABLE] * 3
    assert [t.view.receipt_id for t in heard.told] == receipts
    p.session.store.close()

    again = Heard()
    p2 = listened(SqliteStore(path), again)
    try:
        assert p2.wait_idle(60) and p2.replayed == 3
    finally:
        p2.close()
    assert [t.view.receipt_id for t in again.told] == receipts
    assert again.states() == [S.APPLIED_AFTER_RESTART] * 3
    for told in again.told:
        assert (told.agent_id, told.session, told.tool) == ("agent-a", "s", "lambo_derive")
        # what the intent keeps: the summary line and the counts
        assert told.view.detail.startswith("derived 1 concept(s): 1 created")
        assert told.view.data["created_count"] == 1


def test_a_closed_ledger_drops_the_completion_line_and_the_settle_goes_on(
    tmp_path: Path,
) -> None:
    ledger = LedgerWriter(tmp_path / "l.jsonl").start()
    book = ReceiptBook(ManualClock())
    book.listen(record_completions(ledger))
    first = book.issue("agent-a", "s", "lambo_derive")
    assert book.settle(rid(first), S.APPLIED, "ok", {"created_count": 1, "created": ["x"]})
    assert ledger.flushed(10.0)
    ledger.close()
    late = book.issue("agent-a", "s", "lambo_derive")
    assert book.settle(rid(late), S.FAILED, "no")  # after the close: dropped, not raised
    (line,) = [json.loads(x) for x in (tmp_path / "l.jsonl").read_text().splitlines()]
    assert (line["kind"], line["receipt"], line["state"]) == ("completion", rid(first), "applied")
    assert line["created_count"] == 1 and "created" not in line  # counts, never ids
    counts = ledger.counts("s")
    assert (counts.written, counts.dropped_write_failed) == (1, 1)
