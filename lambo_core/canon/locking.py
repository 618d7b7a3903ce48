"""The index lock held only when the caller is not the session's writer thread."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def held_when(lock: threading.RLock, hold: bool) -> Iterator[None]:
    """``lock`` held for the block when ``hold``, else nothing.

    The writer thread is the only one that changes the graph, so it may read it unlocked.
    """
    if not hold:
        yield
        return
    with lock:
        yield
