"""The write path: a write is admitted and acked, then applied in order by the session's
one writer (spec: lambo_derive, lambo_record_action; receipts in lambo_stats).

``pipeline`` queues and applies; ``builder`` turns one intent into concepts and edges;
``outcome`` renders the ack and the applied outcome; ``embedding`` and ``write_behind``
are the worker's other two jobs. Design notes: docs/design.md, the write path.
"""

from .pipeline import WritePipeline
from .stop_report import StopReport

__all__ = ["StopReport", "WritePipeline"]
