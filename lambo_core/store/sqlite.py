"""``SqliteStore``: the ``Store`` protocol on one SQLite file holding many sessions.

The SQL of each operation is here; the connections, PRAGMAs and the fence check
are in ``sqlite_connection.py``, the rows in ``sqlite_rows.py``, the schema in
``migrations.py``. Keyword search is FTS5's bm25 over ``concepts_fts``, an
external-content index the schema's triggers keep in step with ``concepts``.
Spec: lambo_recall's "Store / What recall uses"; leases: "More than one client on
one machine".
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..forget import ForgetRequest
from ..index.keywords import fts5_query
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
from .base import EDGE_WEIGHT_CAP, Fence, IntentNotPending
from .rows import (
    FORGET_EVENT_COLUMNS,
    WRITE_REFUSED,
    batch_time,
    check_batch_sessions,
    forget_event_from,
    forget_event_insert,
    forget_settle,
    refused,
    settled_state,
    to_json,
)
from .sqlite_connection import BUSY_TIMEOUT_MS, Connections
from .sqlite_forget import redact_rows
from .sqlite_rows import (
    CANON_EVENT_COLUMNS,
    CONCEPT_COLUMNS,
    CONCEPT_COLUMNS_NO_VECTOR,
    CONCEPT_MARKS,
    EDGE_COLUMNS,
    INTENT_COLUMNS,
    LEASE_COLUMNS,
    SESSION_COLUMNS,
    canon_event_from,
    concept_from,
    concept_row,
    edge_from,
    intent_from,
    interaction_from,
    lease_from,
    lease_row,
    session_from,
)

log = logging.getLogger(__name__)

IDS_PER_DELETE = 500  # ids bound in one DELETE statement


class _FtsKeywordIndex:
    """One session's view of the FTS5 index."""

    def __init__(self, db: Connections, session: str) -> None:
        self._db = db
        self._session = session

    def search(self, query: str, limit: int) -> list[tuple[str, float]]:
        """bm25 over FTS5, restricted to the session: [(node id, -bm25)], best first."""
        match = fts5_query(query)
        if match is None or limit <= 0:
            return []
        rows = self._db.read(
            "SELECT c.id, bm25(concepts_fts) AS rank FROM concepts_fts "
            "JOIN concepts AS c ON c.rid = concepts_fts.rowid "
            "WHERE concepts_fts MATCH ? AND c.session = ? "
            "ORDER BY rank, c.id LIMIT ?",
            (match, self._session, limit),
        )
        return [(str(node_id), -float(rank)) for node_id, rank in rows]


