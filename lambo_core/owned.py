"""State kept per live object (a session, its graph or index) and dropped with it.

Caches and registries across the package hang RAM state off a session or its
graph: the leg cache, edge summaries, the score table, the demotion log, the
running daemon. Each is a ``PerOwner``: weak keys (the state goes when its
owner is collected, so a closed session leaks nothing) under one lock.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class PerOwner(Generic[K, V]):
    """One value per live owner; ``make`` builds it on first ``get``."""

    def __init__(self, make: Callable[[], V] | None = None) -> None:
        self._make = make
        self._values: weakref.WeakKeyDictionary[K, V] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def get(self, owner: K) -> V:
        """The owner's value, made now if it has none (needs ``make``)."""
        with self._lock:
            value = self._values.get(owner)
            if value is None:
                if self._make is None:
                    raise KeyError("no value for this owner and nothing to make one with")
                value = self._values[owner] = self._make()
            return value

    def peek(self, owner: K) -> V | None:
        """The owner's value, or None (never makes one)."""
        with self._lock:
            return self._values.get(owner)

    def put(self, owner: K, value: V) -> None:
        with self._lock:
            self._values[owner] = value

    def setdefault(self, owner: K, value: V) -> V:
        """The value already held, else ``value`` (kept): first writer wins."""
        with self._lock:
            return self._values.setdefault(owner, value)
