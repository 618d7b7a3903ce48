"""Receipts an earlier server issued, answered from their durable intents in the store."""

from __future__ import annotations

import logging
from typing import Any

from ..errors import LamboError
from ..model import IntentState, WriteIntent
from ..store.base import Store
from .states import ForeignLookup, ReceiptState

log = logging.getLogger(__name__)

FORBIDDEN_DETAIL = "this receipt belongs to another agent or session"
NO_DESTINATION_DETAIL = (
    "this receipt's durable intent records no session it was submitted through, so it is "
    "answered only by its own session {session!r}, never through another; use recall to "
    "inspect the current graph"
)


def _no_destination(intent: WriteIntent) -> str | None:
    """Why an older row (no recorded destination) is not answered through this session."""
    if intent.via is not None:
        return None
    return NO_DESTINATION_DETAIL.format(session=intent.session)


def intent_answer(store: Store) -> ForeignLookup:
    """Answer a receipt an earlier server issued, from its durable intent in ``store``.

    The ``foreign_lookup`` of a session's ReceiptBook: applied -> applied_after_restart
    (with the summary kept on the intent), pending -> pending_replay, failed -> failed;
    another agent, or a session other than the one the write was submitted through (its
    recorded destination) -> forbidden; no intent -> None (restart_lost).

    ``session`` is the session asking: the one a write into a layer was submitted through
    (the project), else the session itself. A row from before destinations were recorded
    came through its own session (no write could reach a session through another then),
    so it answers there as it always has, and forbidden through any other session, which
    cannot be told it (spec: lambo_stats, "A receipt is scoped…", L513).
    """

    def answer(
        receipt_id: str, agent_id: str, session: str
    ) -> tuple[ReceiptState, str, dict[str, Any]] | None:
        try:
            intent = store.get_intent(receipt_id)
        except LamboError as exc:
            log.warning("receipt %s: intent not readable: %s", receipt_id, exc.detail)
            return None
        if intent is None:
            return None
        if intent.agent_id != agent_id:
            return (ReceiptState.FORBIDDEN, FORBIDDEN_DETAIL, {})
        if intent.destination != session:
            return (ReceiptState.FORBIDDEN, _no_destination(intent) or FORBIDDEN_DETAIL, {})
        outcome = intent.outcome or {}
        if intent.state is IntentState.APPLIED:
            return (
                ReceiptState.APPLIED_AFTER_RESTART,
                str(outcome.get("detail", "applied")),
                dict(outcome.get("data", {})),
            )
        if intent.state is IntentState.FAILED:
            return (ReceiptState.FAILED, str(outcome.get("detail", "failed")), {})
        return (
            ReceiptState.PENDING_REPLAY,
            "admitted by an earlier server and owed a replay; ask again, and recall rather "
            "than deriving it again",
            {},
        )

    return answer
