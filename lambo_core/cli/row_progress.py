"""A row count's progress on a stream (`lambo store copy`): one redrawn line on a terminal
with count/total, rate and time left; elsewhere a plain line per 10% or per 5 seconds."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import IO

DRAWS_PER_SECOND = 10
PLAIN_EVERY_S = 5.0
PLAIN_STEP_PCT = 10


def _clock_text(seconds: float) -> str:
    whole = int(seconds + 0.5)
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class RowProgress:
    """Draws ``start``/``advance``/``finish`` of one total at a time."""

    def __init__(
        self,
        stream: IO[str],
        *,
        tty: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
        unit: str = "rows",
    ) -> None:
        self.stream = stream
        self.unit = unit
        self.tty = stream.isatty() if tty is None else tty
        self.clock = clock
        self.label, self.total, self.done = "", 0, 0
        self._began = self._last = 0.0
        self._last_step = 0
        self._width = 0

    def start(self, label: str, total: int) -> None:
        self.label, self.total, self.done = label, max(total, 0), 0
        self._began = self._last = self.clock()
        self._last_step = 0
        self._width = 0
        if self.tty:
            self._draw()

    def advance(self, rows: int) -> None:
        self.done += rows
        now = self.clock()
        if self.tty:
            if now - self._last >= 1 / DRAWS_PER_SECOND or self.done >= self.total:
                self._last = now
                self._draw()
            return
        step = self._pct() // PLAIN_STEP_PCT
        if step > self._last_step or now - self._last >= PLAIN_EVERY_S:
            self._last_step, self._last = step, now
            self._write(self._line() + "\n")

    def finish(self) -> None:
        elapsed = self.clock() - self._began
        line = f"{self.label}: {self.done}/{self.total} {self.unit} in {elapsed:.1f} s"
        self._write(("\r" + line.ljust(self._width) if self.tty else line) + "\n")

    def _pct(self) -> int:
        return 100 if self.total == 0 else min(100, self.done * 100 // self.total)

    def _line(self) -> str:
        elapsed = self.clock() - self._began
        rate = self.done / elapsed if elapsed > 0 else 0.0
        left = (self.total - self.done) / rate if rate > 0 else None
        eta = _clock_text(left) if left is not None else "?"
        return (
            f"{self.label}: {self.done}/{self.total} {self.unit} ({self._pct()}%), "
            f"{rate:,.0f} {self.unit}/s, {eta} left"
        )

    def _draw(self) -> None:
        line = self._line()
        self._width = max(self._width, len(line))
        self._write("\r" + line.ljust(self._width))

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()
