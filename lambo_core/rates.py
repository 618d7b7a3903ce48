"""The write queue's rate keys: the startup probe, the observed rates, ack-to-applied times.

Every figure is measured, or null until it is; none is the source of a bound. Spec:
lambo_stats, "The rate keys are telemetry about your embedder, not the source of any bound".
How each is measured: docs/design.md (the write path, rate keys).
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger(__name__)

SAMPLES = 256
OBSERVED_MIN = 8
PROBE_ROUNDS = 3
PROBE_WIDTH = 4
PROBE_BUDGET_S = 10.0

# Two concepts of about 340 bytes each: the probe's representative write.
PROBE_CONCEPTS = (
    "The session lease is renewed every fifteen seconds by the hub that holds it, and a "
    "serve that finds the lease expired takes it over with a fencing token one higher, so "
    "a paused writer that wakes up later can never commit over the new holder; the "
    "shutdown budget of fifteen seconds stays below the lease TTL of forty-five seconds "
    "for that reason.",
    "Recall fuses a keyword leg over the FTS5 index with a vector leg over the session's "
    "embedding matrix, then expands the fused hits through dependency, causal and "
    "hierarchical edges up to the traversal depth, and renders one block per hit with "
    "its warning lines under the max_tokens budget, cutting the last block rather than "
    "dropping a warning it carries.",
)


def _median_rate(ms: Sequence[float]) -> float | None:
    if not ms:
        return None
    median = statistics.median(ms)
    return 1000.0 / median if median > 0 else None


class WriteRates:
    """What the apply worker and the startup probe measured, and the keys built from it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ack_ms: deque[float] = deque(maxlen=SAMPLES)
        self._work_ms: deque[float] = deque(maxlen=SAMPLES)
        self._back_to_back_ms: deque[float] = deque(maxlen=SAMPLES)
        self._last_done: float | None = None
        self.probe_serial: float | None = None
        self.probe_wide: float | None = None
        self.probe_ran = False

    def applied(
        self,
        ack_to_applied_ms: float,
        work_ms: float,
        *,
        queue_was_busy: bool,
        done_at: float | None = None,
    ) -> None:
        """One of this server's own writes applied (replays are not its own work). ``done_at``
        (time.monotonic) is when it counts as done, for a write of a batch whose embedding
        ran before it (default: now)."""
        now = time.monotonic() if done_at is None else done_at
        with self._lock:
            self._ack_ms.append(ack_to_applied_ms)
            self._work_ms.append(work_ms)
            if queue_was_busy and self._last_done is not None:
                self._back_to_back_ms.append((now - self._last_done) * 1000.0)
            self._last_done = now

    def idle(self) -> None:
        """The queue ran dry: the next apply does not follow this one back to back."""
        with self._lock:
            self._last_done = None

    def probed(self, serial: float | None, wide: float | None) -> None:
        with self._lock:
            self.probe_serial, self.probe_wide, self.probe_ran = serial, wide, True

    def keys(self) -> dict[str, Any]:
        with self._lock:
            acks = sorted(self._ack_ms)
            work = list(self._work_ms)
            back = list(self._back_to_back_ms)
            probe_serial, probe_wide = self.probe_serial, self.probe_wide
        observed = len(work) >= OBSERVED_MIN
        if observed:
            source = "observed"
            serial = _median_rate(work)
            wide = _median_rate(back) if len(back) >= OBSERVED_MIN else None
        elif probe_serial is not None:
            source, serial, wide = "probe", probe_serial, probe_wide
        else:
            source, serial, wide = "unmeasured", None, None
        optimism = (
            probe_serial / serial
            if observed and probe_serial is not None and serial is not None
            else None
        )
        return {
            "write_queue_measured": source != "unmeasured",
            "write_queue_bound_source": source,
            "write_queue_items_per_sec": _round(wide),
            "write_queue_serial_items_per_sec": _round(serial),
            "write_queue_probe_serial_items_per_sec": _round(probe_serial),
            "write_queue_probe_optimism": _round(optimism),
            "write_queue_apply_samples": len(acks),
            "write_queue_apply_ms_p50": statistics.median(acks) if acks else None,
            "write_queue_apply_ms_p90": (
                acks[min(len(acks) - 1, int(0.9 * len(acks)))] if acks else None
            ),
            "write_queue_apply_ms_max": acks[-1] if acks else None,
        }


def _round(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None


def run_probe(
    embed: Callable[[list[str]], object],
    texts: list[str],
    stop: threading.Event,
    budget_s: float = PROBE_BUDGET_S,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[float | None, float | None]:
    """(writes/s one at a time, writes/s four at once or None), embedding ``texts`` per write.

    Stops early (None for what it did not finish) when ``stop`` is set or the budget is
    spent; the four-wide round gets what the serial rounds left of the budget. ``clock``
    (monotonic seconds) is injected by tests.
    """
    deadline = clock() + budget_s
    rounds: list[float] = []
    for _ in range(PROBE_ROUNDS):
        if stop.is_set() or clock() >= deadline:
            break
        started = clock()
        embed(texts)
        rounds.append((clock() - started) * 1000.0)
    serial = _median_rate(rounds)
    if serial is None or stop.is_set():
        return serial, None
    ends: list[float] = []
    ends_lock = threading.Lock()

    def one() -> None:
        embed(texts)
        with ends_lock:
            ends.append(clock())

    workers = [
        threading.Thread(target=one, name=f"lambo-probe-{i}", daemon=True)
        for i in range(PROBE_WIDTH)
    ]
    started = clock()
    for worker in workers:
        worker.start()
    # Joined, never abandoned mid-call: the process must not exit under the embedder.
    for worker in workers:
        worker.join()
    if len(ends) < PROBE_WIDTH or max(ends) > deadline:
        return serial, None
    return serial, PROBE_WIDTH / (max(ends) - started)
