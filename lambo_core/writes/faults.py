"""How a write can fail to apply, and the receipt texts those failures give."""

from __future__ import annotations

import logging

from ..admission import NOTHING_WRITTEN
from ..errors import LamboError
from ..model import IntentState, WriteIntent
from ..scoped_intent import settled_form
from ..session import Session

log = logging.getLogger("lambo_core.writes.pipeline")  # where a failed write was logged before

KEPT_FOR_REPLAY = (
    "; nothing was written by this server, and the write's intent is kept: the next server "
    "on this session replays it"
)
STORE_REFUSED_WRITE = "the store refused this write (the detail is in the serve's log)"


class TransientFailure(LamboError):
    """The embedder or the store did not take the write: the receipt fails, the intent is
    kept for the next server."""

    def render(self) -> str:
        return self.message


class NotPending(Exception):
    """The write's intent was settled already, so its batch was not committed."""


class HandedOn(Exception):
    """The session is stopping while this write waits for the model: it is not attempted
    here, and the stop hands it on as a durable intent."""


def failure_detail(intent: WriteIntent, exc: LamboError, keep_intent: bool) -> str:
    """The failed receipt's sentence (the detail logged, never shown)."""
    if exc.detail:
        log.warning("write %s failed: %s", intent.receipt_id, exc.detail)
    detail = exc.render()
    if keep_intent:
        # Not "nothing was written" alone: a later server applies it from its intent.
        return detail.removesuffix(NOTHING_WRITTEN) + KEPT_FOR_REPLAY
    return detail if detail.endswith(NOTHING_WRITTEN) else detail + NOTHING_WRITTEN


def record_failure(session: Session, intent: WriteIntent, detail: str) -> None:
    """Settle the intent failed in the store, so no later server replays it."""
    stored = {k: v for k, v in intent.payload.items() if k != "_replay"}
    session.store.settle_intent(
        intent.receipt_id,
        "failed",
        {"detail": detail},
        session.clock.now(),
        payload=settled_form(stored),
    )


def settled_state(session: Session, intent: WriteIntent) -> IntentState | None:
    """How a replayed intent was settled since it was queued (an earlier holder applied it
    before it let go), or None while it is still pending (or cannot be read); a wait on its
    receipt then reads the outcome from the store."""
    try:
        stored = session.store.get_intent(intent.receipt_id)
    except LamboError as exc:
        log.warning("replay %s: intent not readable: %s", intent.receipt_id, exc.detail)
        return None
    if stored is None or stored.state is IntentState.PENDING:
        return None
    log.info(
        "replay %s: already settled %s in the store; not applied again",
        intent.receipt_id,
        stored.state.value,
    )
    return stored.state
