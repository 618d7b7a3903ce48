"""One session's recall access counts, held in RAM until the write-behind stores them.

A read never writes to the store: a recall only bumps a counter here under a short
lock. The writer thread drains the counts into ``Store.add_access_counts`` and hands
them back on failure; the base score adds what is still pending. The age of the
oldest pending count is lambo_stats' ``flush_lag_ms``.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping


class AccessCounts:
    """Recall hits of one session not yet in the store; every method is thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        # When (time.monotonic) the oldest count not yet in the store was recorded.
        self._since: float | None = None

    def record(self, node_ids: Iterable[str]) -> None:
        with self._lock:
            before = len(self._counts)
            self._counts.update(node_ids)
            if len(self._counts) > before and self._since is None:
                self._since = time.monotonic()

    def pending_since(self) -> float | None:
        """The monotonic time the oldest unflushed count was recorded, or None."""
        with self._lock:
            return self._since

    def pending(self, node_id: str) -> int:
        with self._lock:
            return self._counts[node_id]

    def snapshot(self) -> dict[str, int]:
        """Every count held, copied (they stay held)."""
        with self._lock:
            return dict(self._counts)

    def drain(self) -> dict[str, int]:
        """Take every count (the counter starts again from zero)."""
        with self._lock:
            counts, self._counts, self._since = self._counts, Counter(), None
        return dict(counts)

    def restore(self, counts: Mapping[str, int], since: float | None = None) -> None:
        """Give back counts a failed flush took, so the next flush writes them; ``since`` is
        when the oldest of them was recorded (their age keeps counting)."""
        with self._lock:
            self._counts.update(counts)
            if self._counts:
                earliest = [t for t in (since, self._since) if t is not None]
                self._since = min(earliest) if earliest else time.monotonic()
