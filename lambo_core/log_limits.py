"""Logging that neither floods stderr nor blocks on it.

A client can send a serve any number of bad lines, and a client may never read
the serve's stderr pipe. So warnings about bad input are rate-limited
(``RateLimitedWarnings``: the first few of each interval one by one, then one
summary line with the count), and every log record goes through a bounded
queue to one writer thread (``install_stderr_queue``). A record is waited for
until written (so log lines and the CLI's own stderr lines keep their order),
but only ``SYNC_WAIT_S`` and only while stderr keeps up: once a write stalls,
records are queued without waiting, and dropped and counted when the queue is
full, until the writer catches up; so neither the event loop nor the stdin
reader can stall on a pipe nobody drains.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import IO

QUEUE_RECORDS = 1000
"""How many log records may wait for stderr before new ones are dropped."""
SYNC_WAIT_S = 0.25
"""How long a logging call waits for its record to be written while stderr keeps up."""
EXIT_FLUSH_S = 1.0
"""How long an exiting process waits for queued records to reach stderr."""


class RateLimitedWarnings:
    """WARN lines about one kind of event, at most ``burst`` per ``interval`` seconds.

    Past the burst, events are counted; the first event after the interval ends
    (or ``flush``) logs one summary line with the count and starts a new interval.
    """

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        burst: int = 5,
        interval: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self._what = what
        self._burst = burst
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._window_start = clock()
        self._logged = 0
        self._suppressed = 0

    @property
    def suppressed(self) -> int:
        """Events counted but not yet logged one by one or in a summary."""
        return self._suppressed

    def warning(self, message: str, *args: object) -> None:
        with self._lock:
            now = self._clock()
            if now - self._window_start >= self._interval:
                self._summarize(now)
            if self._logged < self._burst:
                self._logged += 1
                self._log.warning(message, *args)
                return
            self._suppressed += 1

    def flush(self) -> None:
        """Log the summary of what was counted so far (at the end of input, say)."""
        with self._lock:
            self._summarize(self._clock())

    def _summarize(self, now: float) -> None:
        if self._suppressed:
            self._log.warning(
                "%d more %s in the last %.0f s were not logged one by one",
                self._suppressed,
                self._what,
                now - self._window_start,
            )
        self._window_start = now
        self._logged = 0
        self._suppressed = 0


class DroppingQueueHandler(logging.handlers.QueueHandler):
    """A QueueHandler that never blocks long: waits briefly while stderr keeps up, else
    queues, and drops (and counts) a record when its bounded queue is full."""

    def __init__(self, records: queue.Queue[logging.LogRecord]) -> None:
        super().__init__(records)
        self._records = records
        self._dropped_lock = threading.Lock()
        self.dropped = 0
        self._stalled = False  # a write outlasted SYNC_WAIT_S and the queue has not drained

    def enqueue(self, record: logging.LogRecord) -> None:
        records = self._records
        try:
            records.put_nowait(record)
        except queue.Full:
            with self._dropped_lock:
                self.dropped += 1
            return
        if self._stalled and records.unfinished_tasks > 1:
            return  # still behind: do not wait again
        self._stalled = not self._wait_written(SYNC_WAIT_S)

    def _wait_written(self, timeout: float) -> bool:
        records = self._records
        with records.all_tasks_done:
            return records.all_tasks_done.wait_for(
                lambda: records.unfinished_tasks == 0, timeout=timeout
            )

    def flush(self) -> None:
        """Wait (up to ``EXIT_FLUSH_S``) for queued records to be written.

        ``logging.shutdown`` calls this at exit, so the last lines are not lost; a
        stderr nobody reads cannot hold the exit longer than that.
        """
        self._wait_written(EXIT_FLUSH_S)

    def take_dropped(self) -> int:
        with self._dropped_lock:
            dropped, self.dropped = self.dropped, 0
        return dropped


class _StderrWriter:
    """The one thread that writes queued records to the stream.

    It writes to the stream's file descriptor directly (``os.write``), so while it
    is blocked on a full pipe it holds no lock anything else needs: not the
    stream's buffer (the interpreter's exit flushes that) and not a logging
    handler's (``logging.shutdown`` takes each). Before a record, it notes how
    many were dropped.
    """

    def __init__(
        self, records: queue.Queue[logging.LogRecord], stream: IO[str], front: DroppingQueueHandler
    ) -> None:
        self._records = records
        self._stream = stream
        self._front = front
        self.formatter = logging.Formatter()
        try:
            self._fd: int | None = stream.fileno()
        except (AttributeError, OSError, ValueError):
            self._fd = None  # no descriptor (a test's StringIO): write through the stream
        self._encoding = getattr(stream, "encoding", None) or "utf-8"
        self._thread = threading.Thread(target=self._run, name="lambo-log", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while True:
            record = self._records.get()
            try:
                dropped = self._front.take_dropped()
                if dropped:
                    self._write(self._note(record, dropped))
                self._write(record)
            except Exception:  # a log line must never end the writer
                pass
            finally:
                self._records.task_done()

    def _note(self, record: logging.LogRecord, dropped: int) -> logging.LogRecord:
        return logging.LogRecord(
            record.name,
            logging.WARNING,
            __file__,
            0,
            "%d log lines were dropped: stderr was not being read",
            (dropped,),
            None,
        )

    def _write(self, record: logging.LogRecord) -> None:
        line = self.formatter.format(record) + "\n"
        if self._fd is None:
            self._stream.write(line)
            self._stream.flush()
            return
        data = memoryview(line.encode(self._encoding, "backslashreplace"))
        while data:
            data = data[os.write(self._fd, data) :]


def install_stderr_queue(
    stream: IO[str], level: int, fmt: str, *, capacity: int = QUEUE_RECORDS
) -> DroppingQueueHandler | None:
    """Route the root logger through a bounded queue to one daemon thread writing ``stream``.

    Like ``logging.basicConfig``, does nothing (None) when the root logger already
    has handlers (a test's log capture, an embedding program). At exit
    (``logging.shutdown``), queued records get up to ``EXIT_FLUSH_S`` to be
    written; a stderr nobody reads cannot hold the exit.
    """
    root = logging.getLogger()
    if root.handlers:
        return None
    records: queue.Queue[logging.LogRecord] = queue.Queue(capacity)
    front = DroppingQueueHandler(records)
    writer = _StderrWriter(records, stream, front)
    writer.formatter = logging.Formatter(fmt)
    writer.start()
    root.addHandler(front)
    root.setLevel(level)
    return front
