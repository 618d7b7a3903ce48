"""One injectable clock: every time-dependent rule reads ``Clock.now``.

Times are UTC seconds since the epoch as floats everywhere inside lambo; they
become RFC 3339 text only at the edges (``text.format_rfc3339``).
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """UTC seconds since the epoch."""
        ...


class SystemClock:
    """The wall clock."""

    def now(self) -> float:
        return time.time()


class ManualClock:
    """A clock tests move by hand, so age rules are tested without sleeping."""

    def __init__(self, start: float = 1_760_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds

    def set(self, when: float) -> None:
        with self._lock:
            self._now = when
