"""MemoryStore: the Store protocol in RAM, for tests and ``--store memory``.

It keeps the SQLite store's rules, refusals and orderings (one test suite runs
against both): a batch is validated in full before anything changes, so it is
all-or-nothing; edge ends must be concepts of the session (a Derives edge may
start at an interaction of it); vectors are kept as little-endian float32
bytes and JSON values as JSON text, so what comes back is a fresh copy exactly
as SQLite would return it. One re-entrant lock guards everything.

Recall on this store is keyword plus graph only (``has_vector_search`` is
False), but the vectors given to it are still stored and returned.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from ..forget import FORGET_TOOL, ForgetRequest
from ..index.keywords import Bm25Index
from ..model import (
    CanonizationEvent,
    Concept,
    Edge,
    EdgeType,
    ForgetEvent,
    IntentState,
    Interaction,
    Lease,
    SessionRecord,
    Status,
    WriteBatch,
    WriteIntent,
)
from . import migrations
from .base import EDGE_WEIGHT_CAP, Fence, IntentNotPending, fence_problem, fenced_out
from .rows import (
    WRITE_REFUSED,
    batch_time,
    blob_to_vector,
    check_batch_sessions,
    refused,
    settled_state,
    to_json,
    vector_to_blob,
)

_EdgeKey = tuple[str, str, EdgeType]


@dataclass
class _Session:
    record: SessionRecord
    contract_json: str | None = None
    concepts: dict[str, Concept] = field(default_factory=dict)  # insertion order = rid order
    vectors: dict[str, bytes] = field(default_factory=dict)
    edges: dict[_EdgeKey, Edge] = field(default_factory=dict)  # insertion order = eid order
    interactions: dict[str, Interaction] = field(default_factory=dict)
    keywords: Bm25Index = field(default_factory=Bm25Index)
    canon_events: list[CanonizationEvent] = field(default_factory=list)
    forget_events: list[ForgetEvent] = field(default_factory=list)


@dataclass
class _Intent:
    intent: WriteIntent  # payload/outcome replaced by their JSON text below
    payload_json: str
    outcome_json: str | None = None


class _MemoryKeywordIndex:
    def __init__(self, store: MemoryStore, session: str) -> None:
        self._store = store
        self._session = session

    def search(self, query: str, limit: int) -> list[tuple[str, float]]:
        with self._store._lock:
            state = self._store._sessions.get(self._session)
            return [] if state is None else state.keywords.search(query, limit)


class MemoryStore:
    kind = "memory"
    has_vector_search = False
    vector_in_store = False

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._sessions: dict[str, _Session] = {}
        self._intents: dict[str, _Intent] = {}
        self._seq = itertools.count(1)
        self._leases: dict[str, Lease] = {}
        self._fences: dict[str, Fence] = {}

    # -- schema ----------------------------------------------------------------

    def schema_version(self) -> int:
        return migrations.LATEST_VERSION

    def close(self) -> None:
        pass

    def fence(self, session: str, fence: Fence | None) -> None:
        """Check every later write of ``session`` against ``fence`` (None: no check)."""
        with self._lock:
            if fence is None:
                self._fences.pop(session, None)
            else:
                self._fences[session] = fence

    def _check_fence(self, session: str) -> None:
        """Under the lock: the fenced writer of ``session`` must still hold its live lease."""
        fence = self._fences.get(session)
        if fence is None:
            return
        lease = self._leases.get(session)
        problem = fence_problem(fence, None if lease is None else (lease.token, lease.expires_at))
        if problem is not None:
            raise fenced_out(session, fence, problem)

    def _session(self, name: str) -> _Session:
        state = self._sessions.get(name)
        if state is None:
            raise refused(f"no session {name!r}")
        return state

    # -- sessions --------------------------------------------------------------

    def ensure_session(self, name: str, now: float) -> SessionRecord:
        with self._lock:
            self._check_fence(name)
            state = self._sessions.get(name)
            if state is None:
                state = self._sessions[name] = _Session(SessionRecord(name=name, created_at=now))
            return self._record(state)

    def _record(self, state: _Session) -> SessionRecord:
        contract = state.contract_json
        return replace(
            state.record, embedding_contract=None if contract is None else json.loads(contract)
        )

    def get_session(self, name: str) -> SessionRecord | None:
        with self._lock:
            state = self._sessions.get(name)
            return None if state is None else self._record(state)

    def list_sessions(self) -> list[SessionRecord]:
        with self._lock:
            return [self._record(self._sessions[name]) for name in sorted(self._sessions)]

    def stamp_contract(self, name: str, contract: dict[str, Any]) -> None:
        text = to_json(contract)
        with self._lock:
            self._check_fence(name)
            self._session(name).contract_json = text

    def mark_shared_layer(self, name: str) -> None:
        with self._lock:
            self._check_fence(name)
            state = self._session(name)
            state.record = replace(state.record, shared_layer=True)

    def set_gc_clock(self, name: str, last_gc_at: float | None, last_gc_epoch: int) -> None:
        with self._lock:
            self._check_fence(name)
            record = self._session(name).record
            record.last_gc_at = last_gc_at
            record.last_gc_epoch = last_gc_epoch

    # -- graph -------------------------------------------------------------------

    def apply(self, batch: WriteBatch) -> None:
        """Validate the whole batch, then change everything; nothing on refusal."""
        with self._lock:
            self._check_fence(batch.session)
            state = self._validate(batch)
            outcome_json = to_json(batch.intent_outcome or {})
            if batch.interaction is not None and batch.interaction.id not in state.interactions:
                state.interactions[batch.interaction.id] = replace(batch.interaction)
            for concept in batch.concepts:
                state.vectors.pop(concept.id, None)
                blob = vector_to_blob(concept.vector)
                if blob is not None:
                    state.vectors[concept.id] = blob
                state.concepts[concept.id] = replace(concept, vector=None)
                state.keywords.add(concept.id, concept.content)
            for edge in batch.edges:
                key = (edge.src, edge.dst, edge.edge_type)
                old = state.edges.get(key)
                if old is None:
                    state.edges[key] = replace(edge, weight=min(edge.weight, EDGE_WEIGHT_CAP))
                else:
                    old.weight = min(old.weight + 1.0, EDGE_WEIGHT_CAP)
            if batch.intent_receipt_id is not None:
                held = self._intents[batch.intent_receipt_id]
                held.intent.state = IntentState.APPLIED
                held.intent.settled_at = batch_time(batch)
                held.outcome_json = outcome_json
                if batch.intent_payload is not None:
                    held.payload_json = to_json(batch.intent_payload)
            state.record.mutation_count += len(batch.concepts) + len(batch.edges)

    def _validate(self, batch: WriteBatch) -> _Session:
        """Every refusal SQLite would give for this batch, checked before any change."""
        check_batch_sessions(batch)
        state = self._session(batch.session)
        new_ids: set[str] = set()
        for concept in batch.concepts:
            if concept.id in new_ids or self._concept_anywhere(concept.id):
                raise refused("UNIQUE constraint failed: concepts.id")
            new_ids.add(concept.id)
        interaction_ids = set(state.interactions)
        if batch.interaction is not None:
            interaction_ids.add(batch.interaction.id)
        for edge in batch.edges:
            src_ok = edge.src in state.concepts or edge.src in new_ids
            if edge.edge_type is EdgeType.DERIVES and edge.src in interaction_ids:
                src_ok = True
            dst_ok = edge.dst in state.concepts or edge.dst in new_ids
            if not (src_ok and dst_ok):
                raise refused("edge end is not a concept of this session")
        if batch.intent_receipt_id is not None:
            held = self._intents.get(batch.intent_receipt_id)
            if (
                held is None
                or held.intent.session != batch.session
                or held.intent.state is not IntentState.PENDING
            ):
                raise IntentNotPending(
                    WRITE_REFUSED, detail="the batch's intent is not pending in this session"
                )
        return state

    def _concept_anywhere(self, node_id: str) -> bool:
        return any(node_id in s.concepts for s in self._sessions.values())

    def _concept_out(self, state: _Session, concept: Concept, vectors: bool = True) -> Concept:
        blob = state.vectors.get(concept.id) if vectors else None
        return replace(concept, vector=blob_to_vector(blob))

    def concepts(self, session: str, *, vectors: bool = True) -> Iterator[Concept]:
        with self._lock:
            state = self._sessions.get(session)
            if state is None:
                return iter([])
            return iter([self._concept_out(state, c, vectors) for c in state.concepts.values()])

    def get_concept(self, session: str, node_id: str) -> Concept | None:
        with self._lock:
            state = self._sessions.get(session)
            if state is None or node_id not in state.concepts:
                return None
            return self._concept_out(state, state.concepts[node_id])

    def edges(self, session: str) -> Iterator[Edge]:
        with self._lock:
            state = self._sessions.get(session)
            return iter([] if state is None else [replace(e) for e in state.edges.values()])

    def interactions(self, session: str) -> Iterator[Interaction]:
        with self._lock:
            state = self._sessions.get(session)
            if state is None:
                return iter([])
            rows = sorted(state.interactions.values(), key=lambda i: i.created_at)
            return iter([replace(i) for i in rows])

    def delete_concepts(self, session: str, node_ids: Iterable[str]) -> None:
        """Delete concepts with their edges (either end) and keyword entries."""
        with self._lock:
            self._check_fence(session)
            state = self._sessions.get(session)
            if state is None:
                return
            doomed = {node_id for node_id in node_ids if node_id in state.concepts}
            for node_id in doomed:
                del state.concepts[node_id]
                state.vectors.pop(node_id, None)
                state.keywords.remove(node_id)
            state.edges = {
                key: e
                for key, e in state.edges.items()
                if e.src not in doomed and e.dst not in doomed
            }

    def forget(self, request: ForgetRequest) -> int:
        """A forget, all or nothing (``forget.py``); the edges it removed."""
        session = request.session
        redaction = request.redaction()
        with self._lock:
            self._check_fence(session)
            state = self._session(session)
            held = None
            if request.receipt_id is not None:
                held = self._intents.get(request.receipt_id)
                if (
                    held is None
                    or held.intent.session != session
                    or held.intent.state is not IntentState.PENDING
                ):
                    raise IntentNotPending(
                        WRITE_REFUSED, detail="the forget's intent is not pending in this session"
                    )
            doomed = {node_id for node_id in request.node_ids if node_id in state.concepts}
            kept = {
                k: e for k, e in state.edges.items() if e.src not in doomed and e.dst not in doomed
            }
            edges = len(state.edges) - len(kept)
            derived: dict[str, list[str]] = {}  # interaction -> the forgotten ids it derived
            for e in state.edges.values():
                if e.edge_type is EdgeType.DERIVES and e.dst in doomed:
                    derived.setdefault(e.src, []).append(e.dst)
            state.edges = kept
            for node_id in doomed:
                del state.concepts[node_id]
                state.vectors.pop(node_id, None)
                state.keywords.remove(node_id)
            for other in self._intents.values():
                if (
                    other.intent.session != session
                    or other.intent.state is IntentState.PENDING  # none older: forget.py
                    or other.intent.tool == FORGET_TOOL
                ):
                    continue
                redacted = redaction.intent(
                    other.intent.state.value, other.payload_json, other.outcome_json
                )
                if redacted is not None:
                    other.payload_json, other.outcome_json = redacted
            for interaction_id, ids in derived.items():
                interaction = state.interactions.get(interaction_id)
                if interaction is not None:
                    interaction.summary = redaction.summary(ids)
            state.forget_events.append(request.event(edges))
            if held is not None:
                held.intent.state = IntentState.APPLIED
                held.intent.settled_at = request.occurred_at
                held.outcome_json = to_json(request.outcome(edges))
            state.record.mutation_count += len(doomed) + edges
        return edges

    def add_forget_event(self, event: ForgetEvent) -> None:
        """One audit row as it is (what a store copy writes); nothing else changes."""
        with self._lock:
            self._check_fence(event.session)
            self._session(event.session).forget_events.append(event)

    def forget_events(self, session: str) -> list[ForgetEvent]:
        with self._lock:
            state = self._sessions.get(session)
            # oldest first, ties in the order added: as the SQL stores order by (occurred_at, id)
            events = [] if state is None else state.forget_events
            return sorted(events, key=lambda e: e.occurred_at)

    def delete_edges(self, session: str, edges: Iterable[tuple[str, str, EdgeType]]) -> int:
        """Delete edges by (src, dst, edge_type); how many were deleted."""
        keys = [(src, dst, EdgeType(kind)) for src, dst, kind in edges]  # all checked first
        with self._lock:
            self._check_fence(session)
            state = self._sessions.get(session)
            if state is None:
                return 0
            return sum(1 for key in keys if state.edges.pop(key, None) is not None)

    def set_status(self, session: str, node_id: str, status: Status) -> None:
        """A no-op for a concept no longer there (collected meanwhile)."""
        with self._lock:
            self._check_fence(session)
            state = self._sessions.get(session)
            if state is not None and node_id in state.concepts:
                state.concepts[node_id].status = status

    def add_access_counts(self, session: str, counts: dict[str, int]) -> None:
        """Add to access counts; ids no longer there are skipped."""
        with self._lock:
            self._check_fence(session)
            state = self._sessions.get(session)
            if state is None:
                return
            for node_id, n in counts.items():
                if node_id in state.concepts:
                    state.concepts[node_id].access_count += n

    def bump_gc_survived(self, session: str, node_ids: Iterable[str]) -> None:
        """Add one per occurrence of each id to ``gc_survived``; ids no longer there skipped."""
        with self._lock:
            self._check_fence(session)
            state = self._sessions.get(session)
            if state is None:
                return
            for node_id in node_ids:
                concept = state.concepts.get(node_id)
                if concept is not None:
                    concept.gc_survived += 1

    def keyword_index(self, session: str) -> _MemoryKeywordIndex:
        return _MemoryKeywordIndex(self, session)

    # -- write intents -----------------------------------------------------------

    def add_intent(self, intent: WriteIntent) -> WriteIntent:
        """Record a pending intent; returns it with its store-wide ``seq``."""
        payload_json = to_json(intent.payload)
        with self._lock:
            self._check_fence(intent.session)
            self._session(intent.session)
            if intent.receipt_id in self._intents:
                raise refused("UNIQUE constraint failed: write_intents.receipt_id")
            stored = replace(
                intent,
                seq=next(self._seq),
                state=IntentState.PENDING,
                settled_at=None,
                outcome=None,
                payload={},
            )
            self._intents[intent.receipt_id] = _Intent(stored, payload_json)
            return self._intent_out(self._intents[intent.receipt_id])

    def _intent_out(self, held: _Intent) -> WriteIntent:
        outcome = None if held.outcome_json is None else json.loads(held.outcome_json)
        return replace(held.intent, payload=json.loads(held.payload_json), outcome=outcome)

    def pending_intents(self, session: str) -> list[WriteIntent]:
        with self._lock:
            held = [
                h
                for h in self._intents.values()
                if h.intent.session == session and h.intent.state is IntentState.PENDING
            ]
            return [self._intent_out(h) for h in sorted(held, key=lambda h: h.intent.seq)]

    def intents(self, session: str) -> Iterator[WriteIntent]:
        """Every intent of the session, any state, oldest first (created, then receipt id)."""
        with self._lock:
            held = [h for h in self._intents.values() if h.intent.session == session]
            held.sort(key=lambda h: (h.intent.created_at, h.intent.receipt_id))
            return iter([self._intent_out(h) for h in held])

    def get_intent(self, receipt_id: str) -> WriteIntent | None:
        with self._lock:
            held = self._intents.get(receipt_id)
            return None if held is None else self._intent_out(held)

    def settle_intent(
        self,
        receipt_id: str,
        state: str,
        outcome: dict[str, Any],
        when: float,
        *,
        payload: dict[str, Any] | None = None,
    ) -> None:
        """Settle a pending intent as applied or failed; anything else is refused."""
        final = settled_state(state)
        text = to_json(outcome)
        with self._lock:
            held = self._intents.get(receipt_id)
            if held is not None:
                self._check_fence(held.intent.session)
            if held is None or held.intent.state is not IntentState.PENDING:
                raise IntentNotPending(WRITE_REFUSED, detail="no pending intent with that receipt")
            held.intent.state = final
            held.intent.settled_at = when
            held.outcome_json = text
            if payload is not None:
                held.payload_json = to_json(payload)

    # -- canonization events -------------------------------------------------------

    def add_canon_event(self, event: CanonizationEvent) -> None:
        with self._lock:
            self._check_fence(event.session)
            self._session(event.session).canon_events.append(replace(event))

    def canon_events(self, session: str) -> list[CanonizationEvent]:
        with self._lock:
            state = self._sessions.get(session)
            if state is None:
                return []
            ordered = sorted(state.canon_events, key=lambda e: e.occurred_at)
            return [replace(e) for e in ordered]

    # -- leases ------------------------------------------------------------------

    def acquire_lease(self, lease: Lease, now: float) -> Lease | None:
        """Take the session's lease if it is free, expired, or already ours."""
        with self._lock:
            old = self._leases.get(lease.session)
            if old is not None and old.holder != lease.holder and old.expires_at > now:
                return None
            stored = replace(lease, token=(old.token if old is not None else 0) + 1)
            self._leases[lease.session] = stored
            return replace(stored)

    def renew_lease(self, session: str, token: int, now: float, ttl: float) -> bool:
        with self._lock:
            lease = self._leases.get(session)
            # released (expires_at 0): a heartbeat still in flight must not bring it back
            if lease is None or lease.token != token or lease.expires_at <= 0:
                return False
            lease.heartbeat_at = now
            lease.expires_at = now + ttl
            return True

    def release_lease(self, session: str, token: int) -> None:
        """Give the lease up if the token is current; the token still grows next time."""
        with self._lock:
            lease = self._leases.get(session)
            if lease is not None and lease.token == token:
                lease.expires_at = 0.0

    def record_lease_socket(self, session: str, token: int, socket: str) -> bool:
        """Record where the holder of lease ``token`` published; False if not current."""
        with self._lock:
            lease = self._leases.get(session)
            if lease is None or lease.token != token:
                return False
            lease.socket = socket
            return True

    def get_lease(self, session: str) -> Lease | None:
        with self._lock:
            lease = self._leases.get(session)
            return None if lease is None else replace(lease)
