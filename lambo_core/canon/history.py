"""The demotion history: each concept's latest demotion and why, and recall's superseded line.

Spec: "Superseded concepts" (the ``⤓ Superseded at …`` line) and lambo_inspect's
``last_demotion``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..index.graph import SessionGraph
from ..model import CanonizationEvent, EdgeType, Status, short_id
from ..text import format_rfc3339, show_safely
from .evidence import newer_sides
from .rules import QUOTE_CHARS, RANK, CanonRules, Reason

if TYPE_CHECKING:
    from ..session import Session


@dataclass(frozen=True)
class Demotion:
    """A concept's latest demotion: when, from and to, and why."""

    node_id: str
    at: float
    from_status: Status
    to_status: Status
    reason: Reason
    by: str | None = None  # the superseding concept, for reason "superseded"


class DemotionLog:
    """Each concept's latest demotion, in RAM."""

    def __init__(self) -> None:
        self._last: dict[str, Demotion] = {}
        self._lock = threading.Lock()

    def get(self, node_id: str) -> Demotion | None:
        with self._lock:
            return self._last.get(node_id)

    def record(self, demotion: Demotion) -> None:
        with self._lock:
            self._last[demotion.node_id] = demotion

    def __len__(self) -> int:
        with self._lock:
            return len(self._last)

    @classmethod
    def rebuild(
        cls, events: Iterable[CanonizationEvent], graph: SessionGraph, rules: CanonRules
    ) -> DemotionLog:
        """From stored events: the last demotion per concept, its reason worked out again.

        A demotion reads as superseded when, at its time, a contradicting concept
        held newer evidence (the rule the cycle used), or failing that, when a
        contradiction of the concept dated before it is still in memory; else budget.
        """
        last: dict[str, CanonizationEvent] = {}
        for event in events:
            if RANK[event.to_status] < RANK[event.from_status]:
                last[event.node_id] = event
        out = cls()
        for node_id, event in last.items():
            reason, by = _reason(graph, node_id, event.occurred_at, rules)
            out._last[node_id] = Demotion(
                node_id, event.occurred_at, event.from_status, event.to_status, reason, by
            )
        return out


def _reason(
    graph: SessionGraph, node_id: str, at: float, rules: CanonRules
) -> tuple[Reason, str | None]:
    """Why a stored demotion at ``at`` happened, as far as memory still tells."""
    sides = newer_sides(graph, node_id, at, rules)
    if sides:
        return "superseded", sides[0].by
    dated = sorted(
        (
            e
            for e in graph.edges_in(node_id, (EdgeType.CONTRADICTS,))
            if e.src in graph and e.about_time <= at
        ),
        key=lambda e: (-e.about_time, e.src),
    )
    if dated:
        return "superseded", dated[0].src
    return "budget", None


@dataclass(frozen=True)
class SupersededLine:
    """The recall history line of a superseded concept (annotation kind ``superseded``)."""

    node_id: str
    at: float
    by: str
    by_content: str | None  # None once the superseding concept is no longer in memory

    kind: str = "superseded"

    def render(self) -> str:
        when = format_rfc3339(self.at)
        if self.by_content is None:
            return (
                f"⤓ Superseded at {when} by a concept no longer in memory (id {short_id(self.by)})"
            )
        quoted = show_safely(self.by_content, QUOTE_CHARS)
        return f'⤓ Superseded at {when} by "{quoted}" (id {short_id(self.by)})'


class CanonHistory:
    """One session's demotion history under its ``[canonization]`` rules.

    Made once with its rules where its owner is made (the daemon, or the service where no
    daemon runs) and handed to whoever reads or records it: the cycle, inspect's admission,
    recall's history line. The log is rebuilt from the stored events on first use.
    """

    def __init__(self, session: Session, rules: CanonRules) -> None:
        self.session = session
        self.rules = rules
        self._log: DemotionLog | None = None
        self._lock = threading.Lock()

    def log(self) -> DemotionLog:
        """The demotion log, rebuilt from the store on first use (raises StoreError)."""
        with self._lock:
            found = self._log
        if found is not None:
            return found
        session = self.session
        events = session.store.canon_events(session.name)
        with session.index.lock:
            built = DemotionLog.rebuild(events, session.index.graph, self.rules)
        with self._lock:  # two first readers: the first log kept wins
            if self._log is None:
                self._log = built
            return self._log

    def superseded(self, node_id: str) -> SupersededLine | None:
        """What recall shows on ``node_id``: its ``⤓ Superseded at …`` line, or None.

        A line exists while the concept is not Canonical and its latest demotion was
        a supersession (a later budget demotion replaces it). Takes the (reentrant)
        index lock itself. Raises ``StoreError`` if the first read of the log fails.
        """
        demotion = self.log().get(node_id)
        if demotion is None or demotion.reason != "superseded" or demotion.by is None:
            return None
        with self.session.index.lock:
            graph = self.session.index.graph
            concept = graph.concept(node_id)
            if concept is None or concept.status is Status.CANONICAL:
                return None
            by = graph.concept(demotion.by)
            return SupersededLine(node_id, demotion.at, demotion.by, by.content if by else None)
