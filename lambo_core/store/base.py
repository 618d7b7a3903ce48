"""The ``Store`` protocol: durable state behind one small interface, and its fencing.

Three implementations, ``SqliteStore`` (one file, many sessions), ``MemoryStore``
(RAM, for tests and ``--store memory``) and ``PostgresStore`` (a PostgreSQL or
CockroachDB database, ``postgres/``), pass one parametrized test suite; the
rules each keeps are on ``Store``. Spec: lambo_recall's "Store / What recall uses",
and "More than one client on one machine" for the lease.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import ErrorKind, StoreError
from ..forget import ForgetRequest
from ..model import (
    CanonizationEvent,
    Concept,
    Edge,
    EdgeType,
    ForgetEvent,
    Interaction,
    Lease,
    SessionRecord,
    Status,
    WriteBatch,
    WriteIntent,
)

EDGE_WEIGHT_CAP = 10.0

#: what a fenced-out write says (class conflict, as the spec's errors table has it)
LEASE_LOST_TEXT = (
    "this lambo serve no longer holds the session's single-writer lease (it expired or "
    "passed to another serve), so nothing was written; the detail was logged"
)


class FencedOut(StoreError):
    """A write refused because the writer's lease token is no longer the session's current,
    live one: nothing was written, and the writer must stop writing."""

    kind = ErrorKind.CONFLICT


class IntentNotPending(StoreError):
    """A batch (or a settlement) names an intent that is no longer pending: it was settled
    already, by this writer or an earlier one. Nothing was written."""


@dataclass(frozen=True)
class Fence:
    """The lease a writer holds on one session, as the store checks it on every write.

    ``now`` is the lease's clock (the one its expiry was computed with);
    ``on_lost`` is told (with the reason) when a write is fenced out, from the
    writing thread.
    """

    token: int
    now: Callable[[], float]
    on_lost: Callable[[str], None] | None = None


def fence_problem(fence: Fence, lease: tuple[int, float] | None) -> str | None:
    """Why a write under ``fence`` is refused, given the lease row's (token, expires_at); None
    when it may write."""
    if lease is None:
        return "the session has no lease row"
    token, expires_at = lease
    if token != fence.token:
        return f"the lease token is {token} now, not this writer's {fence.token}"
    if expires_at <= fence.now():
        return f"the lease of token {token} has expired (or was released)"
    return None


def fenced_out(session: str, fence: Fence, problem: str) -> FencedOut:
    """The refusal of a fenced-out write, after telling the fence's holder."""
    detail = f"session {session!r}: {problem}"
    if fence.on_lost is not None:
        fence.on_lost(detail)
    return FencedOut(LEASE_LOST_TEXT, detail=detail)


class KeywordIndex(Protocol):
    """Keyword search over one session's concept contents (BM25, higher is better)."""

    def search(self, query: str, limit: int) -> list[tuple[str, float]]: ...


class Store(Protocol):
    """Every implementation keeps these rules.

    - A store holds many sessions; every row belongs to exactly one session.
    - ``apply`` commits a whole ``WriteBatch`` (interaction, concepts, edges and the
      intent's settlement) in one transaction, or nothing.
    - An edge is unique on (session, src, dst, edge_type); writing it again reinforces
      it (weight + 1.0, capped at ``EDGE_WEIGHT_CAP``) and keeps its first interaction,
      agent and times.
    - Vectors are stored as little-endian float32 bytes.
    - Failures raise ``StoreError`` with a caller-safe message; driver text goes into
      its ``detail`` only.
    - Fencing: once the lease holder has given the store its ``Fence`` for a session,
      every write of that session checks, in the write's own transaction, that the
      session's lease row still carries the fence's token and has not expired, else
      raises ``FencedOut`` and changes nothing; so a writer paused past its lease never
      commits after another took over, whichever of its paths writes. The lease
      methods themselves are not fenced.
    """

    kind: str  # "sqlite" | "memory" | "postgres" | "cockroach"
    has_vector_search: bool
    #: True only where vector search runs in the database (postgres); the hub then keeps
    #: no session's vectors in RAM
    vector_in_store: bool

    # -- schema -------------------------------------------------------------
    def schema_version(self) -> int: ...

    def close(self) -> None: ...

    # -- sessions ------------------------------------------------------------
    def ensure_session(self, name: str, now: float) -> SessionRecord: ...

    def get_session(self, name: str) -> SessionRecord | None: ...

    def list_sessions(self) -> list[SessionRecord]: ...

    def stamp_contract(self, name: str, contract: dict[str, Any]) -> None: ...

    def mark_shared_layer(self, name: str) -> None:
        """Record that ``name`` is attached as a shared layer (never cleared)."""
        ...

    def set_gc_clock(self, name: str, last_gc_at: float | None, last_gc_epoch: int) -> None: ...

    # -- graph ---------------------------------------------------------------
    def apply(self, batch: WriteBatch) -> None: ...

    def concepts(self, session: str, *, vectors: bool = True) -> Iterator[Concept]:
        """The session's concepts in insertion order; ``vectors=False`` leaves every
        ``Concept.vector`` None and reads no vector bytes."""
        ...

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

    def forget(self, request: ForgetRequest) -> int:
        """Remove ``request.node_ids``' concepts with their edges (either end), vectors and
        keyword entries; redact the session's rows tied to them (``forget.Redaction``:
        interactions that derived into them, settled intents naming them); record the
        ``ForgetEvent``; settle the request's pending intent applied: one transaction, or
        nothing. Ids no longer there are skipped. Returns how many edges went."""
        ...

    def add_forget_event(self, event: ForgetEvent) -> None:
        """Add one row to the session's forget audit as it is (a store copy writes them:
        ``forget`` records its own); removes, redacts and counts nothing."""
        ...

    def forget_events(self, session: str) -> list[ForgetEvent]:
        """The session's forget audit, oldest first."""
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

    def intents(self, session: str) -> Iterator[WriteIntent]:
        """Every intent of the session, in any state, oldest first (by created time, then
        receipt id: an order a copy of the store keeps)."""
        ...

    def get_intent(self, receipt_id: str) -> WriteIntent | None: ...

    def settle_intent(
        self,
        receipt_id: str,
        state: str,
        outcome: dict[str, Any],
        when: float,
        *,
        payload: dict[str, Any] | None = None,  # set: stored in place of the intent's own
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

    def fence(self, session: str, fence: Fence | None) -> None:
        """From now on check every write of ``session`` against ``fence`` (None: stop
        checking). Set by the lease holder on each acquisition (``LeaseKeeper``)."""
        ...
