"""A forget's redaction on SQLite: the rows tied to the forgotten ids (``forget.py``),
inside the forget's own transaction (``SqliteStore.forget``)."""

from __future__ import annotations

import sqlite3

from ..forget import FORGET_TOOL, Redaction
from ..model import IntentState


def redact_rows(
    conn: sqlite3.Connection, session: str, redaction: Redaction, derived: dict[str, list[str]]
) -> None:
    """The rows tied to the forgotten ids, redacted (``forget.py``): pending intents are
    not read (the forget's own, and none older: ``writes/forget.py`` refused it then)."""
    for interaction, ids in derived.items():
        conn.execute(
            "UPDATE interactions SET summary = ? WHERE session = ? AND id = ?",
            (redaction.summary(ids), session, interaction),
        )
    seen: set[str] = set()
    for node_id in redaction.ids:
        rows = conn.execute(
            "SELECT receipt_id, state, payload, outcome FROM write_intents WHERE session = ? "
            "AND state != ? AND tool != ? AND (instr(payload, ?) > 0 OR instr(outcome, ?) > 0)",
            (session, IntentState.PENDING.value, FORGET_TOOL, node_id, node_id),
        ).fetchall()
        for receipt_id, state, payload, outcome in rows:
            if receipt_id in seen:
                continue
            seen.add(receipt_id)
            redacted = redaction.intent(state, payload, outcome)
            if redacted is not None:
                conn.execute(
                    "UPDATE write_intents SET payload = ?, outcome = ? WHERE receipt_id = ?",
                    (*redacted, receipt_id),
                )
