"""The call ledger's writer: JSON lines appended to one file, off every call's path.

A bounded queue stands between the callers and one writer thread. ``append`` never blocks
and never raises: a full queue drops the line (channel_full: the writer fell behind), and a
batch whose open or write fails is dropped (write_failed, as is a batch abandoned at
shutdown and an append after it). The file is opened in the writer thread, so a path whose
open blocks (a FIFO with no reader, a hung mount) parks that thread, not a call, and only
``queued_lines`` shows it. Counts are kept per session, for a serve holding several
sessions on one file. Spec: lambo_stats, the six ``ledger_*`` keys.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: lines accepted but not yet on disk before an append is dropped as channel_full
DEFAULT_CAPACITY = 4096
#: lines the writer takes off the queue for one write
MAX_BATCH = 512
#: a new ledger file is the operator's alone: its lines name agents and quote queries
FILE_MODE = 0o600


@dataclass
class LedgerCounts:
    """One session's lines (or the whole file's): on disk, dropped by kind, still queued."""

    written: int = 0
    dropped_channel_full: int = 0
    dropped_write_failed: int = 0
    queued: int = 0

    def add(self, other: LedgerCounts) -> None:
        self.written += other.written
        self.dropped_channel_full += other.dropped_channel_full
        self.dropped_write_failed += other.dropped_write_failed
        self.queued += other.queued


class LedgerWriter:
    """Appends ledger lines to ``path`` from one writer thread (``start`` it first)."""

    def __init__(
        self, path: Path, *, capacity: int = DEFAULT_CAPACITY, per_session: bool = False
    ) -> None:
        if capacity < 1:
            raise ValueError("a ledger's capacity is at least one line")
        self.path = path
        self.capacity = capacity
        #: True: each session's keys count only its own lines (a serve of several
        #: sessions on one file); False: every session reports the whole file
        self.per_session = per_session
        self._cond = threading.Condition()
        self._queue: deque[tuple[str, Mapping[str, Any]]] = deque()
        self._counts: dict[str, LedgerCounts] = {}
        self._closing = False
        self._closed = False
        self._fd: int | None = None
        #: the sessions of the batch the thread is writing (taken off the queue, not on disk)
        self._batch: list[str] = []
        self._thread: threading.Thread | None = None

    def start(self) -> LedgerWriter:
        # a daemon: a thread parked in open() on a reader-less FIFO must not hold the exit
        self._thread = threading.Thread(target=self._run, name="lambo-ledger", daemon=True)
        self._thread.start()
        return self

    def append(self, session: str, line: Mapping[str, Any]) -> bool:
        """Queue one line for ``session`` (the caller hands ``line`` over and no longer
        changes it); False when it was dropped. Never blocks on the file."""
        with self._cond:
            counts = self._counts.setdefault(session, LedgerCounts())
            if self._closing or self._closed:
                counts.dropped_write_failed += 1
                return False
            # lines the writer took but has not written count too: a parked writer's batch
            if len(self._queue) + len(self._batch) >= self.capacity:
                counts.dropped_channel_full += 1
                return False
            self._queue.append((session, line))
            counts.queued += 1
            self._cond.notify()
            return True

    def counts(self, session: str | None = None) -> LedgerCounts:
        """``session``'s counts when the writer counts per session, else the whole file's."""
        with self._cond:
            if session is not None and self.per_session:
                own = self._counts.get(session, LedgerCounts())
                return LedgerCounts(**vars(own))
            total = LedgerCounts()
            for counts in self._counts.values():
                total.add(counts)
            return total

    def stats_keys(self, session: str | None = None) -> dict[str, Any]:
        """The six ``ledger_*`` keys of lambo_stats and the heartbeat line."""
        c = self.counts(session)
        return {
            "ledger_path": str(self.path),
            "ledger_written_lines": c.written,
            "ledger_dropped_lines": c.dropped_channel_full + c.dropped_write_failed,
            "ledger_dropped_channel_full": c.dropped_channel_full,
            "ledger_dropped_write_failed": c.dropped_write_failed,
            "ledger_queued_lines": c.queued,
        }

    def flushed(self, timeout_s: float) -> bool:
        """Wait until nothing is queued (a test's and a stop's wait); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._in_flight(), timeout_s)

    def close(self, budget_s: float = 2.0) -> None:
        """Write what is queued within ``budget_s``; what is left is dropped as write_failed
        (a writer parked on its open never gets to it). Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(budget_s)
        with self._cond:
            self._closed = True
            left = [session for session, _line in self._queue] + self._batch
            self._queue.clear()
            self._batch = []  # a batch still being written is given up: _run skips it
            for session in left:
                counts = self._counts[session]
                counts.queued -= 1
                counts.dropped_write_failed += 1
            self._cond.notify_all()

    # -- the writer thread -------------------------------------------------------------
    def _in_flight(self) -> bool:
        """Lines accepted and not yet on disk or dropped (queued or in the batch)."""
        return any(c.queued for c in self._counts.values())

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._closing or self._closed)
                if self._closed or (self._closing and not self._queue):
                    break
                batch = [self._queue.popleft() for _ in range(min(MAX_BATCH, len(self._queue)))]
                self._batch = [session for session, _line in batch]
            ok = self._write(batch)
            with self._cond:
                if not self._batch:  # close() gave up on this batch meanwhile
                    break
                for session in self._batch:
                    counts = self._counts[session]
                    counts.queued -= 1
                    if ok:
                        counts.written += 1
                    else:
                        counts.dropped_write_failed += 1
                self._batch = []
                self._cond.notify_all()
        self._close_file()

    def _write(self, batch: list[tuple[str, Mapping[str, Any]]]) -> bool:
        try:
            data = "".join(
                json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n"
                for _session, line in batch
            ).encode()
            if self._fd is None:
                # blocks on a FIFO with no reader: the thread parks here, no call does
                self._fd = os.open(
                    self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, FILE_MODE
                )
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
            return True
        except (OSError, TypeError, ValueError) as exc:
            # one line for the operator, without the lines; the next batch opens again
            log.warning(
                "ledger %s: a batch of %d line(s) was dropped: %s",
                self.path,
                len(batch),
                type(exc).__name__,
            )
            self._close_file()
            return False

    def _close_file(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
