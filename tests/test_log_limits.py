"""Logging that neither floods nor blocks: rate-limited warnings, a queue that drops."""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading

import pytest

from lambo_core.log_limits import DroppingQueueHandler, RateLimitedWarnings, _StderrWriter

FAILURE_BOUND_S = 30.0  # a hang fails the test; nothing here is timed


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_warnings_past_the_burst_are_counted_and_summarized(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    logger = logging.getLogger("test.log_limits")
    limited = RateLimitedWarnings(logger, "bad lines", burst=3, interval=10.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger="test.log_limits"):
        for i in range(1000):
            limited.warning("bad line %d", i)
        assert [r.getMessage() for r in caplog.records] == [f"bad line {i}" for i in range(3)]
        assert limited.suppressed == 997
        clock.now = 11.0
        limited.warning("bad line after the interval")
        messages = [r.getMessage() for r in caplog.records]
        assert messages[3] == "997 more bad lines in the last 11 s were not logged one by one"
        assert messages[4] == "bad line after the interval"
        limited.flush()  # nothing counted since: no summary
        assert len(caplog.records) == 5


def test_a_stderr_nobody_reads_never_blocks_the_logging_caller() -> None:
    read_end, write_end = os.pipe()
    stream = os.fdopen(write_end, "w", buffering=1)
    records: queue.Queue[logging.LogRecord] = queue.Queue(50)
    front = DroppingQueueHandler(records)
    _StderrWriter(records, stream, front).start()
    logger = logging.getLogger("test.log_limits.blocked")
    logger.propagate = False
    logger.addHandler(front)
    done = threading.Event()

    def flood() -> None:
        for i in range(20_000):  # about 1.5 MB: far past what a pipe holds
            logger.warning("a line that nobody reads, number %d, padded %s", i, "x" * 40)
        done.set()

    try:
        threading.Thread(target=flood, daemon=True).start()
        assert done.wait(FAILURE_BOUND_S), "logging blocked on a full stderr"
        assert front.dropped > 0
        # Reading the pipe lets the writer go on; it reports the drops in the log.
        os.set_blocking(read_end, False)
        seen = b""
        while b"log lines were dropped" not in seen:
            logger.warning("after the reader came back")
            with contextlib.suppress(BlockingIOError):
                seen += os.read(read_end, 1 << 20)
            assert len(seen) < 50_000_000
    finally:
        logger.removeHandler(front)
        # Let the writer finish what it took before its pipe closes: read the pipe until
        # the queue is joined, then close the write end, which ends the reader.
        os.set_blocking(read_end, True)
        reader = threading.Thread(target=drain, args=(read_end,), daemon=True)
        reader.start()
        joined = threading.Thread(target=records.join, daemon=True)
        joined.start()
        joined.join(FAILURE_BOUND_S)
        stream.close()
        reader.join(FAILURE_BOUND_S)
        os.close(read_end)
        assert not joined.is_alive(), "the writer never finished its queue"


def drain(fd: int) -> None:
    """Read a pipe until its write end is closed."""
    while os.read(fd, 1 << 20):
        pass
