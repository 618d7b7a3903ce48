"""``PostgresStore``: the ``Store`` protocol on a PostgreSQL (or CockroachDB) database.

It keeps SqliteStore's rules, refusals and orderings (one test suite runs
against all the stores): a batch is one transaction; an edge's ends must be
concepts of the session (a Derives edge may start at an interaction of it),
checked by the edge's own INSERT; a repeated edge reinforces, capped; listings
come in insertion order, read in keyset pages so no transaction stays open
while a caller iterates. Vectors are pgvector ``vector`` values, bit-exact
float32. Pool, fence and errors: ``connection.py``; schema: ``schema.py``;
keyword leg: ``keywords.py``; lease: ``leases.py``. Spec: lambo_recall's
"Store / What recall uses".
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import psycopg

from ...forget import ForgetRequest
from ...index.keywords import tokenize
from ...model import (
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
from ..base import EDGE_WEIGHT_CAP, Fence, IntentNotPending
from ..rows import (
    FORGET_EVENT_COLUMNS,
    WRITE_REFUSED,
    batch_time,
    check_batch_sessions,
    forget_event_from,
    forget_event_insert,
    refused,
    settled_state,
    to_json,
)
from ..sqlite_rows import (
    CANON_EVENT_COLUMNS,
    EDGE_COLUMNS,
    INTENT_COLUMNS,
    SESSION_COLUMNS,
    canon_event_from,
    concept_from,
    edge_from,
    intent_from,
    interaction_from,
    session_from,
)
from . import leases, schema
from .connection import Database, vector_from_text
from .forget import forget_rows
from .keywords import TSV_SQL, PgKeywordIndex
from .vectors import VectorLeg

ROWS_PER_PAGE = 1000  # rows per keyset page of a listing

# SqliteStore's CONCEPT_COLUMNS order, with pgvector's ``embedding`` in ``vector``'s place
CONCEPT_COLUMNS = (
    "id, session, content, canonical_key, concept_type, status, created_at, about_time, "
    "agent_id, interaction_id, access_count, {embedding}, repo_scope, gc_survived, "
    "vector_source"
)
_WITH_VECTORS = CONCEPT_COLUMNS.format(embedding="embedding")
_WITHOUT_VECTORS = CONCEPT_COLUMNS.format(embedding="NULL")
_INTERACTION_COLUMNS = "id, session, agent_id, kind, created_at, about_time, summary"

_INSERT_CONCEPT = (
    f"INSERT INTO concepts({_WITH_VECTORS}, vector_dim, tsv, kw_length) "
    f"VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, {TSV_SQL}, %s)"
)
# Writes the edge only when both ends belong to the session: 0 rows otherwise.
_UPSERT_EDGE = (
    f"INSERT INTO edges({EDGE_COLUMNS}) "
    "SELECT %(s)s, %(src)s, %(dst)s, %(t)s, LEAST(%(w)s, %(cap)s), %(i)s, %(a)s, %(c)s, %(ab)s "
    "WHERE EXISTS (SELECT 1 FROM concepts WHERE session = %(s)s AND id = %(dst)s) "
    "AND (EXISTS (SELECT 1 FROM concepts WHERE session = %(s)s AND id = %(src)s) "
    "OR (%(t)s = 'derives' AND "
    "EXISTS (SELECT 1 FROM interactions WHERE session = %(s)s AND id = %(src)s))) "
    "ON CONFLICT (session, src, dst, edge_type) "
    "DO UPDATE SET weight = LEAST(edges.weight + 1.0, %(cap)s)"
)

Cursor = psycopg.Cursor[Any]


def _execute_each(cur: Cursor, sql: str, rows: list[Any]) -> int:
    """``sql`` once per row, in order; the rows it changed. One row is a plain execute:
    executemany's pipeline costs round trips of its own that a single row never repays."""
    if len(rows) == 1:
        return cur.execute(sql, rows[0]).rowcount
    cur.executemany(sql, rows)
    return cur.rowcount


def _concept_out(row: tuple[Any, ...]) -> Concept:
    concept = concept_from((*row[:11], None, *row[12:]))
    vector = row[11]  # a float32 array from the vector loader, else its text, or None
    concept.vector = vector_from_text(vector) if isinstance(vector, str) else vector
    return concept


