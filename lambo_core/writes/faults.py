"""How a write can fail to apply, and the receipt texts those failures give."""

from __future__ import annotations

from ..errors import LamboError

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
