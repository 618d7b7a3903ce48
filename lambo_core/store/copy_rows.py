"""The rows a session already has in a copy's ``--to``, and whether ``--from`` has them too.

A row of ``--to`` agrees when ``--from`` has a row of the same key equal field for field
(a concept's vector by its bytes; an intent's ``seq`` aside, as each store numbers its own;
an intent still pending in ``--to`` that ``--from`` settled is one an interrupted copy
added and had not settled yet).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import astuple, dataclass, field, replace
from typing import Any, Protocol

from ..model import (
    CanonizationEvent,
    Concept,
    Edge,
    EdgeType,
    ForgetEvent,
    IntentState,
    Interaction,
    WriteIntent,
)
from .rows import vector_to_blob

EdgeKey = tuple[str, str, EdgeType]


class _Readable(Protocol):
    def interactions(self, session: str) -> Iterator[Interaction]: ...

    def concepts(self, session: str) -> Iterator[Concept]: ...

    def edges(self, session: str) -> Iterator[Edge]: ...

    def intents(self, session: str) -> Iterator[WriteIntent]: ...

    def canon_events(self, session: str) -> list[CanonizationEvent]: ...

    def forget_events(self, session: str) -> list[ForgetEvent]: ...


def concept_digest(c: Concept) -> tuple[Any, ...]:
    """Every field of a concept, its vector as a digest of its float32 bytes."""
    blob = vector_to_blob(c.vector)
    vector = None if blob is None else hashlib.blake2b(blob, digest_size=16).digest()
    return (*astuple(replace(c, vector=None)), vector)


def intent_key(i: WriteIntent) -> tuple[Any, ...]:
    """An intent's fields but the store's own ``seq``."""
    return (i.receipt_id, i.session, i.agent_id, i.tool, repr(i.payload), i.created_at,
            i.state, i.settled_at, repr(i.outcome), i.via)  # fmt: skip


def event_key(e: CanonizationEvent) -> tuple[Any, ...]:
    return astuple(e)


def _intent_agrees(there: WriteIntent, here: WriteIntent) -> bool:
    if intent_key(there) == intent_key(here):
        return True
    # added by an interrupted copy, not settled yet: the rest must agree
    unsettled = replace(here, state=IntentState.PENDING, settled_at=None, outcome=None)
    return there.state is IntentState.PENDING and intent_key(there) == intent_key(unsettled)


@dataclass
class RowKeys:
    """``--to``'s rows of one session, by key."""

    interactions: dict[str, Interaction] = field(default_factory=dict)
    concepts: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    edges: dict[EdgeKey, Edge] = field(default_factory=dict)
    intents: dict[str, WriteIntent] = field(default_factory=dict)
    events: Counter[tuple[Any, ...]] = field(default_factory=Counter)
    forgets: Counter[ForgetEvent] = field(default_factory=Counter)

    @property
    def empty(self) -> bool:
        return not (
            self.interactions
            or self.concepts
            or self.edges
            or self.intents
            or self.events
            or self.forgets
        )

    def compare(self, source: _Readable, session: str) -> str | None:
        """Why these rows conflict with ``source``'s rows of the session; None when each is
        there too, equal."""
        seen: set[object] = set()
        for i in source.interactions(session):
            if i.id in self.interactions:
                seen.add(i.id)
                if self.interactions[i.id] != i:
                    return f"its interaction {i.id} differs (table interactions)"
        for c in source.concepts(session):
            if c.id in self.concepts:
                seen.add(c.id)
                if self.concepts[c.id] != concept_digest(c):
                    return f"its concept {c.id} differs (table concepts)"
        for e in source.edges(session):
            key = (e.src, e.dst, e.edge_type)
            if key in self.edges:
                seen.add(key)
                if self.edges[key] != e:
                    kind = e.edge_type.value
                    return f"its edge {e.src} -> {e.dst} ({kind}) differs (table edges)"
        for w in source.intents(session):
            if w.receipt_id in self.intents:
                seen.add(w.receipt_id)
                if not _intent_agrees(self.intents[w.receipt_id], w):
                    return f"its write intent {w.receipt_id} differs (table write_intents)"
        return self._extra(seen) or self._extra_events(source, session)

    def _extra(self, seen: set[object]) -> str | None:
        tables: list[tuple[str, Any]] = [
            ("interactions", self.interactions),
            ("concepts", self.concepts),
            ("edges", self.edges),
            ("write_intents", self.intents),
        ]
        for table, rows in tables:
            extra = [key for key in rows if key not in seen]
            if extra:
                return f"has {len(extra)} row(s) of table {table} that --from lacks"
        return None

    def _extra_events(self, source: _Readable, session: str) -> str | None:
        """Events have no id: any of ``--to``'s beyond the equal ones ``--from`` has."""
        extra: list[tuple[str, Counter[Any]]] = [
            (
                "canonization_events",
                self.events - Counter(event_key(e) for e in source.canon_events(session)),
            ),
            ("forget_events", self.forgets - Counter(source.forget_events(session))),
        ]
        for table, missing in extra:
            if missing:
                total = sum(missing.values())
                return f"has {total} row(s) of table {table} that --from lacks"
        return None
