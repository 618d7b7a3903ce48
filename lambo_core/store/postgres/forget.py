"""A forget on PostgreSQL (and CockroachDB): ``forget.ForgetRequest`` in one transaction,
the rows tied to the forgotten ids redacted as ``forget.py`` says.

The rows go at once; their old versions stay in the tables' dead tuples (and the server's
WAL) until PostgreSQL vacuums and reuses the space, which lambo does not force: an operator
who must be sure runs ``VACUUM FULL`` on concepts, write_intents and interactions.
"""

from __future__ import annotations

from typing import Any

import psycopg

from ...forget import FORGET_TOOL, ForgetRequest
from ...model import EdgeType, IntentState
from ..base import IntentNotPending
from ..rows import WRITE_REFUSED, forget_event_insert, forget_settle


def forget_rows(cur: psycopg.Cursor[Any], request: ForgetRequest) -> int:
    """Remove, redact, audit and settle (``Store.forget``); the edges removed."""
    session = request.session
    ids = list(dict.fromkeys(request.node_ids))
    redaction = request.redaction()
    row = cur.execute(
        "SELECT count(*) FROM edges WHERE session = %s AND (src = ANY(%s) OR dst = ANY(%s))",
        (session, ids, ids),
    ).fetchone()
    edges = int(row[0]) if row else 0
    derived: dict[str, list[str]] = {}  # interaction -> the forgotten ids it derived
    for src, dst in cur.execute(
        "SELECT src, dst FROM edges WHERE session = %s AND edge_type = %s AND dst = ANY(%s)",
        (session, EdgeType.DERIVES.value, ids),
    ).fetchall():
        derived.setdefault(src, []).append(dst)
    cur.execute("DELETE FROM edges WHERE session = %s AND src = ANY(%s)", (session, ids))
    gone = cur.execute(
        "DELETE FROM concepts WHERE session = %s AND id = ANY(%s) RETURNING kw_length",
        (session, ids),
    ).fetchall()
    cur.execute(
        "UPDATE sessions SET kw_docs = kw_docs - %s, kw_length = kw_length - %s, "
        "mutation_count = mutation_count + %s WHERE name = %s",
        (len(gone), sum(int(r[0]) for r in gone), len(gone) + edges, session),
    )
    for interaction, derived_ids in derived.items():
        cur.execute(
            "UPDATE interactions SET summary = %s WHERE session = %s AND id = %s",
            (redaction.summary(derived_ids), session, interaction),
        )
    seen: set[str] = set()
    for node_id in ids:  # pending intents are not read: none older (writes/forget.py)
        found = cur.execute(
            "SELECT receipt_id, state, payload, outcome FROM write_intents WHERE session = %s "
            "AND state <> %s AND tool <> %s "
            "AND (strpos(payload, %s) > 0 OR strpos(outcome, %s) > 0)",
            (session, IntentState.PENDING.value, FORGET_TOOL, node_id, node_id),
        ).fetchall()
        for receipt_id, state, payload, outcome in found:
            if receipt_id in seen:
                continue
            seen.add(receipt_id)
            redacted = redaction.intent(state, payload, outcome)
            if redacted is not None:
                cur.execute(
                    "UPDATE write_intents SET payload = %s, outcome = %s WHERE receipt_id = %s",
                    (*redacted, receipt_id),
                )
    cur.execute(*forget_event_insert(request.event(edges), "%s"))
    if request.receipt_id is not None:
        cur.execute(
            *forget_settle(
                request.receipt_id, session, request.outcome(edges), request.occurred_at, "%s"
            )
        )
        if cur.rowcount != 1:
            raise IntentNotPending(
                WRITE_REFUSED, detail="the forget's intent is not pending in this session"
            )
    return edges
