"""The write-behind of recall access counts: recalls never write, the writer flushes for them.

Counts are batched about once a second on the writer thread (spec: lambo_stats,
``flush_lag_ms`` and ``dead_lettered``; "What a crash can lose").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ..errors import LamboError
from ..health import MAX_FLUSH_ATTEMPTS, StoreHealth
from ..session import Session
from ..store.base import FencedOut

log = logging.getLogger(__name__)

ACCESS_FLUSH_INTERVAL_S = 1.0


class AccessCountFlush:
    """Flushes one session's access counts; retries a refused batch, then dead-letters it."""

    def __init__(
        self, session: Session, health: StoreHealth, on_fenced: Callable[[FencedOut], None]
    ) -> None:
        self.session = session
        self.health = health
        self._on_fenced = on_fenced  # the store says the lease passed to another writer
        self._failures = 0  # consecutive refusals of the write-behind batch

    def flush(self, *, final: bool = False) -> tuple[bool, int]:
        """(whether nothing is left unflushed, how many concepts' counts were written).

        A refused flush hands the counts back for the next one, until the same batch has
        been refused MAX_FLUSH_ATTEMPTS times in a row: then it is dropped (dead-lettered)
        so the lag says what is really owed. The final flush of a stop never dead-letters:
        its failure is what close_unflushed reports.
        """
        counts_of = self.session.access_counts
        since = counts_of.pending_since()
        counts = counts_of.drain()
        if not counts:
            return True, 0
        try:
            self.session.store.add_access_counts(self.session.name, counts)
        except FencedOut as exc:
            # Not this writer's to write any more (the new holder counts its own recalls).
            self._on_fenced(exc)
            return False, 0
        except LamboError as exc:
            self._failures += 1
            self.health.refused("the write-behind of access counts", exc.detail or exc.message)
            if self._failures >= MAX_FLUSH_ATTEMPTS and not final:
                self._failures = 0
                self.health.dead_letter(f"the access counts of {len(counts)} concept(s)")
                return True, 0
            counts_of.restore(counts, since)
            return False, 0
        self._failures = 0
        self.health.wrote()
        with self.session.index.lock:
            for node_id, n in counts.items():
                concept = self.session.index.graph.concept(node_id)
                if concept is not None:
                    concept.access_count += n
        return True, len(counts)

    def lag_ms(self) -> float:
        """Age of the oldest change the store does not hold yet (0 when none waits)."""
        since = self.session.access_counts.pending_since()
        return 0.0 if since is None else max(0.0, (time.monotonic() - since) * 1000.0)

    def final_flush(self, lease_ok: Callable[[], bool]) -> bool:
        """Whether a stop can vouch for the intents it hands on: the lease still this
        server's (``lease_ok``) and the counts flushed. Their intents were committed before
        their acks, so a store refusing other writes (degraded) does not undo them."""
        if not lease_ok():
            log.warning(
                "session %s: the lease passed to another writer before the stop",
                self.session.name,
            )
            return False
        flushed, _ = self.flush(final=True)
        return flushed

    def retry_final_flush(self, deadline: float, lease_ok: Callable[[], bool]) -> bool:
        """The final flush retried, backing off, until it completes or ``deadline``."""
        pause = 0.1
        while time.monotonic() + pause < deadline:
            if not lease_ok():
                return False  # a lost lease does not come back: nothing to retry for
            time.sleep(pause)
            if self.final_flush(lease_ok):
                return True
            pause = min(pause * 2, 1.0)
        return False
