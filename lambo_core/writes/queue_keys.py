"""lambo_stats' write_queue_* keys, from the receipt book, the rates and the replay counts."""

from __future__ import annotations

from typing import Any

from ..rates import WriteRates
from ..receipts import ReceiptStats


def write_queue_keys(
    book: ReceiptStats, rates: WriteRates, replayed: int, owed: int
) -> dict[str, Any]:
    """The write_queue_* keys, every figure measured (or null until it is)."""
    return {
        "write_queue_bound": book.bound,
        "write_queue_lane_bound": book.lane_bound,
        **rates.keys(),
        "write_queue_outstanding": book.outstanding,
        "write_queue_accepted": book.accepted,
        "write_queue_applied": book.applied,
        "write_queue_failed": book.failed,
        "write_queue_abandoned": book.abandoned,
        "write_queue_deferred": book.deferred,
        "write_queue_replayed": replayed,
        "write_queue_replay_owed": owed,
        "write_queue_dropped": book.dropped,
        "write_queue_dropped_closed": book.dropped_closed,
        "receipts_retained": book.receipts_retained,
    }
