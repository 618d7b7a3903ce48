"""SQLite rows of the store's tables, and the model objects they are read into.

The column lists here are the order every ``INSERT`` and ``SELECT`` of
``SqliteStore`` uses; the schema itself is in ``migrations.py``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from ..model import (
    CanonizationEvent,
    Concept,
    ConceptType,
    Edge,
    EdgeType,
    IntentState,
    Interaction,
    InteractionKind,
    Lease,
    SessionRecord,
    Status,
    WriteIntent,
)
from .rows import blob_to_vector, vector_to_blob

CONCEPT_COLUMNS = (
    "id, session, content, canonical_key, concept_type, status, created_at, about_time, "
    "agent_id, interaction_id, access_count, vector, repo_scope, gc_survived, vector_source"
)
# The same list with NULL in the vector's place: a listing that leaves vectors out.
CONCEPT_COLUMNS_NO_VECTOR = CONCEPT_COLUMNS.replace(" vector,", " NULL,", 1)
CONCEPT_MARKS = ", ".join("?" * len(CONCEPT_COLUMNS.split(",")))
EDGE_COLUMNS = (
    "session, src, dst, edge_type, weight, interaction_id, agent_id, created_at, about_time"
)
INTENT_COLUMNS = (
    "receipt_id, session, agent_id, tool, payload, created_at, seq, state, settled_at, outcome, via"
)
CANON_EVENT_COLUMNS = "session, node_id, from_status, to_status, blast_radius, occurred_at"
LEASE_COLUMNS = "session, holder, pid, agent, acquired_at, heartbeat_at, expires_at, token, socket"
SESSION_COLUMNS = (
    "name, created_at, embedding_contract, last_gc_at, last_gc_epoch, mutation_count, shared_layer"
)


def session_from(row: tuple[Any, ...]) -> SessionRecord:
    return SessionRecord(
        name=row[0],
        created_at=row[1],
        embedding_contract=json.loads(row[2]) if row[2] is not None else None,
        last_gc_at=row[3],
        last_gc_epoch=row[4],
        mutation_count=row[5],
        shared_layer=bool(row[6]),
    )


def concept_row(c: Concept) -> tuple[Any, ...]:
    return (
        c.id, c.session, c.content, c.canonical_key, c.concept_type.value, c.status.value,
        c.created_at, c.about_time, c.agent_id, c.interaction_id, c.access_count,
        vector_to_blob(c.vector), c.repo_scope, c.gc_survived, c.vector_source,
    )  # fmt: skip


def concept_from(row: tuple[Any, ...]) -> Concept:
    return Concept(
        id=row[0],
        session=row[1],
        content=row[2],
        canonical_key=row[3],
        concept_type=ConceptType(row[4]),
        status=Status(row[5]),
        created_at=row[6],
        about_time=row[7],
        agent_id=row[8],
        interaction_id=row[9],
        access_count=row[10],
        vector=blob_to_vector(row[11]),
        repo_scope=row[12],
        gc_survived=row[13],
        vector_source=source_from(row[14]),
    )


def source_from(value: str | None) -> str | None:
    """A stored vector_source, interned: a few distinct values over many held concepts."""
    return None if value is None else sys.intern(value)


def edge_from(row: tuple[Any, ...]) -> Edge:
    return Edge(
        session=row[0],
        src=row[1],
        dst=row[2],
        edge_type=EdgeType(row[3]),
        weight=row[4],
        interaction_id=row[5],
        agent_id=row[6],
        created_at=row[7],
        about_time=row[8],
    )


def interaction_from(row: tuple[Any, ...]) -> Interaction:
    return Interaction(
        id=row[0],
        session=row[1],
        agent_id=row[2],
        kind=InteractionKind(row[3]),
        created_at=row[4],
        about_time=row[5],
        summary=row[6],
    )


def intent_from(row: tuple[Any, ...]) -> WriteIntent:
    return WriteIntent(
        receipt_id=row[0],
        session=row[1],
        agent_id=row[2],
        tool=row[3],
        payload=json.loads(row[4]),
        created_at=row[5],
        seq=row[6],
        state=IntentState(row[7]),
        settled_at=row[8],
        outcome=json.loads(row[9]) if row[9] is not None else None,
        via=row[10],
    )


def lease_row(lease: Lease) -> tuple[Any, ...]:
    return (
        lease.session, lease.holder, lease.pid, lease.agent, lease.acquired_at,
        lease.heartbeat_at, lease.expires_at, lease.token, lease.socket,
    )  # fmt: skip


def lease_from(row: tuple[Any, ...]) -> Lease:
    return Lease(
        session=row[0],
        holder=row[1],
        pid=row[2],
        agent=row[3],
        acquired_at=row[4],
        heartbeat_at=row[5],
        expires_at=row[6],
        token=row[7],
        socket=row[8],
    )


def canon_event_from(row: tuple[Any, ...]) -> CanonizationEvent:
    return CanonizationEvent(
        session=row[0],
        node_id=row[1],
        from_status=Status(row[2]),
        to_status=Status(row[3]),
        blast_radius=row[4],
        occurred_at=row[5],
    )
