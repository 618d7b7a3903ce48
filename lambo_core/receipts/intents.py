"""Receipts an earlier server issued, answered from their durable intents in the store."""

from __future__ import annotations

import logging
from typing import Any

from ..errors import LamboError
from ..model import IntentState
from ..store.base import Store
from .states import ForeignLookup, ReceiptState

log = logging.getLogger(__name__)


def intent_answer(store: Store) -> ForeignLookup:
    """Answer a receipt an earlier server issued, from its durable intent in ``store``.

    The ``foreign_lookup`` of a session's ReceiptBook: applied -> applied_after_restart
    (with the summary kept on the intent), pending -> pending_replay, failed -> failed;
    another agent or session -> forbidden; no intent -> None (restart_lost).
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
        if intent.agent_id != agent_id or intent.session != session:
            return (ReceiptState.FORBIDDEN, "this receipt belongs to another agent or session", {})
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
