"""A download's progress on a stream: one redrawn line on a terminal, a line per 10% elsewhere."""

from __future__ import annotations

import sys
import time
from typing import IO


def human_size(n: float) -> str:
    """``n`` bytes as people read them: ``512 B``, ``1.5 MB``."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


class Progress:
    """A progress bar on a stream. On a terminal it redraws one line (at most
    ten times a second); elsewhere (a log, a pipe, CI) it prints a line each
    time another 10% is done, so the output stays readable."""

    def __init__(self, label: str, total: int, stream: IO[str], *, tty: bool | None = None) -> None:
        self.label = label
        self.total = max(total, 0)
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self._last_step = -1
        self._last_draw = 0.0
        self._drawn = False

    def _pct(self, done: int) -> int:
        return 100 if self.total == 0 else min(100, done * 100 // self.total)

    def begin(self, done: int) -> None:
        if done:
            self.note(f"resuming {self.label} at {self._pct(done)}% ({human_size(done)})")
        self.update(done, force=True)

    def update(self, done: int, *, force: bool = False) -> None:
        pct = self._pct(done)
        if self.tty:
            now = time.monotonic()
            if force or done >= self.total or now - self._last_draw >= 0.1:
                filled = pct * 30 // 100
                bar = "#" * filled + "." * (30 - filled)
                self.stream.write(
                    f"\r{self.label} [{bar}] {pct:3d}% {human_size(done)}/{human_size(self.total)}"
                )
                self.stream.flush()
                self._last_draw = now
                self._drawn = True
            return
        step = pct // 10
        if step > self._last_step:
            self._last_step = step
            done_of = f"{human_size(done)} of {human_size(self.total)}"
            self.stream.write(f"{self.label}: {pct:3d}% ({done_of})\n")
            self.stream.flush()

    def note(self, text: str) -> None:
        if self.tty and self._drawn:
            self.stream.write("\n")
            self._drawn = False
        self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.tty and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False


class NoProgress(Progress):
    """Prints nothing (a pull asked to be quiet)."""

    def __init__(self) -> None:
        super().__init__("", 0, sys.stderr, tty=False)

    def update(self, done: int, *, force: bool = False) -> None:
        pass

    def note(self, text: str) -> None:
        pass

    def begin(self, done: int) -> None:
        pass

    def finish(self) -> None:
        pass
