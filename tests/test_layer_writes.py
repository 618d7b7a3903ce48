"""Writes into a layer through the project's session: the receipt is the project's to be
told, the intent records that destination across a restart, the ack names the layer.

Real SQLite files, one store holding the project ("lambo") and its layer ("general"), as a
layered serve opens them; the layer's pipeline is what the project's routing calls.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lambo_core.errors import StoreError
from lambo_core.model import IntentState
from lambo_core.receipts import ReceiptState
from lambo_core.receipts.intents import FORBIDDEN_DETAIL
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import MemoryStore, SqliteStore
from lambo_core.store.migrations import migrate
from lambo_core.writes import WritePipeline
from lambo_core.writes import admit as admit_module

PLAN = EmbedderPlan(lazy=None, contract=None)
S = ReceiptState
WAIT_MS = 30_000
LAYER_LINE = (
    "written to session 'general'; writes to different sessions have no ordering between them"
)


def open_pipeline(store: Any, name: str, *, start: bool = True) -> WritePipeline:
    p = WritePipeline(Session.open(store, name, PLAN))
    return p.start() if start else p


@pytest.fixture
def general(tmp_path: Path) -> Iterator[WritePipeline]:
    p = open_pipeline(SqliteStore(tmp_path / "l.db"), "general")
    p.session.mark_shared_layer()
    yield p
    p.close()
    p.session.store.close()


def derive_args(content: str, agent: str = "agent-a") -> dict[str, Any]:
    return {"agent_id": agent, "concepts": [{"content": content, "concept_type": "logic"}]}


def test_a_layer_write_acks_with_the_spec_line_last_and_session_structured(
    general: WritePipeline,
) -> None:
    ack = general.submit("lambo_derive", derive_args("prefers tabs"), via="lambo")
    rid = ack.structured["receipt"]
    assert ack.text.splitlines() == [
        "accepted 1 concept(s) for background write; validated and ordered, not yet applied",
        f"receipt {rid}: pending — admitted, not yet applied; ask again",
        "The outcome arrives on your next tool response. To wait for it, call lambo_stats "
        f"with receipt={rid} (add wait_ms to block).",
        'Recorded under agent_id "agent-a"; send this same id on every call.',
        LAYER_LINE,
    ]
    assert ack.structured == {
        "summary": "accepted 1 concept(s) for background write; validated and ordered, "
        "not yet applied",
        "receipt": rid,
        "receipt_state": "pending",
        "agent_id": "agent-a",
        "warnings": [],
        "session": "general",
    }


def test_an_action_into_a_layer_acks_the_same_way(general: WritePipeline) -> None:
    ack = general.submit(
        "lambo_record_action", {"agent_id": "agent-a", "action": "ran the linter"}, via="lambo"
    )
    assert ack.text.splitlines()[-1] == LAYER_LINE
    assert ack.structured["session"] == "general"


@pytest.mark.parametrize("via", [None, "general"])
def test_an_unscoped_or_self_addressed_write_acks_exactly_as_before(
    general: WritePipeline, via: str | None
) -> None:
    ack = general.submit("lambo_derive", derive_args("prefers spaces"), via=via)
    assert len(ack.text.splitlines()) == 4
    assert ack.text.splitlines()[-1].startswith('Recorded under agent_id "agent-a"')
    assert "session" not in ack.structured
    view = general.session.receipts.wait(ack.structured["receipt"], "agent-a", "general", WAIT_MS)
    assert view.state is S.APPLIED  # its own session's receipt, as always
    intent = general.session.store.get_intent(ack.structured["receipt"])
    assert intent is not None and intent.via == "general"  # the destination, always recorded


def test_a_dropped_layer_write_names_the_layer_but_claims_no_write(
    general: WritePipeline,
) -> None:
    general.session.receipts.close()
    ack = general.submit("lambo_derive", derive_args("late"), via="lambo")
    assert ack.structured["receipt_state"] == "dropped"
    assert ack.structured["session"] == "general"
    assert LAYER_LINE not in ack.text
    assert "nothing was written: the session is shutting down" in ack.text


def test_a_layer_closing_after_admission_warns_not_to_resend(
    general: WritePipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = general.session.store
    add_intent = store.add_intent

    def add_then_close(intent: Any) -> Any:
        stored = add_intent(intent)
        general.session.receipts.close()  # the layer starts its stop right after admission
        return stored

    monkeypatch.setattr(store, "add_intent", add_then_close)
    ack = general.submit("lambo_derive", derive_args("acked then closed"), via="lambo")
    rid = ack.structured["receipt"]
    warning = (
        "layer general closed after this write was admitted; it will still be applied: do not "
        f"send it again, ask lambo_stats with receipt={rid}"
    )
    assert ack.structured["warnings"] == [warning]
    assert ack.text.splitlines()[-2:] == [f"warning: {warning}", LAYER_LINE]


def test_an_unscoped_write_during_a_close_gets_no_layer_warning(
    general: WritePipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = general.session.store
    add_intent = store.add_intent

    def add_then_close(intent: Any) -> Any:
        stored = add_intent(intent)
        general.session.receipts.close()
        return stored

    monkeypatch.setattr(store, "add_intent", add_then_close)
    ack = general.submit("lambo_derive", derive_args("own address"))
    assert ack.structured["warnings"] == []


def test_its_receipt_is_told_only_through_the_session_written_through(
    general: WritePipeline,
) -> None:
    ack = general.submit("lambo_derive", derive_args("prefers tabs"), via="lambo")
    rid = ack.structured["receipt"]
    book = general.session.receipts
    view = book.wait(rid, "agent-a", "lambo", WAIT_MS)
    assert view.state is S.APPLIED
    # Settled and not yet seen: the layer's own address and another project are refused
    # and consume nothing; the project's next response carries it once.
    second = general.submit("lambo_derive", derive_args("prefers vim"), via="lambo")
    rid2 = second.structured["receipt"]
    assert general.wait_idle(30)
    for asker in ("general", "other-project"):
        refused = book.lookup(rid2, "agent-a", asker)
        assert refused.state is S.FORBIDDEN
        assert book.take_piggyback("agent-a", asker) == []
    assert book.lookup(rid2, "agent-b", "lambo").state is S.FORBIDDEN  # another agent
    carried = book.take_piggyback("agent-a", "lambo")
    assert [v.receipt_id for v in carried] == [rid2]
    assert carried[0].state is S.APPLIED


def test_the_intent_records_the_session_written_through(general: WritePipeline) -> None:
    ack = general.submit("lambo_derive", derive_args("prefers tabs"), via="lambo")
    intent = general.session.store.get_intent(ack.structured["receipt"])
    assert intent is not None
    assert (intent.session, intent.via, intent.destination) == ("general", "lambo", "lambo")


def test_after_a_restart_the_layer_receipt_answers_only_through_its_destination(
    tmp_path: Path,
) -> None:
    path = tmp_path / "r.db"
    first = open_pipeline(SqliteStore(path), "general")
    applied = first.submit("lambo_derive", derive_args("prefers tabs"), via="lambo")
    assert first.wait_idle(30)
    first.close()
    first.session.store.close()
    # A second write acked but never applied: the stop hands it on as a durable intent.
    held = open_pipeline(SqliteStore(path), "general", start=False)
    owed = held.submit("lambo_derive", derive_args("prefers vim"), via="lambo")
    held.session.store.close()

    nxt = open_pipeline(SqliteStore(path), "general")
    try:
        book = nxt.session.receipts
        for ack, state in ((applied, S.APPLIED_AFTER_RESTART), (owed, S.APPLIED_AFTER_RESTART)):
            rid = ack.structured["receipt"]
            assert not book.issued_here(rid)  # an earlier process's id: the intent answers
            assert book.wait(rid, "agent-a", "lambo", WAIT_MS).state is state
            own = book.lookup(rid, "agent-a", "general")
            assert (own.state, own.detail) == (S.FORBIDDEN, FORBIDDEN_DETAIL)
            assert book.lookup(rid, "agent-a", "other").state is S.FORBIDDEN
        contents = sorted(c.content for c in nxt.session.store.concepts("general"))
        assert contents == ["prefers tabs", "prefers vim"]
        # The project shares the store: its own book, asked by the project, reads the
        # layer's intent too (a serve routes an id no serving book issued there).
        project = Session.open(nxt.session.store, "lambo", PLAN)
        rid = applied.structured["receipt"]
        assert project.receipts.lookup(rid, "agent-a", "lambo").state is S.APPLIED_AFTER_RESTART
    finally:
        nxt.close()
        nxt.session.store.close()


LEGACY_PAYLOAD = (
    '{"kind": "derive", "event_time": null, "parent_of": [], "concepts": [{"content": '
    '"legacy fact", "key": "legacy fact", "type": "logic", "depends_on": [], "against": []}]}'
)


def old_store_with_intent(path: Path, state: str, outcome: str | None) -> None:
    """A file as the build before layers left it (schema 5), holding one intent of 's'."""
    conn = sqlite3.connect(path, isolation_level=None)
    assert migrate(conn, upto=5) == [1, 2, 3, 4, 5]
    conn.execute("INSERT INTO sessions(name, created_at) VALUES ('s', 0)")
    conn.execute(
        "INSERT INTO write_intents(receipt_id, session, agent_id, tool, payload, created_at, "
        "state, outcome) VALUES ('lwr1.00000000000000aa.1.1', 's', 'agent-a', 'lambo_derive', "
        "?, 0, ?, ?)",
        (LEGACY_PAYLOAD, state, outcome),
    )
    conn.close()


def test_an_old_intent_without_a_destination_answers_as_before_at_its_own_session(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    old_store_with_intent(path, "applied", '{"detail": "derived 1 concept(s)", "data": {}}')
    store = SqliteStore(path)
    try:
        intent = store.get_intent("lwr1.00000000000000aa.1.1")
        assert intent is not None and intent.via is None and intent.destination == "s"
        session = Session.open(store, "s", PLAN)
        rid = "lwr1.00000000000000aa.1.1"
        view = session.receipts.lookup(rid, "agent-a", "s")
        assert (view.state, view.detail) == (S.APPLIED_AFTER_RESTART, "derived 1 concept(s)")
        # Through another session the server cannot tell it was that session's write.
        through = session.receipts.lookup(rid, "agent-a", "lambo")
        assert through.state is S.FORBIDDEN
        assert through.detail == (
            "this receipt's durable intent records no session it was submitted through, so it "
            "is answered only by its own session 's', never through another; use recall to "
            "inspect the current graph"
        )
        assert session.receipts.lookup(rid, "agent-b", "s").detail == FORBIDDEN_DETAIL
    finally:
        store.close()


def test_an_old_pending_intent_is_replayed_and_answered_at_its_own_session(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    old_store_with_intent(path, "pending", None)
    p = open_pipeline(SqliteStore(path), "s")
    try:
        rid = "lwr1.00000000000000aa.1.1"
        view = p.session.receipts.wait(rid, "agent-a", "s", WAIT_MS)
        assert view.state is S.APPLIED_AFTER_RESTART, view
        assert [c.content for c in p.session.store.concepts("s")] == ["legacy fact"]
        stored = p.session.store.get_intent(rid)
        assert stored is not None and stored.state is not IntentState.PENDING
        assert p.session.receipts.lookup(rid, "agent-a", "lambo").state is S.FORBIDDEN
    finally:
        p.close()
        p.session.store.close()


def test_migrating_an_old_file_adds_the_columns_with_their_defaults(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old_store_with_intent(path, "pending", None)
    store = SqliteStore(path)
    try:
        assert store.migrations_applied == [6, 7, 8, 9]
        record = store.get_session("s")
        assert record is not None and record.shared_layer is False
        intent = store.get_intent("lwr1.00000000000000aa.1.1")
        assert intent is not None and intent.via is None
    finally:
        store.close()


# --- the shared-layer flag ---------------------------------------------------------------


def test_the_shared_layer_flag_persists_across_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "f.db"
    store = SqliteStore(path)
    session = Session.open(store, "general", PLAN)
    other = Session.open(store, "lambo", PLAN)
    assert session.shared_layer is False
    session.mark_shared_layer()
    session.mark_shared_layer()  # idempotent
    assert session.shared_layer is True
    store.close()
    again = SqliteStore(path)
    try:
        assert Session.open(again, "general", PLAN).shared_layer is True
        assert Session.open(again, "lambo", PLAN).shared_layer is False
        assert other.shared_layer is False
    finally:
        again.close()


def test_the_memory_store_keeps_the_flag_too() -> None:
    store = MemoryStore()
    session = Session.open(store, "general", PLAN)
    session.mark_shared_layer()
    record = store.get_session("general")
    assert record is not None and record.shared_layer is True
    assert Session.open(store, "general", PLAN).shared_layer is True
    assert Session.open(store, "lambo", PLAN).shared_layer is False


def test_marking_an_unknown_session_is_refused(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "u.db")
    try:
        with pytest.raises(StoreError) as info:
            store.mark_shared_layer("nobody")
        assert info.value.detail == "no session 'nobody'"
    finally:
        store.close()
    with pytest.raises(StoreError) as info:
        MemoryStore().mark_shared_layer("nobody")
    assert info.value.detail == "no session 'nobody'"


@pytest.mark.parametrize("tool", ["lambo_derive", "lambo_record_action"])
def test_submit_passes_the_layer_to_admission_only_on_a_shared_layer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tool: str
) -> None:
    seen: list[str | None] = []
    name = "admit_derive" if tool == "lambo_derive" else "admit_action"
    real = getattr(admit_module, name)

    def spy(*args: Any, **kw: Any) -> Any:
        seen.append(kw["layer"])
        return real(*args, **kw)

    monkeypatch.setattr(admit_module, name, spy)
    args = (
        derive_args("x")
        if tool == "lambo_derive"
        else {"agent_id": "agent-a", "action": "ran the linter"}
    )
    p = open_pipeline(SqliteStore(tmp_path / "a.db"), "general")
    try:
        p.submit(tool, args)
        p.session.mark_shared_layer()
        p.submit(tool, args)
        p.submit(tool, args, via="lambo")
        assert seen == [None, "general", "general"]
    finally:
        p.close()
        p.session.store.close()
