"""The web window's feed: the writes the store has settled (its write intents) and the
promotions and demotions it recorded (its canonization events), oldest first.

A cursor is the microsecond of the last event a client saw; an event is newer than the
cursor when its moment is later. Only what the server itself wrote is shown: the
settlement's ``detail`` line and the created concepts' labels, never an intent's payload
(a caller's raw arguments).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..index.graph import SessionGraph
from ..model import CanonizationEvent, IntentState, Status, WriteIntent, short_id
from ..store.base import Store
from ..text import format_rfc3339, show_safely

EVENTS_MAX = 200  # events one answer carries
LATEST_DEFAULT = 50  # events of an answer with no cursor: the most recent ones
DETAIL_CHARS = 200
LABEL_CHARS = 80
LABELS_MAX = 8  # created concepts named per write

_RANK = {status: i for i, status in enumerate(Status)}


@dataclass(frozen=True)
class Feed:
    """One answer of /api/events."""

    events: list[dict[str, Any]]
    cursor: int
    more: bool

    def as_dict(self) -> dict[str, Any]:
        return {"events": self.events, "cursor": self.cursor, "more": self.more}


def to_cursor(moment: float) -> int:
    return round(moment * 1_000_000)


def read_feed(store: Store, session: str, graph: SessionGraph, since: int | None) -> Feed:
    """The events after ``since`` (None: the latest ``LATEST_DEFAULT``), at most
    ``EVENTS_MAX`` of them, and the cursor to ask with next."""
    events = [_write_event(i, graph) for i in store.intents(session) if _settled(i)]
    events += [_canon_event(e, graph) for e in store.canon_events(session)]
    events.sort(key=lambda e: (e["cursor"], e["kind"], e["node_id"]))
    if since is None:
        chosen = events[-LATEST_DEFAULT:]
        more = False
    else:
        newer = [e for e in events if e["cursor"] > since]
        chosen, more = newer[:EVENTS_MAX], len(newer) > EVENTS_MAX
    cursor = chosen[-1]["cursor"] if chosen else (since or 0)
    return Feed(chosen, cursor, more)


def last_write_at(store: Store, session: str) -> float | None:
    """When the session's latest write was settled, or None before its first."""
    settled = [i.settled_at for i in store.intents(session) if _settled(i) and i.settled_at]
    return max(settled) if settled else None


def _settled(intent: WriteIntent) -> bool:
    return intent.state is not IntentState.PENDING and intent.settled_at is not None


def _write_event(intent: WriteIntent, graph: SessionGraph) -> dict[str, Any]:
    at = intent.settled_at or intent.created_at
    outcome = intent.outcome or {}
    data = outcome.get("data") if isinstance(outcome.get("data"), dict) else {}
    created = [c for c in (data or {}).get("created", []) if isinstance(c, str)]
    labels = []
    for node_id in created[:LABELS_MAX]:
        concept = graph.concept(node_id)
        if concept is not None:
            labels.append({"node_id": node_id, "label": show_safely(concept.content, LABEL_CHARS)})
    detail = outcome.get("detail")
    return {
        "kind": "write",
        "cursor": to_cursor(at),
        "at": format_rfc3339(at),
        "node_id": intent.receipt_id,
        "tool": intent.tool,
        "agent_id": intent.agent_id,
        "state": intent.state.value,
        "detail": show_safely(detail, DETAIL_CHARS) if isinstance(detail, str) else "",
        "created": labels,
        "created_count": len(created),
    }


def _canon_event(event: CanonizationEvent, graph: SessionGraph) -> dict[str, Any]:
    up = _RANK[event.to_status] > _RANK[event.from_status]
    concept = graph.concept(event.node_id)
    return {
        "kind": "promotion" if up else "demotion",
        "cursor": to_cursor(event.occurred_at),
        "at": format_rfc3339(event.occurred_at),
        "node_id": event.node_id,
        "short_id": short_id(event.node_id),
        "label": show_safely(concept.content, LABEL_CHARS) if concept is not None else None,
        "from": event.from_status.label,
        "to": event.to_status.label,
        "blast_radius": event.blast_radius,
    }
