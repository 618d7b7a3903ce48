"""Whether a session's store is taking its writes: ``degraded``, ``dead_lettered``, flush lag.

``StoreHealth`` is owned by the session's write pipeline, which reports each store write it
makes: ``refused`` (degraded until one of its own writes goes through again) and
``dead_letter`` (a write-behind batch dropped after ``MAX_FLUSH_ATTEMPTS`` refusals). Spec:
lambo_stats (flush_lag_ms, dead_lettered, degraded; "What a crash can lose").
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from .clock import Clock
from .log_limits import RateLimitedWarnings
from .text import format_rfc3339

log = logging.getLogger(__name__)

#: consecutive refusals of one write-behind batch before it is dropped (about 5 s at the
#: 1 s flush interval): long enough to ride out a lock held by another process, short
#: enough that the lag bounds a real loss
MAX_FLUSH_ATTEMPTS = 5


@dataclass(frozen=True)
class Degraded:
    since: float  # the session clock's time of the first refusal in this run of them
    what: str  # which write was refused, in words ("an applied write", "the write-behind")


class StoreHealth:
    """Refusals and drops of one session's store writes, read by lambo_stats and acks."""

    def __init__(self, session_name: str, clock: Clock) -> None:
        self._session = session_name
        self._clock = clock
        self._lock = threading.Lock()
        self._degraded: Degraded | None = None
        self._dead_lettered = 0
        # A full disk refuses every write: its reason is logged once, then counted.
        self._refusal_log = RateLimitedWarnings(log, "store refusals", burst=1, interval=30.0)

    @property
    def degraded(self) -> bool:
        with self._lock:
            return self._degraded is not None

    @property
    def dead_lettered(self) -> int:
        with self._lock:
            return self._dead_lettered

    def refused(self, what: str, detail: str) -> None:
        """The store rejected ``what``; ``detail`` goes to the log only."""
        with self._lock:
            first = self._degraded is None
            if first:
                self._degraded = Degraded(self._clock.now(), what)
        if first:
            log.error(
                "session %s: degraded: the store refused %s (%s); writes say so until the "
                "store takes this session's writes again",
                self._session,
                what,
                detail,
            )
        else:
            self._refusal_log.warning(
                "session %s: the store refused %s (%s)", self._session, what, detail
            )

    def wrote(self) -> None:
        """One of the session's own writes (an applied batch, a flush) reached the store."""
        with self._lock:
            was, self._degraded = self._degraded, None
        if was is not None:
            self._refusal_log.flush()
            log.warning(
                "session %s: no longer degraded: the store takes writes again", self._session
            )

    def dead_letter(self, what: str) -> None:
        with self._lock:
            self._dead_lettered += 1
            total = self._dead_lettered
        log.error(
            "session %s: dropped %s after %d refusals by the store (dead_lettered %d)",
            self._session,
            what,
            MAX_FLUSH_ATTEMPTS,
            total,
        )

    def note(self) -> str | None:
        """The sentence every write carries while the session is degraded, else None."""
        with self._lock:
            state = self._degraded
        if state is None:
            return None
        return (
            f"this session is degraded: the store has refused its writes since "
            f"{format_rfc3339(state.since)} ({state.what} first); lambo_stats shows degraded and "
            "flush_lag_ms until it takes writes again"
        )