def _concept_row(c: Concept) -> tuple[Any, ...]:
    vector = c.vector
    dim = None if vector is None else int(vector.size)
    terms = tokenize(c.content)
    return (
        c.id, c.session, c.content, c.canonical_key, c.concept_type.value, c.status.value,
        c.created_at, c.about_time, c.agent_id, c.interaction_id, c.access_count, vector,
        c.repo_scope, c.gc_survived, c.vector_source, dim, " ".join(terms), len(terms),
    )  # fmt: skip


class PostgresStore:
    has_vector_search = True
    #: vector search runs in the database (pgvector HNSW, ``vectors.py``): the hub keeps
    #: no session's vectors in RAM (index/store_vectors.py)
    vector_in_store = True

    def __init__(self, dsn: str, *, dialect: str = "postgres") -> None:
        self._db = Database(dsn, dialect)
        self._vectors = VectorLeg(self._db)
        self.kind = dialect  # "postgres" | "cockroach"
        #: versions this open applied (what `lambo provision` reports)
        self.migrations_applied: list[int] = self._db.migrations_applied

    def fence(self, session: str, fence: Fence | None) -> None:
        """Check every later write of ``session`` against ``fence`` (None: no check)."""
        self._db.fence(session, fence)

    def _pages(
        self, sql: str, params: tuple[Any, ...], after: Callable[[tuple[Any, ...]], tuple[Any, ...]]
    ) -> Iterator[tuple[Any, ...]]:
        """Rows of ``sql`` page by page; ``sql`` has an ``{after}`` slot for the keyset
        condition, filled from ``after(last row)`` for every page but the first."""
        last: tuple[Any, ...] | None = None
        while True:
            if last is None:
                rows = self._db.read(sql.format(after="TRUE"), (*params, ROWS_PER_PAGE))
            else:
                keys = after(last)
                marks = ", ".join(["%s"] * len(keys))
                rows = self._db.read(
                    sql.format(after=f"({self._keyset(sql)}) > ({marks})"),
                    (*params, *keys, ROWS_PER_PAGE),
                )
            yield from rows
            if len(rows) < ROWS_PER_PAGE:
                return
            last = rows[-1]

    @staticmethod
    def _keyset(sql: str) -> str:
        return sql.rpartition("ORDER BY ")[2].partition(" LIMIT")[0]

    # -- schema ----------------------------------------------------------------

    def schema_version(self) -> int:
        return self._db.schema_version()

    def migrate(self) -> list[int]:
        """Apply missing migrations; the versions applied ([] when current)."""
        with self._db.pool.connection() as conn:
            applied = schema.migrate(conn, self._db.dialect)
        self.migrations_applied.extend(applied)
        return applied

    def close(self) -> None:
        self._db.close()

    # -- sessions --------------------------------------------------------------

    def ensure_session(self, name: str, now: float) -> SessionRecord:
        self._db.write(
            name,
            lambda cur: cur.execute(
                "INSERT INTO sessions(name, created_at) VALUES (%s, %s) "
                "ON CONFLICT (name) DO NOTHING",
                (name, now),
            ),
        )
        record = self.get_session(name)
        assert record is not None  # just written, sessions are never deleted here
        return record

    def get_session(self, name: str) -> SessionRecord | None:
        rows = self._db.read(f"SELECT {SESSION_COLUMNS} FROM sessions WHERE name = %s", (name,))
        return session_from(rows[0]) if rows else None

    def list_sessions(self) -> list[SessionRecord]:
        rows = self._db.read(f"SELECT {SESSION_COLUMNS} FROM sessions ORDER BY name")
        return [session_from(row) for row in rows]

    def _update_session(self, name: str, assignments: str, params: tuple[Any, ...]) -> None:
        def body(cur: Cursor) -> None:
            cur.execute(f"UPDATE sessions SET {assignments} WHERE name = %s", (*params, name))
            if cur.rowcount != 1:
                raise refused(f"no session {name!r}")

        self._db.write(name, body)

    def stamp_contract(self, name: str, contract: dict[str, Any]) -> None:
        self._update_session(name, "embedding_contract = %s", (to_json(contract),))
        dim = contract.get("dim")
        if isinstance(dim, int) and not isinstance(dim, bool) and dim > 0:
            self._vectors.ensure_index(dim)  # after the commit, before its first vector

    def mark_shared_layer(self, name: str) -> None:
        self._update_session(name, "shared_layer = true", ())

    def set_gc_clock(self, name: str, last_gc_at: float | None, last_gc_epoch: int) -> None:
        self._update_session(
            name, "last_gc_at = %s, last_gc_epoch = %s", (last_gc_at, last_gc_epoch)
        )

    # -- graph -------------------------------------------------------------------

    def apply(self, batch: WriteBatch) -> None:
        """Commit the whole batch in one transaction, or nothing (see base.py)."""
        check_batch_sessions(batch)
        self._db.write(batch.session, lambda cur: self._apply(cur, batch))
        # after the commit: a concurrent build waits for open writes, this one's too
        for dim in {c.vector.size for c in batch.concepts if c.vector is not None}:
            self._vectors.ensure_index(int(dim))  # once per width: a set lookup after that

    def _apply(self, cur: Cursor, batch: WriteBatch) -> None:
        if batch.interaction is not None:
            i = batch.interaction
            cur.execute(
                f"INSERT INTO interactions({_INTERACTION_COLUMNS}) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (session, id) DO NOTHING",
                (i.id, i.session, i.agent_id, i.kind.value, i.created_at, i.about_time, i.summary),
            )
        rows = [_concept_row(c) for c in batch.concepts]
        if rows:
            _execute_each(cur, _INSERT_CONCEPT, rows)
        if batch.edges:
            # in order, one statement per edge: a repeat within the batch reinforces
            changed = _execute_each(
                cur,
                _UPSERT_EDGE,
                [
                    {"s": e.session, "src": e.src, "dst": e.dst, "t": e.edge_type.value,
                     "w": float(e.weight), "cap": EDGE_WEIGHT_CAP, "i": e.interaction_id,
                     "a": e.agent_id, "c": e.created_at, "ab": e.about_time}
                    for e in batch.edges
                ],
            )  # fmt: skip
            if changed != len(batch.edges):
                raise refused("edge end is not a concept of this session")
        if batch.intent_receipt_id is not None:
            cur.execute(
                "UPDATE write_intents SET state = %s, outcome = %s, settled_at = %s, "
                "payload = COALESCE(%s, payload) "
                "WHERE receipt_id = %s AND session = %s AND state = %s",
                (
                    IntentState.APPLIED.value,
                    to_json(batch.intent_outcome or {}),
                    batch_time(batch),
                    None if batch.intent_payload is None else to_json(batch.intent_payload),
                    batch.intent_receipt_id,
                    batch.session,
                    IntentState.PENDING.value,
                ),
            )
            if cur.rowcount != 1:
                raise IntentNotPending(
                    WRITE_REFUSED, detail="the batch's intent is not pending in this session"
                )
        # the keyword leg's BM25 statistics move with the rows, in this transaction
        cur.execute(
            "UPDATE sessions SET mutation_count = mutation_count + %s, kw_docs = kw_docs + %s, "
            "kw_length = kw_length + %s WHERE name = %s",
            (len(rows) + len(batch.edges), len(rows), sum(r[-1] for r in rows), batch.session),
        )
        if cur.rowcount != 1:
            raise refused(f"no session {batch.session!r}")

    def concepts(self, session: str, *, vectors: bool = True) -> Iterator[Concept]:
        columns = _WITH_VECTORS if vectors else _WITHOUT_VECTORS
        rows = self._pages(
            f"SELECT {columns}, rid FROM concepts WHERE session = %s AND {{after}} "
            "ORDER BY rid LIMIT %s",
            (session,),
            lambda row: (row[-1],),
        )
        return (_concept_out(row[:-1]) for row in rows)

    def get_concept(self, session: str, node_id: str) -> Concept | None:
        rows = self._db.read(
            f"SELECT {_WITH_VECTORS} FROM concepts WHERE session = %s AND id = %s",
            (session, node_id),
        )
        return _concept_out(rows[0]) if rows else None

    def edges(self, session: str) -> Iterator[Edge]:
        rows = self._pages(
            f"SELECT {EDGE_COLUMNS}, eid FROM edges WHERE session = %s AND {{after}} "
            "ORDER BY eid LIMIT %s",
            (session,),
            lambda row: (row[-1],),
        )
        return (edge_from(row[:-1]) for row in rows)

    def interactions(self, session: str) -> Iterator[Interaction]:
        rows = self._pages(
            f"SELECT {_INTERACTION_COLUMNS}, rid FROM interactions WHERE session = %s "
            "AND {after} ORDER BY created_at, rid LIMIT %s",
            (session,),
            lambda row: (row[4], row[-1]),
        )
        return (interaction_from(row[:-1]) for row in rows)

    def delete_concepts(self, session: str, node_ids: Iterable[str]) -> None:
        """Delete concepts; the edges at either end go in the same transaction."""
        ids = list(dict.fromkeys(node_ids))
        if not ids:
            self._db.write(session, lambda cur: None)  # still fenced, as every write is
            return

        def body(cur: Cursor) -> None:
            cur.execute("DELETE FROM edges WHERE session = %s AND src = ANY(%s)", (session, ids))
            gone = cur.execute(
                "DELETE FROM concepts WHERE session = %s AND id = ANY(%s) RETURNING kw_length",
                (session, ids),
            ).fetchall()
            if gone:
                cur.execute(
                    "UPDATE sessions SET kw_docs = kw_docs - %s, kw_length = kw_length - %s "
                    "WHERE name = %s",
                    (len(gone), sum(int(r[0]) for r in gone), session),
                )

        self._db.write(session, body)

    def forget(self, request: ForgetRequest) -> int:
        """A forget in one transaction (``postgres/forget.py``); the edges it removed."""
        return self._db.write(request.session, lambda cur: forget_rows(cur, request))

    def add_forget_event(self, event: ForgetEvent) -> None:
        """One audit row as it is (what a store copy writes); nothing else changes."""
        self._db.write(event.session, lambda cur: cur.execute(*forget_event_insert(event, "%s")))

    def forget_events(self, session: str) -> list[ForgetEvent]:
        rows = self._db.read(
            f"SELECT {FORGET_EVENT_COLUMNS} FROM forget_events WHERE session = %s "
            "ORDER BY occurred_at, id",
            (session,),
        )
        return [forget_event_from(tuple(row)) for row in rows]

    def delete_edges(self, session: str, edges: Iterable[tuple[str, str, EdgeType]]) -> int:
        """Delete edges by (src, dst, edge_type) in one transaction; how many were deleted."""
        keys = list(dict.fromkeys((src, dst, EdgeType(kind).value) for src, dst, kind in edges))

        def body(cur: Cursor) -> int:
            deleted = 0
            for src, dst, kind in keys:  # each a lookup on the edge's primary key
                cur.execute(
                    "DELETE FROM edges WHERE session = %s AND src = %s AND dst = %s "
                    "AND edge_type = %s",
                    (session, src, dst, kind),
                )
                deleted += cur.rowcount
            return deleted

        return self._db.write(session, body)

    def set_status(self, session: str, node_id: str, status: Status) -> None:
        """A no-op for a concept no longer there (collected meanwhile)."""
        self._db.write(
            session,
            lambda cur: cur.execute(
                "UPDATE concepts SET status = %s WHERE session = %s AND id = %s",
                (status.value, session, node_id),
            ),
        )

    def _add_counts(self, session: str, column: str, counts: dict[str, int]) -> None:
        def body(cur: Cursor) -> None:
            if counts:
                cur.executemany(
                    f"UPDATE concepts SET {column} = {column} + %s WHERE session = %s AND id = %s",
                    [(n, session, node_id) for node_id, n in counts.items()],
                )

        self._db.write(session, body)

    def add_access_counts(self, session: str, counts: dict[str, int]) -> None:
        """Add to access counts; ids no longer there are skipped."""
        self._add_counts(session, "access_count", dict(counts))

    def bump_gc_survived(self, session: str, node_ids: Iterable[str]) -> None:
        """Add one per occurrence of each id to ``gc_survived``; ids no longer there skipped."""
        self._add_counts(session, "gc_survived", dict(Counter(node_ids)))

    def keyword_index(self, session: str) -> PgKeywordIndex:
        return PgKeywordIndex(self._db, session)

    # -- the vector leg (vectors.py) --------------------------------------------------
    def vector_top_k(
        self,
        session: str,
        dim: int,
        query: Any,
        k: int,
        exclude_statuses: Sequence[str] = (),
    ) -> list[tuple[str, float]]:
        """The session's ``k`` concepts of width ``dim`` nearest ``query`` (cosine), best
        first, searched in the database."""
        return self._vectors.top_k(session, dim, query, k, exclude_statuses)

    def vector_of(self, session: str, ids: Iterable[str]) -> dict[str, Any]:
        """The stored vectors of those of ``ids`` that have one, in one query."""
        return self._vectors.vectors_of(session, ids)

    def vector_count(self, session: str, dim: int, at_most: int | None = None) -> int:
        return self._vectors.count(session, dim, at_most)

    # -- write intents -----------------------------------------------------------

    def add_intent(self, intent: WriteIntent) -> WriteIntent:
        """Record a pending intent; returns it with its store-wide ``seq``."""
        payload = to_json(intent.payload)

        def body(cur: Cursor) -> int:
            row = cur.execute(
                "INSERT INTO write_intents(receipt_id, session, agent_id, tool, payload, "
                "created_at, state, via) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING seq",
                (intent.receipt_id, intent.session, intent.agent_id, intent.tool, payload,
                 intent.created_at, IntentState.PENDING.value, intent.via),
            ).fetchone()  # fmt: skip
            assert row is not None
            return int(row[0])

        seq = self._db.write(intent.session, body)
        return replace(
            intent,
            seq=seq,
            state=IntentState.PENDING,
            settled_at=None,
            outcome=None,
            payload=json.loads(payload),
        )

    def pending_intents(self, session: str) -> list[WriteIntent]:
        rows = self._db.read(
            f"SELECT {INTENT_COLUMNS} FROM write_intents WHERE session = %s AND state = %s "
            "ORDER BY seq",
            (session, IntentState.PENDING.value),
        )
        return [intent_from(row) for row in rows]

    def intents(self, session: str) -> Iterator[WriteIntent]:
        """Every intent of the session, any state, oldest first (created, then receipt id)."""
        rows = self._pages(
            f"SELECT {INTENT_COLUMNS} FROM write_intents WHERE session = %s AND {{after}} "
            "ORDER BY created_at, receipt_id LIMIT %s",
            (session,),
            lambda row: (row[5], row[0]),
        )
        return (intent_from(row) for row in rows)

    def get_intent(self, receipt_id: str) -> WriteIntent | None:
        rows = self._db.read(
            f"SELECT {INTENT_COLUMNS} FROM write_intents WHERE receipt_id = %s", (receipt_id,)
        )
        return intent_from(rows[0]) if rows else None

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
        new_payload = None if payload is None else to_json(payload)

        def body(cur: Cursor) -> None:
            row = cur.execute(
                "SELECT session FROM write_intents WHERE receipt_id = %s", (receipt_id,)
            ).fetchone()
            if row is not None:
                self._db.check_fence(cur, str(row[0]))
            cur.execute(
                "UPDATE write_intents SET state = %s, outcome = %s, settled_at = %s, "
                "payload = COALESCE(%s, payload) WHERE receipt_id = %s AND state = %s",
                (final.value, text, when, new_payload, receipt_id, IntentState.PENDING.value),
            )
            if cur.rowcount != 1:
                raise IntentNotPending(WRITE_REFUSED, detail="no pending intent with that receipt")

        self._db.write(None, body)

    # -- canonization events -------------------------------------------------------

    def add_canon_event(self, event: CanonizationEvent) -> None:
        self._db.write(
            event.session,
            lambda cur: cur.execute(
                "INSERT INTO canon_events(session, node_id, from_status, to_status, "
                "blast_radius, occurred_at) VALUES (%s, %s, %s, %s, %s, %s)",
                (event.session, event.node_id, event.from_status.value, event.to_status.value,
                 event.blast_radius, event.occurred_at),
            ),
        )  # fmt: skip

    def canon_events(self, session: str) -> list[CanonizationEvent]:
        rows = self._db.read(
            f"SELECT {CANON_EVENT_COLUMNS} FROM canon_events WHERE session = %s "
            "ORDER BY occurred_at, id",
            (session,),
        )
        return [canon_event_from(row) for row in rows]

    # -- leases ------------------------------------------------------------------

    def acquire_lease(self, lease: Lease, now: float) -> Lease | None:
        """Take the session's lease if it is free, expired, or already ours (atomic across
        processes and hosts); None while another holder's lease is live."""
        return leases.acquire(self._db, lease, now)

    def renew_lease(self, session: str, token: int, now: float, ttl: float) -> bool:
        return leases.renew(self._db, session, token, now, ttl)

    def release_lease(self, session: str, token: int) -> None:
        leases.release(self._db, session, token)

    def record_lease_socket(self, session: str, token: int, socket: str) -> bool:
        return leases.record_socket(self._db, session, token, socket)

    def get_lease(self, session: str) -> Lease | None:
        return leases.get(self._db, session)
