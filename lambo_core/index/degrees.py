"""Each node's edge count and the highest count of any concept, kept exact as edges change.

The base score's density term divides by the session's highest degree; the graph keeps it
here on every add and remove instead of a pass over the adjacency per read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Container, Mapping


class DegreeCount:
    """Edges per node (all types, both directions) and how many concepts have each count.

    A node that is not a concept (an interaction) has a count but is never the highest.
    The highest moves down only when the last concept holding it loses an edge, and then
    by one step per count no concept has, so every change costs O(1) amortised.
    """

    def __init__(self) -> None:
        self._degree: dict[str, int] = {}
        self._concepts_at: Counter[int] = Counter()  # count (> 0) -> concepts with it
        self._highest = 0

    @property
    def highest(self) -> int:
        return self._highest

    def of(self, node_id: str) -> int:
        return self._degree.get(node_id, 0)

    def bump(self, node_id: str, delta: int, *, concept: bool) -> None:
        """``node_id`` gained (``delta`` > 0) or lost edges; ``concept`` says it is one."""
        old = self._degree.get(node_id, 0)
        new = old + delta
        if new:
            self._degree[node_id] = new
        else:
            self._degree.pop(node_id, None)
        if concept:
            self._leave(old)
            self._enter(new)

    def admit(self, node_id: str) -> None:
        """``node_id`` became a concept: its edges (maybe written first) now count."""
        self._enter(self._degree.get(node_id, 0))

    def retire(self, node_id: str) -> None:
        """``node_id`` stopped being a concept; ``forget`` drops its count once its edges go."""
        self._leave(self._degree.get(node_id, 0))

    def forget(self, node_id: str) -> None:
        self._degree.pop(node_id, None)

    def recount(self, degrees: Mapping[str, int], concepts: Container[str]) -> None:
        """Start over from every node's count (a bulk load of edges)."""
        self._degree = dict(degrees)
        self._concepts_at = Counter(n for node, n in self._degree.items() if node in concepts)
        self._highest = max(self._concepts_at, default=0)

    def _enter(self, count: int) -> None:
        if count > 0:
            self._concepts_at[count] += 1
            if count > self._highest:
                self._highest = count

    def _leave(self, count: int) -> None:
        if count <= 0:
            return
        left = self._concepts_at[count] - 1
        if left:
            self._concepts_at[count] = left
            return
        del self._concepts_at[count]
        while self._highest > 0 and self._highest not in self._concepts_at:
            self._highest -= 1
