"""A real store that refuses the writes a test names, as a full or read-only disk would."""

from __future__ import annotations

import threading
from typing import Any

from lambo_core.errors import StoreError
from lambo_core.store.rows import WRITE_REFUSED


class FlakyStore:
    """Delegates to ``inner``; each method named in ``refuse`` raises the store's own
    write refusal (``times[name]`` more times, or until taken out of ``refuse``)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.refuse: set[str] = set()
        self.times: dict[str, int] = {}
        self.refused: dict[str, int] = {}
        self._lock = threading.Lock()

    def _maybe_refuse(self, name: str) -> None:
        with self._lock:
            if name not in self.refuse:
                return
            left = self.times.get(name)
            if left is not None:
                if left <= 0:
                    self.refuse.discard(name)
                    return
                self.times[name] = left - 1
            self.refused[name] = self.refused.get(name, 0) + 1
        raise StoreError(WRITE_REFUSED, detail="database or disk is full")

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self._maybe_refuse(name)
            return attr(*args, **kwargs)

        return call
