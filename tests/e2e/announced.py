"""A lambo process that announces its address on stderr (started on --port 0, the address
read back from its start line), its stderr kept, stopped with SIGTERM: the HTTP serve's and
serve-web's e2e handles share it."""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import threading
from pathlib import Path

START_BOUND_S = 120.0  # a start past this is a failure, not a slow machine


class AnnouncedProcess:
    """One process; ``base`` is the address its start line names, once it is printed."""

    def __init__(self, argv: list[str], home: Path, env: dict[str, str], line: re.Pattern[str]):
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=home,
        )
        self._line = line
        self.lines: list[str] = []
        self.base: str | None = None
        self._announced = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            found = self._line.search(line)
            if found and self.base is None:
                self.base = found.group(1)
                self._announced.set()
        self._announced.set()  # the process ended: whoever waits hears it

    @property
    def log(self) -> str:
        return "\n".join(self.lines)

    def wait_announced(self, what: str) -> str:
        """The address, once the start line names it (``what``: the process, for a failure)."""
        assert self._announced.wait(START_BOUND_S), f"{what} did not start in time"
        assert self.base is not None, f"{what} ended before it started:\n{self.log}"
        return self.base

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, then the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        self._reader.join(10)
        return code

    def wait_exit(self, timeout: float = 120.0) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(10)
        return code

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._reader.join(10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
