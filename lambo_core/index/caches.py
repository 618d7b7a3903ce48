"""Caches a session's index owns: recall's leg results and each concept's edge summary.

Both are created with their ``SessionIndex`` and go with it. The leg cache has a lock of
its own (recall's legs run without the index lock); the edge summaries are read and
written only under the index lock, so a lookup on the scoring path is a plain dict get.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..model import Vector

LEG_CACHE_SIZE = 128  # recalls remembered per session
SUMMARY_CACHE_SIZE = 200_000  # about 250 bytes each: 50 MB at most, 25 MB at 100k concepts

# (edge count, edge bonus, latest edge time, interactions that wrote it or an edge of it)
EdgeSummary = tuple[int, float, float, int]


@dataclass
class LegResults:
    """Raw leg results, best first: [(node id, raw score)].

    ``depth`` is how many candidates each leg was asked for; ``vector_ran`` says
    the vector leg searched (so keyword and vector scores are fused).
    """

    keyword: list[tuple[str, float]] = field(default_factory=list)
    vector: list[tuple[str, float]] = field(default_factory=list)
    recent: list[tuple[str, float]] = field(default_factory=list)
    # the exact names the question carries (recall/names.py), and what the keyword index
    # holds for each; which of these really carry a name is checked against their text
    names: tuple[str, ...] = ()
    named: list[tuple[str, float]] = field(default_factory=list)
    depth: int = 0
    vector_ran: bool = False
    # the question's embedding when the vector leg ran: a hit's cosine to it is its
    # relevance on one scale across sessions (a layer's relevance floor)
    query_vector: Vector | None = None


class LegCache:
    """The last ``LEG_CACHE_SIZE`` recalls' leg results, keyed on the graph version and query."""

    def __init__(self, size: int = LEG_CACHE_SIZE) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, LegResults] = OrderedDict()

    def get(self, key: Hashable) -> LegResults | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def put(self, key: Hashable, value: LegResults) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)


class EdgeSummaries(dict[str, tuple[int, EdgeSummary]]):
    """node id -> (the graph's edge stamp for it then, its edge summary).

    A summary is valid while the stamp holds: a write elsewhere in the session leaves
    it valid, so a concept seen before is scored with one lookup (a plain dict get on
    the scoring path). New concepts stop being added at ``capacity``; ones already
    held are still refreshed. ``warming`` is the background thread filling a large
    session's summaries, if one was started. The session index's summaries are
    guarded by its lock: every caller holds it.
    """

    def __init__(self, capacity: int = SUMMARY_CACHE_SIZE) -> None:
        super().__init__()
        self.capacity = capacity
        self.warming: threading.Thread | None = None

    def full(self) -> bool:
        return len(self) >= self.capacity

    def keep(self, node_id: str, stamp: int, summary: EdgeSummary) -> None:
        if node_id in self or len(self) < self.capacity:
            self[node_id] = (stamp, summary)