class SqliteStore:
    kind = "sqlite"
    has_vector_search = True
    vector_in_store = False

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._db, applied = Connections.open(self.path)
        #: versions this open applied (what `lambo provision` reports)
        self.migrations_applied: list[int] = applied

    def fence(self, session: str, fence: Fence | None) -> None:
        """Check every later write of ``session`` against ``fence`` (None: no check)."""
        self._db.fence(session, fence)

    # -- schema ----------------------------------------------------------------

    def schema_version(self) -> int:
        with self._db.schema() as conn:
            done = migrations.applied_versions(conn)
        return done[-1] if done else 0

    def migrate(self) -> list[int]:
        """Apply missing migrations; the versions applied ([] when current)."""
        with self._db.schema() as conn:
            applied = migrations.migrate(conn)
        self.migrations_applied.extend(applied)
        return applied

    def close(self) -> None:
        self._db.close()

    # -- sessions --------------------------------------------------------------

    def ensure_session(self, name: str, now: float) -> SessionRecord:
        with self._db.write(name) as conn:
            conn.execute(
                "INSERT INTO sessions(name, created_at) VALUES (?, ?) ON CONFLICT(name) DO NOTHING",
                (name, now),
            )
        record = self.get_session(name)
        assert record is not None  # just written, sessions are never deleted here
        return record

    def get_session(self, name: str) -> SessionRecord | None:
        rows = self._db.read(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE name = ?",
            (name,),
        )
        return session_from(rows[0]) if rows else None

    def list_sessions(self) -> list[SessionRecord]:
        rows = self._db.read(f"SELECT {SESSION_COLUMNS} FROM sessions ORDER BY name")
        return [session_from(row) for row in rows]

    def stamp_contract(self, name: str, contract: dict[str, Any]) -> None:
        text = to_json(contract)
        with self._db.write(name) as conn:
            cur = conn.execute(
                "UPDATE sessions SET embedding_contract = ? WHERE name = ?", (text, name)
            )
            if cur.rowcount != 1:
                raise refused(f"no session {name!r}")

    def mark_shared_layer(self, name: str) -> None:
        with self._db.write(name) as conn:
            cur = conn.execute("UPDATE sessions SET shared_layer = 1 WHERE name = ?", (name,))
            if cur.rowcount != 1:
                raise refused(f"no session {name!r}")

    def set_gc_clock(self, name: str, last_gc_at: float | None, last_gc_epoch: int) -> None:
        with self._db.write(name) as conn:
            cur = conn.execute(
                "UPDATE sessions SET last_gc_at = ?, last_gc_epoch = ? WHERE name = ?",
                (last_gc_at, last_gc_epoch, name),
            )
            if cur.rowcount != 1:
                raise refused(f"no session {name!r}")

    # -- graph -------------------------------------------------------------------

    def apply(self, batch: WriteBatch) -> None:
        """Commit the whole batch in one transaction, or nothing (see base.py)."""
        check_batch_sessions(batch)
        with self._db.write(batch.session) as conn:
            if batch.interaction is not None:
                i = batch.interaction
                conn.execute(
                    "INSERT INTO interactions(id, session, agent_id, kind, created_at, "
                    "about_time, summary) VALUES (?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT(id) DO NOTHING",
                    (i.id, i.session, i.agent_id, i.kind.value, i.created_at, i.about_time,
                     i.summary),
                )  # fmt: skip
            conn.executemany(
                f"INSERT INTO concepts({CONCEPT_COLUMNS}) VALUES ({CONCEPT_MARKS})",
                [concept_row(c) for c in batch.concepts],
            )
            # One statement per edge, in order: a repeat within the batch reinforces.
            for e in batch.edges:
                conn.execute(
                    f"INSERT INTO edges({EDGE_COLUMNS}) "
                    "VALUES (?, ?, ?, ?, MIN(?, ?), ?, ?, ?, ?) "
                    "ON CONFLICT(session, src, dst, edge_type) "
                    "DO UPDATE SET weight = MIN(weight + 1.0, ?)",
                    (e.session, e.src, e.dst, e.edge_type.value, e.weight, EDGE_WEIGHT_CAP,
                     e.interaction_id, e.agent_id, e.created_at, e.about_time, EDGE_WEIGHT_CAP),
                )  # fmt: skip
            if batch.intent_receipt_id is not None:
                cur = conn.execute(
                    "UPDATE write_intents SET state = ?, outcome = ?, settled_at = ? "
                    "WHERE receipt_id = ? AND session = ? AND state = ?",
                    (
                        IntentState.APPLIED.value,
                        to_json(batch.intent_outcome or {}),
                        batch_time(batch),
                        batch.intent_receipt_id,
                        batch.session,
                        IntentState.PENDING.value,
                    ),
                )
                if cur.rowcount != 1:
                    raise IntentNotPending(
                        WRITE_REFUSED, detail="the batch's intent is not pending in this session"
                    )
                if batch.intent_payload is not None:
                    conn.execute(
                        "UPDATE write_intents SET payload = ? WHERE receipt_id = ?",
                        (to_json(batch.intent_payload), batch.intent_receipt_id),
                    )
            written = len(batch.concepts) + len(batch.edges)
            cur = conn.execute(
                "UPDATE sessions SET mutation_count = mutation_count + ? WHERE name = ?",
                (written, batch.session),
            )
            if cur.rowcount != 1:
                raise refused(f"no session {batch.session!r}")

    def concepts(self, session: str, *, vectors: bool = True) -> Iterator[Concept]:
        columns = CONCEPT_COLUMNS if vectors else CONCEPT_COLUMNS_NO_VECTOR
        rows = self._db.read_iter(
            f"SELECT {columns} FROM concepts WHERE session = ? ORDER BY rid", (session,)
        )
        return (concept_from(row) for row in rows)

    def get_concept(self, session: str, node_id: str) -> Concept | None:
        rows = self._db.read(
            f"SELECT {CONCEPT_COLUMNS} FROM concepts WHERE session = ? AND id = ?",
            (session, node_id),
        )
        return concept_from(rows[0]) if rows else None

    def edges(self, session: str) -> Iterator[Edge]:
        rows = self._db.read_iter(
            f"SELECT {EDGE_COLUMNS} FROM edges WHERE session = ? ORDER BY eid", (session,)
        )
        return (edge_from(row) for row in rows)

    def interactions(self, session: str) -> Iterator[Interaction]:
        rows = self._db.read_iter(
            "SELECT id, session, agent_id, kind, created_at, about_time, summary "
            "FROM interactions WHERE session = ? ORDER BY created_at, rowid",
            (session,),
        )
        return (interaction_from(row) for row in rows)

    def delete_concepts(self, session: str, node_ids: Iterable[str]) -> None:
        """Delete concepts; their edges (either end) and FTS rows go in the same transaction."""
        ids = list(dict.fromkeys(node_ids))
        with self._db.write(session) as conn:
            for start in range(0, len(ids), IDS_PER_DELETE):
                chunk = ids[start : start + IDS_PER_DELETE]
                marks = ", ".join("?" * len(chunk))
                conn.execute(
                    f"DELETE FROM concepts WHERE session = ? AND id IN ({marks})",
                    (session, *chunk),
                )

    def delete_edges(self, session: str, edges: Iterable[tuple[str, str, EdgeType]]) -> int:
        """Delete edges by (src, dst, edge_type) in one transaction; how many were deleted."""
        keys = list(dict.fromkeys((src, dst, EdgeType(kind).value) for src, dst, kind in edges))
        if not keys:
            return 0
        deleted = 0
        with self._db.write(session) as conn:
            # one statement per key: each is a lookup on the (session, src, dst, edge_type) key
            for src, dst, kind in keys:
                cur = conn.execute(
                    "DELETE FROM edges WHERE session = ? AND src = ? AND dst = ? AND edge_type = ?",
                    (session, src, dst, kind),
                )
                deleted += cur.rowcount
        return deleted

    def forget(self, request: ForgetRequest) -> int:
        """A forget in one transaction (``forget.py``); the edges it removed.

        Under ``secure_delete`` the freed cells are zeroed; the FTS index is optimized so
        the concepts' terms leave its segments too; then a PASSIVE checkpoint copies the
        zeroed pages into the file without waiting on readers (a running backup): the WAL's
        old frames that held the content are overwritten as it is reused, or reset at a
        later TRUNCATE checkpoint."""
        session = request.session
        ids = list(dict.fromkeys(request.node_ids))
        redaction = request.redaction()
        with self._db.write(session, secure_delete=True) as conn:
            edges = 0
            derived: dict[str, list[str]] = {}  # interaction -> the forgotten ids it derived
            for start in range(0, len(ids), IDS_PER_DELETE):
                chunk = ids[start : start + IDS_PER_DELETE]
                marks = ", ".join("?" * len(chunk))
                row = conn.execute(
                    f"SELECT count(*) FROM edges WHERE session = ? AND (src IN ({marks}) "
                    f"OR dst IN ({marks}))",
                    (session, *chunk, *chunk),
                ).fetchone()
                edges += int(row[0])
                for src, dst in conn.execute(
                    f"SELECT src, dst FROM edges WHERE session = ? AND edge_type = ? "
                    f"AND dst IN ({marks})",
                    (session, EdgeType.DERIVES.value, *chunk),
                ):
                    derived.setdefault(src, []).append(dst)
                # edges (both ends) and FTS rows go with them, by the schema's triggers
                conn.execute(
                    f"DELETE FROM concepts WHERE session = ? AND id IN ({marks})",
                    (session, *chunk),
                )
            redact_rows(conn, session, redaction, derived)
            conn.execute("INSERT INTO concepts_fts(concepts_fts) VALUES ('optimize')")
            conn.execute(*forget_event_insert(request.event(edges), "?"))
            if request.receipt_id is not None:
                cur = conn.execute(
                    *forget_settle(
                        request.receipt_id,
                        session,
                        request.outcome(edges),
                        request.occurred_at,
                        "?",
                    )
                )
                if cur.rowcount != 1:
                    raise IntentNotPending(
                        WRITE_REFUSED, detail="the forget's intent is not pending in this session"
                    )
            conn.execute(
                "UPDATE sessions SET mutation_count = mutation_count + ? WHERE name = ?",
                (len(ids) + edges, session),
            )
        busy, _, _ = self._db.checkpoint("PASSIVE")
        if busy:
            log.info(
                "forget in session %s: a reader held part of the WAL; the frames that held "
                "the forgotten text go at a later checkpoint",
                session,
            )
        return edges

    def add_forget_event(self, event: ForgetEvent) -> None:
        """One audit row as it is (what a store copy writes); nothing else changes."""
        with self._db.write(event.session) as conn:
            conn.execute(*forget_event_insert(event, "?"))

    def forget_events(self, session: str) -> list[ForgetEvent]:
        rows = self._db.read(
            f"SELECT {FORGET_EVENT_COLUMNS} FROM forget_events WHERE session = ? "
            "ORDER BY occurred_at, id",
            (session,),
        )
        return [forget_event_from(row) for row in rows]

    def set_status(self, session: str, node_id: str, status: Status) -> None:
        """A no-op for a concept no longer there (collected meanwhile)."""
        with self._db.write(session) as conn:
            conn.execute(
                "UPDATE concepts SET status = ? WHERE session = ? AND id = ?",
                (status.value, session, node_id),
            )

    def add_access_counts(self, session: str, counts: dict[str, int]) -> None:
        """Add to access counts; ids no longer there are skipped."""
        with self._db.write(session) as conn:
            conn.executemany(
                "UPDATE concepts SET access_count = access_count + ? WHERE session = ? AND id = ?",
                [(n, session, node_id) for node_id, n in counts.items()],
            )

    def bump_gc_survived(self, session: str, node_ids: Iterable[str]) -> None:
        """Add one per occurrence of each id to ``gc_survived``; ids no longer there skipped."""
        counts = Counter(node_ids)
        if not counts:
            return
        with self._db.write(session) as conn:
            conn.executemany(
                "UPDATE concepts SET gc_survived = gc_survived + ? WHERE session = ? AND id = ?",
                [(n, session, node_id) for node_id, n in counts.items()],
            )

    def keyword_index(self, session: str) -> _FtsKeywordIndex:
        return _FtsKeywordIndex(self._db, session)

    # -- write intents -----------------------------------------------------------

    def add_intent(self, intent: WriteIntent) -> WriteIntent:
        """Record a pending intent; returns it with its store-wide ``seq``."""
        payload = to_json(intent.payload)
        with self._db.write(intent.session) as conn:
            cur = conn.execute(
                "INSERT INTO write_intents(receipt_id, session, agent_id, tool, payload, "
                "created_at, state, via) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (intent.receipt_id, intent.session, intent.agent_id, intent.tool, payload,
                 intent.created_at, IntentState.PENDING.value, intent.via),
            )  # fmt: skip
            seq = cur.lastrowid
        assert seq is not None
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
            f"SELECT {INTENT_COLUMNS} FROM write_intents WHERE session = ? AND state = ? "
            "ORDER BY seq",
            (session, IntentState.PENDING.value),
        )
        return [intent_from(row) for row in rows]

    def intents(self, session: str) -> Iterator[WriteIntent]:
        """Every intent of the session, any state, oldest first (created, then receipt id)."""
        rows = self._db.read_iter(
            f"SELECT {INTENT_COLUMNS} FROM write_intents WHERE session = ? "
            "ORDER BY created_at, receipt_id",
            (session,),
        )
        return (intent_from(row) for row in rows)

    def get_intent(self, receipt_id: str) -> WriteIntent | None:
        rows = self._db.read(
            f"SELECT {INTENT_COLUMNS} FROM write_intents WHERE receipt_id = ?", (receipt_id,)
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
        with self._db.write() as conn:
            row = conn.execute(
                "SELECT session FROM write_intents WHERE receipt_id = ?", (receipt_id,)
            ).fetchone()
            if row is not None:
                self._db.check_fence(conn, str(row[0]))
            cur = conn.execute(
                "UPDATE write_intents SET state = ?, outcome = ?, settled_at = ? "
                "WHERE receipt_id = ? AND state = ?",
                (final.value, text, when, receipt_id, IntentState.PENDING.value),
            )
            if cur.rowcount != 1:
                raise IntentNotPending(WRITE_REFUSED, detail="no pending intent with that receipt")
            if payload is not None:
                conn.execute(
                    "UPDATE write_intents SET payload = ? WHERE receipt_id = ?",
                    (to_json(payload), receipt_id),
                )

    # -- canonization events -------------------------------------------------------

    def add_canon_event(self, event: CanonizationEvent) -> None:
        with self._db.write(event.session) as conn:
            conn.execute(
                "INSERT INTO canonization_events(session, node_id, from_status, to_status, "
                "blast_radius, occurred_at) VALUES (?, ?, ?, ?, ?, ?)",
                (event.session, event.node_id, event.from_status.value, event.to_status.value,
                 event.blast_radius, event.occurred_at),
            )  # fmt: skip

    def canon_events(self, session: str) -> list[CanonizationEvent]:
        rows = self._db.read(
            f"SELECT {CANON_EVENT_COLUMNS} FROM canonization_events WHERE session = ? "
            "ORDER BY occurred_at, id",
            (session,),
        )
        return [canon_event_from(row) for row in rows]

    # -- leases ------------------------------------------------------------------

    def acquire_lease(self, lease: Lease, now: float) -> Lease | None:
        """Take the session's lease if it is free, expired, or already ours.

        Returns the stored lease (token = the previous token + 1, or 1), or
        None while another holder's lease is live.
        """
        with self._db.write() as conn:
            row = conn.execute(
                "SELECT holder, expires_at, token FROM session_leases WHERE session = ?",
                (lease.session,),
            ).fetchone()
            if row is not None and row[0] != lease.holder and row[1] > now:
                return None
            stored = replace(lease, token=(row[2] if row is not None else 0) + 1)
            conn.execute(
                f"INSERT OR REPLACE INTO session_leases({LEASE_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                lease_row(stored),
            )
        return stored

    def renew_lease(self, session: str, token: int, now: float, ttl: float) -> bool:
        """Extend our lease; False when the token is no longer the current one, or the
        lease was released (a heartbeat still in flight must not bring it back)."""
        with self._db.write() as conn:
            cur = conn.execute(
                "UPDATE session_leases SET heartbeat_at = ?, expires_at = ? "
                "WHERE session = ? AND token = ? AND expires_at > 0",
                (now, now + ttl, session, token),
            )
            return cur.rowcount == 1

    def release_lease(self, session: str, token: int) -> None:
        """Give the lease up if the token is current (else a no-op).

        The row stays, expired (expires_at = 0), so the next token still grows.
        """
        with self._db.write() as conn:
            conn.execute(
                "UPDATE session_leases SET expires_at = 0 WHERE session = ? AND token = ?",
                (session, token),
            )

    def record_lease_socket(self, session: str, token: int, socket: str) -> bool:
        """Record where the holder of lease ``token`` published ("" for nowhere).

        False (nothing changed) when the token is no longer the current one.
        """
        with self._db.write() as conn:
            cur = conn.execute(
                "UPDATE session_leases SET socket = ? WHERE session = ? AND token = ?",
                (socket, session, token),
            )
            return cur.rowcount == 1

    def get_lease(self, session: str) -> Lease | None:
        rows = self._db.read(
            f"SELECT {LEASE_COLUMNS} FROM session_leases WHERE session = ?", (session,)
        )
        return lease_from(rows[0]) if rows else None


def read_lease(path: Path, session: str) -> Lease | None:
    """The session's lease in the store file at ``path``, read without opening the store.

    For a caller that must not create or migrate anything (the CLI looking for
    a hub): the file is opened read-only, and a file that does not exist, or
    cannot answer (an older schema, a lock held too long), gives None.
    """
    try:
        uri = Path(path).resolve().as_uri() + "?mode=ro"
    except (OSError, ValueError):
        return None
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
    except sqlite3.Error:
        return None
    try:
        row = conn.execute(
            f"SELECT {LEASE_COLUMNS} FROM session_leases WHERE session = ?", (session,)
        ).fetchone()
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return lease_from(row) if row is not None else None
