"""The Store protocol: durable state behind one small interface.

Two implementations: ``SqliteStore`` (one file, many sessions; WAL; FTS5) and
``MemoryStore`` (RAM, for tests and ``--store memory``). Both pass the same
test suite through one parametrized fixture.

Rules every implementation keeps:
- A store holds many sessions; every row belongs to exactly one session.
- ``apply`` commits a whole ``WriteBatch`` (interaction, concepts, edges and
  the intent's settlement) in one transaction, or nothing.
- An edge is unique on (session, src, dst, edge_type); writing it again
  reinforces it (weight + 1.0, capped at 10) and keeps its first
  interaction, agent and times.
- Vectors are stored as little-endian float32 bytes.
- Failures raise ``StoreError`` with a caller-safe message; driver text goes
  into its ``detail`` only.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from ..model import (
    CanonizationEvent,
    Concept,
    Edge,
    EdgeType,
    Interaction,
    Lease,
    SessionRecord,
    Status,
    WriteBatch,
    WriteIntent,
)

EDGE_WEIGHT_CAP = 10.0


class KeywordIndex(Protocol):
    """Keyword search over one session's concept contents (BM25, higher is better)."""

    def search(self, query: str, limit: int) -> list[tuple[str, float]]: ...


class Store(Protocol):
    kind: str  # "sqlite" | "memory"
    has_vector_search: bool

    # -- schema -------------------------------------------------------------
    def schema_version(self) -> int: ...

    def close(self) -> None: ...

    # -- sessions ------------------------------------------------------------
    def ensure_session(self, name: str, now: float) -> SessionRecord: ...

    def get_session(self, name: str) -> SessionRecord | None: ...

    def list_sessions(self) -> list[SessionRecord]: ...

    def stamp_contract(self, name: str, contract: dict[str, Any]) -> None: ...

    def set_gc_clock(self, name: str, last_gc_at: float | None, last_gc_epoch: int) -> None: ...

    # -- graph ---------------------------------------------------------------
    def apply(self, batch: WriteBatch) -> None: ...

    def concepts(self, session: str) -> Iterator[Concept]: ...

    def get_concept(self, session: str, node_id: str) -> Concept | None: ...

    def edges(self, session: str) -> Iterator[Edge]: ...

    def interactions(self, session: str) -> Iterator[Interaction]: ...

    def delete_concepts(self, session: str, node_ids: Iterable[str]) -> None: ...

    def delete_edges(self, session: str, edges: Iterable[tuple[str, str, EdgeType]]) -> int:
        """Delete the session's edges named by (src, dst, edge_type), in one transaction.

        Returns how many were deleted: a key naming no edge of the session
        counts 0, a key named twice counts once. Concepts are left as they are.
        """
        ...

    def set_status(self, session: str, node_id: str, status: Status) -> None: ...

    def add_access_counts(self, session: str, counts: dict[str, int]) -> None: ...

    def bump_gc_survived(self, session: str, node_ids: Iterable[str]) -> None:
        """Add one to ``gc_survived`` per occurrence of each id; ids no longer there skipped."""
        ...

    def keyword_index(self, session: str) -> KeywordIndex: ...

    # -- write intents -------------------------------------------------------
    def add_intent(self, intent: WriteIntent) -> WriteIntent: ...

    def pending_intents(self, session: str) -> list[WriteIntent]: ...

    def get_intent(self, receipt_id: str) -> WriteIntent | None: ...

    def settle_intent(
        self, receipt_id: str, state: str, outcome: dict[str, Any], when: float
    ) -> None: ...

    # -- canonization events -------------------------------------------------
    def add_canon_event(self, event: CanonizationEvent) -> None: ...

    def canon_events(self, session: str) -> list[CanonizationEvent]: ...

    # -- leases ---------------------------------------------------------------
    def acquire_lease(self, lease: Lease, now: float) -> Lease | None: ...

    def renew_lease(self, session: str, token: int, now: float, ttl: float) -> bool: ...

    def release_lease(self, session: str, token: int) -> None: ...

    def record_lease_socket(self, session: str, token: int, socket: str) -> bool:
        """Record where the holder of lease ``token`` published its hub socket ("" for
        nowhere); False, changing nothing, when the token is no longer current. A new
        acquisition starts with no socket recorded (None)."""
        ...

    def get_lease(self, session: str) -> Lease | None: ...
