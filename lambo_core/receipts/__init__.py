"""Write receipts: what happened to each acked write, and how a caller learns it.

``ledger`` issues, settles and retains receipts; ``book.ReceiptBook`` answers for them
(lookups, waits); ``render`` writes them out; ``intents`` answers an earlier server's ids
from the store. Spec: lambo_derive (the ack) and lambo_stats (receipt states, wait_ms).
Design notes: docs/design.md, write receipts.
"""

from .book import ReceiptBook
from .intents import intent_answer
from .layered import PiggybackSource, fair_piggyback, fair_shares, layer_down_view
from .render import render_line, render_piggyback, to_structured
from .states import (
    BOUND,
    DEFAULT_DETAILS,
    LANE_BOUND,
    PIGGYBACK_MAX,
    RETAIN_MAX,
    RETAIN_SECONDS,
    ForeignLookup,
    Receipt,
    ReceiptState,
    ReceiptStats,
    ReceiptView,
    SettledReceipt,
    SettleListener,
    parse_receipt_id,
)
from .waits import AGENT_WAIT_BOUND, SERVER_WAIT_BOUND, clamp_wait_ms

__all__ = [
    "AGENT_WAIT_BOUND",
    "BOUND",
    "DEFAULT_DETAILS",
    "LANE_BOUND",
    "PIGGYBACK_MAX",
    "RETAIN_MAX",
    "RETAIN_SECONDS",
    "SERVER_WAIT_BOUND",
    "ForeignLookup",
    "PiggybackSource",
    "Receipt",
    "ReceiptBook",
    "ReceiptState",
    "ReceiptStats",
    "ReceiptView",
    "SettleListener",
    "SettledReceipt",
    "clamp_wait_ms",
    "fair_piggyback",
    "fair_shares",
    "intent_answer",
    "layer_down_view",
    "parse_receipt_id",
    "render_line",
    "render_piggyback",
    "to_structured",
]
