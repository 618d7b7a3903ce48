"""What a write receipt can say: its states, their details, the view a caller gets, the id.

Spec: lambo_stats, the receipt states and the Limits table (receipts kept 300 seconds or
4096 receipts; 64 outstanding writes per agent, 1024 per server).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Spec: Limits table and lambo_stats. Fixed shares, never measured.
LANE_BOUND = 64
BOUND = 1024
RETAIN_SECONDS = 300.0
RETAIN_MAX = 4096
# Owners of receipts already let go, so an expired receipt stays its owner's. Past this
# many the durable intent (which names its agent and session) answers instead.
EVICTED_OWNERS_MAX = 16_384
PIGGYBACK_MAX = 8

# "lwr1." + 16 hex + "." + <=16 hex + "." + <=20 digits is at most 59 chars.
MAX_RECEIPT_ID_LEN = 64
_ID_RE = re.compile(r"lwr1\.([0-9a-f]{16})\.([0-9a-f]{1,16})\.([1-9][0-9]{0,19})")


class ReceiptState(enum.Enum):
    """The twelve answers a receipt can give; none of them is "unknown"."""

    APPLIED = "applied"
    PENDING = "pending"
    PENDING_REPLAY = "pending_replay"
    FAILED = "failed"
    INTENT_DURABLE = "intent_durable"
    CLOSE_UNFLUSHED = "close_unflushed"
    APPLIED_AFTER_RESTART = "applied_after_restart"
    DROPPED = "dropped"
    EXPIRED = "expired"
    RESTART_LOST = "restart_lost"
    NEVER_ISSUED = "never_issued"
    FORBIDDEN = "forbidden"


# Details a model can act on; the writes layer usually supplies a richer one
# (the applied summary, the failure's reason) when it settles.
DEFAULT_DETAILS: Mapping[ReceiptState, str] = {
    ReceiptState.APPLIED: "applied; recall finds it",
    ReceiptState.PENDING: "admitted, not yet applied; ask again",
    ReceiptState.PENDING_REPLAY: (
        "admitted by an earlier server on this session and recorded as a durable intent, "
        "still owed a replay behind a backlog replayed one write at a time; "
        "ask again, and recall rather than re-deriving"
    ),
    ReceiptState.FAILED: "attempted and rejected; nothing was written",
    ReceiptState.INTENT_DURABLE: (
        "the session closed before this write was applied and its final flush completed, "
        "so the write is kept as a durable intent; the next server on this session "
        "re-attempts it in the order you sent it; ask about this receipt there"
    ),
    ReceiptState.CLOSE_UNFLUSHED: (
        "the session closed before this write was applied and could not complete its "
        "final flush; the write may or may not have been saved as an intent; "
        "recall before re-deriving"
    ),
    ReceiptState.APPLIED_AFTER_RESTART: "applied across a restart; recall finds the concepts",
    ReceiptState.DROPPED: (
        "never attempted, the queue was full when you were acked; nothing was written"
    ),
    ReceiptState.EXPIRED: (
        "this server issued the receipt and no longer holds its outcome "
        "(receipts are kept for 300 seconds); recall to see whether the write is there"
    ),
    ReceiptState.RESTART_LOST: (
        "a different server process issued this receipt and no durable record of it "
        "survived; the write may or may not have been applied before that process ended; "
        "recall before re-deriving"
    ),
    ReceiptState.NEVER_ISSUED: "this server has never handed out that id",
    ReceiptState.FORBIDDEN: (
        "this receipt belongs to a different agent or session; ask from the agent_id "
        "and session that made the write"
    ),
}

DROPPED_LANE_DETAIL = (
    f"nothing was written: your lane of {LANE_BOUND} outstanding writes is full "
    "(write_queue_lane_bound); let some of your writes settle, then send this one again"
)
DROPPED_BOUND_DETAIL = (
    f"nothing was written: the server's queue of {BOUND} outstanding writes is full "
    "(write_queue_bound); send this one again shortly"
)
DROPPED_CLOSING_DETAIL = (
    "nothing was written: the session is shutting down and takes no new writes; "
    "send this one again to the next server on this session"
)
MALFORMED_DETAIL = (
    "this server has never handed out that id; it is not in the form a lambo receipt id takes"
)
WITHDRAWN_DETAIL = "this server has never handed out that id; that write was refused before its ack"

# States the apply worker / shutdown may settle one of our own receipts into.
SETTLE_STATES = frozenset(
    {
        ReceiptState.APPLIED,
        ReceiptState.FAILED,
        ReceiptState.INTENT_DURABLE,
        ReceiptState.CLOSE_UNFLUSHED,
    }
)
# A retried shutdown may turn one close outcome into the other (spec: a retried
# flush that completes changes close_unflushed to intent_durable).
CLOSE_STATES = frozenset({ReceiptState.INTENT_DURABLE, ReceiptState.CLOSE_UNFLUSHED})

ForeignLookup = Callable[[str, str, str], tuple[ReceiptState, str, dict[str, Any]] | None]


@dataclass(frozen=True)
class ReceiptView:
    """What a caller is told about one receipt.

    ``receipt_id`` is None only for text that is not a lambo receipt id at all:
    such input is never echoed back.
    """

    receipt_id: str | None
    state: ReceiptState
    detail: str
    data: Mapping[str, Any] = field(default_factory=dict)

    @property
    def settled(self) -> bool:
        return self.state is not ReceiptState.PENDING


# The ack's receipt is the same value a lookup returns.
Receipt = ReceiptView


@dataclass(frozen=True)
class SettledReceipt:
    """A write's outcome as a settle listener hears it: the receipt and whose write it was
    (``session``: the one it was submitted through, which the receipt answers to)."""

    view: ReceiptView
    agent_id: str
    session: str
    tool: str


#: hears each write's outcome on the thread that settled it (the apply worker, the stop)
SettleListener = Callable[[SettledReceipt], None]


@dataclass(frozen=True)
class ReceiptStats:
    """Counters behind lambo_stats's write_queue_* keys."""

    bound: int
    lane_bound: int
    outstanding: int
    accepted: int
    applied: int
    failed: int
    deferred: int
    abandoned: int
    dropped: int
    dropped_closed: int
    receipts_retained: int
    waits: int

    def write_queue_keys(self) -> dict[str, int]:
        return {
            "write_queue_bound": self.bound,
            "write_queue_lane_bound": self.lane_bound,
            "write_queue_outstanding": self.outstanding,
            "write_queue_accepted": self.accepted,
            "write_queue_applied": self.applied,
            "write_queue_failed": self.failed,
            "write_queue_deferred": self.deferred,
            "write_queue_abandoned": self.abandoned,
            "write_queue_dropped": self.dropped,
            "write_queue_dropped_closed": self.dropped_closed,
            "receipts_retained": self.receipts_retained,
        }


