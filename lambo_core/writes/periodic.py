"""Background jobs that write, run by the session's writer thread between writes.

Access counts and the daemon's cycles write to the store; running them on the apply worker
keeps the session's single writer (docs/design.md, the write path).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..store.base import FencedOut

log = logging.getLogger(__name__)


@dataclass
class Periodic:
    interval_s: float
    job: Callable[[], object]
    next_at: float


class PeriodicJobs:
    """The writer's background jobs and when each is next due."""

    def __init__(
        self,
        idle_wait_s: float,
        fenced: Callable[[], bool],
        on_fenced: Callable[[FencedOut], None],
    ) -> None:
        self._idle_wait_s = idle_wait_s  # the longest the worker waits for work with none due
        self._fenced = fenced  # whether the writer has lost its lease: no job runs then
        self._on_fenced = on_fenced
        self._lock = threading.Lock()
        self.jobs: list[Periodic] = []

    def every(
        self, interval_s: float, job: Callable[[], object], *, first_in_s: float | None = None
    ) -> None:
        """Run ``job`` about every ``interval_s`` seconds, the first time after
        ``first_in_s`` (default: one interval; 0 runs it as soon as the worker is free)."""
        first = interval_s if first_in_s is None else first_in_s
        with self._lock:
            self.jobs.append(Periodic(interval_s, job, time.monotonic() + first))

    def run_due(self) -> None:
        """Run every job that is due (on the writer thread)."""
        now = time.monotonic()
        with self._lock:
            due = [p for p in self.jobs if p.next_at <= now]
        for periodic in due:
            if self._fenced():
                return
            periodic.next_at = now + periodic.interval_s
            try:
                periodic.job()
            except FencedOut as exc:  # the daemon's write found the lease gone
                self._on_fenced(exc)
            except Exception:  # a background job's fault must not stop the writer
                log.exception("background job %r failed", periodic.job)

    def next_wait(self) -> float:
        """How long the worker may wait for a write before a job is due."""
        with self._lock:
            if not self.jobs:
                return self._idle_wait_s
            soonest = min(p.next_at for p in self.jobs)
        return max(0.0, min(self._idle_wait_s, soonest - time.monotonic()))
