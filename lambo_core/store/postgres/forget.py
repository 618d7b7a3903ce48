"""A forget on PostgreSQL (and CockroachDB): ``forget.ForgetRequest`` in one transaction.

The rows go at once; their old versions stay in the tables' dead tuples (and the server's
WAL) until PostgreSQL vacuums and reuses the space, which lambo does not force: an operator
who must be sure runs ``VACUUM FULL`` on concepts, write_intents and interactions.
"""

from __future__ import annotations

from typing import Any

import psycopg

from ...forget import ForgetRequest
from ...model import IntentState
from ..base import IntentNotPending
from ..rows import WRITE_REFUSED, forget_event_insert, to_json


def forget_rows(cur: psycopg.Cursor[Any], request: ForgetRequest) -> int:
    """Remove, scrub, audit and settle (``Store.forget``); the edges removed."""
    session = request.session
    ids = list(dict.fromkeys(request.node_ids))
    scrub = request.scrubber()
    row = cur.execute(
        "SELECT count(*) FROM edges WHERE session = %s AND (src = ANY(%s) OR dst = ANY(%s))",
        (session, ids, ids),
    ).fetchone()
    edges = int(row[0]) if row else 0
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
    for needle in scrub.needles:
        found = cur.execute(
            "SELECT receipt_id, payload, outcome FROM write_intents WHERE session = %s "
            "AND state <> %s AND (strpos(payload, %s) > 0 OR strpos(outcome, %s) > 0)",
            (session, IntentState.PENDING.value, needle, needle),
        ).fetchall()
        for receipt_id, payload, outcome in found:
            cur.execute(
                "UPDATE write_intents SET payload = COALESCE(%s, payload), "
                "outcome = COALESCE(%s, outcome) WHERE receipt_id = %s",
                (scrub.json_text(payload), scrub.json_text(outcome), receipt_id),
            )
    for content, mark in scrub.pairs:
        cur.execute(
            "UPDATE interactions SET summary = replace(summary, %s, %s) "
            "WHERE session = %s AND strpos(summary, %s) > 0",
            (content, mark, session, content),
        )
    cur.execute(*forget_event_insert(request.event(edges), "%s"))
    if request.receipt_id is not None:
        cur.execute(
            "UPDATE write_intents SET state = %s, outcome = %s, settled_at = %s "
            "WHERE receipt_id = %s AND session = %s AND state = %s",
            (IntentState.APPLIED.value, to_json(request.outcome(edges)),
             request.occurred_at, request.receipt_id, session,
             IntentState.PENDING.value),
        )  # fmt: skip
        if cur.rowcount != 1:
            raise IntentNotPending(
                WRITE_REFUSED, detail="the forget's intent is not pending in this session"
            )
    return edges