@dataclass(eq=False)
class Entry:
    """One receipt as the book holds it: its owner, its state and whether it was seen."""

    receipt_id: str
    agent_id: str
    session: str
    tool: str
    issued_at: float
    state: ReceiptState = ReceiptState.PENDING
    detail: str = DEFAULT_DETAILS[ReceiptState.PENDING]
    data: dict[str, Any] = field(default_factory=dict)
    settled_at: float | None = None
    # True once the owner has seen the settled outcome (piggyback, lookup or
    # the ack itself for a dropped receipt), so it never rides twice.
    delivered: bool = False

    def view(self) -> ReceiptView:
        return ReceiptView(self.receipt_id, self.state, self.detail, dict(self.data))


def parse_receipt_id(text: str) -> tuple[str, str, int] | None:
    """``(nonce_hex, start_hex, seq)`` for a well-formed lambo receipt id, else None."""
    if not isinstance(text, str) or len(text) > MAX_RECEIPT_ID_LEN:
        return None
    match = _ID_RE.fullmatch(text.strip())
    if match is None:
        return None
    return match.group(1), match.group(2), int(match.group(3))


def not_ours(receipt_id: str | None, state: ReceiptState, detail: str = "") -> ReceiptView:
    return ReceiptView(receipt_id, state, detail or DEFAULT_DETAILS[state])
