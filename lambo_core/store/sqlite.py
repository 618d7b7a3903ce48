"""SqliteStore: one SQLite file holding many sessions.

Connections and threads: two connections to the same file, both opened with
``check_same_thread=False``.

- The *write* connection runs every write, each in its own ``BEGIN IMMEDIATE``
  transaction, under ``_write_lock`` (the apply worker, the daemon and the
  loop may all write; the lock keeps their transactions from interleaving on
  one connection; other processes are held off by SQLite's own lock, waited
  for up to ``busy_timeout``).
- The *read* connection (``query_only``) serves every read under
  ``_read_lock``. WAL lets it read the last committed state while a write
  transaction is open, so a recall on the event loop never waits for an apply.

Fencing (base.py): ``_write(session)`` checks the session's fence inside the
transaction's ``BEGIN IMMEDIATE``, which also holds off another process's
``acquire_lease``, so no takeover can land between the check and the commit.

Both connections run in autocommit mode (``isolation_level=None``): every
transaction here is explicit. PRAGMAs: WAL, ``synchronous=NORMAL`` (durable
at each checkpoint, and never corrupt, in WAL mode), ``foreign_keys=ON``,
``busy_timeout=5000``.

FTS5: ``concepts_fts`` is an external-content index over ``concepts.content``
kept in sync by triggers, so every insert or delete of a concept updates it in
the same transaction. See ``migrations.py`` for the schema.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import StoreError
from ..index.keywords import fts5_query
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
    Vector,
    WriteBatch,
    WriteIntent,
)
from . import migrations
from .base import EDGE_WEIGHT_CAP, Fence, IntentNotPending, fence_problem, fenced_out
from .files import create_private_file, make_private_dirs

BUSY_TIMEOUT_MS = 5000
_CHUNK = 500  # rows fetched per read-lock hold; ids bound per DELETE

WRITE_REFUSED = "the store refused the write; the detail was logged"
READ_FAILED = "the store could not be read; the detail was logged"

_CONCEPT_COLUMNS = (
    "id, session, content, canonical_key, concept_type, status, created_at, about_time, "
    "agent_id, interaction_id, access_count, vector, repo_scope, gc_survived"
)
_EDGE_COLUMNS = (
    "session, src, dst, edge_type, weight, interaction_id, agent_id, created_at, about_time"
)
_INTENT_COLUMNS = (
    "receipt_id, session, agent_id, tool, payload, created_at, seq, state, settled_at, outcome"
)
_LEASE_COLUMNS = "session, holder, pid, agent, acquired_at, heartbeat_at, expires_at, token, socket"


def vector_to_blob(vector: Vector | None) -> bytes | None:
    """Little-endian float32 bytes of a vector (None stays None)."""
    if vector is None:
        return None
    return np.ascontiguousarray(vector, dtype="<f4").tobytes()


def blob_to_vector(blob: bytes | None) -> Vector | None:
    """A fresh, writable float32 row from little-endian float32 bytes."""
    if blob is None:
        return None
    return np.frombuffer(blob, dtype="<f4").astype(np.float32)


def refused(detail: str) -> StoreError:
    """The caller-safe write refusal; ``detail`` says why, for the log."""
    return StoreError(WRITE_REFUSED, detail=detail)


class _FtsKeywordIndex:
    """One session's view of the FTS5 index."""

    def __init__(self, store: SqliteStore, session: str) -> None:
        self._store = store
        self._session = session

    def search(self, query: str, limit: int) -> list[tuple[str, float]]:
        """bm25 over FTS5, restricted to the session: [(node id, -bm25)], best first."""
        match = fts5_query(query)
        if match is None or limit <= 0:
            return []
        rows = self._store._read(
            "SELECT c.id, bm25(concepts_fts) AS rank FROM concepts_fts "
            "JOIN concepts AS c ON c.rid = concepts_fts.rowid "
            "WHERE concepts_fts MATCH ? AND c.session = ? "
            "ORDER BY rank, c.id LIMIT ?",
            (match, self._session, limit),
        )
        return [(str(node_id), -float(rank)) for node_id, rank in rows]


def _switch_to_wal(conn: sqlite3.Connection) -> Any:
    """``PRAGMA journal_mode = WAL``, retried while another process holds the file.

    On a brand-new file, serves starting at the same moment race to switch it
    to WAL, and SQLite answers the loser "database is locked" at once rather
    than through the busy handler; the switch is retried for the busy timeout.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            return conn.execute("PRAGMA journal_mode = WAL").fetchone()
        except sqlite3.OperationalError as exc:
            busy = "locked" in str(exc) or "busy" in str(exc)
            if not busy or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


class SqliteStore:
    kind = "sqlite"
    has_vector_search = True

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._write_lock = threading.Lock()
        # Re-entrant: an abandoned row iterator may be finalised (closing its
        # cursor) by the garbage collector while this thread holds the lock.
        self._read_lock = threading.RLock()
        self._closed = False
        self._fences: dict[str, Fence] = {}
        try:
            make_private_dirs(self.path.parent)
            create_private_file(self.path)  # 600 before SQLite makes it (and its -wal, -shm)
        except OSError as exc:
            raise StoreError("the store's file could not be created", detail=str(exc)) from exc
        self._wconn = self._connect(write=True)
        try:
            #: versions this open applied (what `lambo provision` reports)
            self.migrations_applied: list[int] = migrations.migrate(self._wconn)
            self._rconn = self._connect(write=False)
        except BaseException:
            self._wconn.close()
            raise

    def _connect(self, *, write: bool) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise StoreError("the store file could not be opened", detail=str(exc)) from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA synchronous = NORMAL")
            if write:
                mode = _switch_to_wal(conn)
                if mode is None or str(mode[0]).lower() != "wal":
                    raise sqlite3.OperationalError(f"journal_mode stayed {mode!r}")
            else:
                conn.execute("PRAGMA query_only = ON")
        except sqlite3.Error as exc:
            conn.close()
            raise StoreError("the store file could not be opened", detail=str(exc)) from exc
        return conn

    # -- plumbing ------------------------------------------------------------

    @contextmanager
    def _write(self, session: str | None = None) -> Iterator[sqlite3.Connection]:
        """One BEGIN IMMEDIATE transaction on the write connection, or nothing.

        With ``session``, the transaction first checks the session's fence (see
        base.py), so the check and the write commit together or not at all. Any
        exception rolls back; a driver error comes out as StoreError.
        """
        with self._write_lock:
            conn = self._wconn
            try:
                conn.execute("BEGIN IMMEDIATE")
                if session is not None:
                    self._check_fence(conn, session)
                yield conn
                conn.execute("COMMIT")
            except BaseException as exc:
                # the original failure is the one worth reporting, not the rollback's
                with suppress(sqlite3.Error):
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise refused(str(exc)) from exc
                raise

    def _check_fence(self, conn: sqlite3.Connection, session: str) -> None:
        fence = self._fences.get(session)
        if fence is None:
            return
        row = conn.execute(
            "SELECT token, expires_at FROM session_leases WHERE session = ?", (session,)
        ).fetchone()
        problem = fence_problem(fence, None if row is None else (int(row[0]), float(row[1])))
        if problem is not None:
            raise fenced_out(session, fence, problem)

    def fence(self, session: str, fence: Fence | None) -> None:
        """Check every later write of ``session`` against ``fence`` (None: no check)."""
        with self._write_lock:
            if fence is None:
                self._fences.pop(session, None)
            else:
                self._fences[session] = fence

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._read_lock:
            try:
                return self._rconn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(READ_FAILED, detail=str(exc)) from exc

    def _read_iter(self, sql: str, params: tuple[Any, ...]) -> Iterator[tuple[Any, ...]]:
        """Rows in chunks, holding the read lock only while fetching each chunk."""
        with self._read_lock:
            try:
                cursor = self._rconn.execute(sql, params)
            except sqlite3.Error as exc:
                raise StoreError(READ_FAILED, detail=str(exc)) from exc
        try:
            while True:
                with self._read_lock:
                    try:
                        chunk = cursor.fetchmany(_CHUNK)
                    except sqlite3.Error as exc:
                        raise StoreError(READ_FAILED, detail=str(exc)) from exc
                if not chunk:
                    return
                yield from chunk
        finally:
            with self._read_lock, suppress(sqlite3.Error):
                cursor.close()

    # -- schema ----------------------------------------------------------------

    def schema_version(self) -> int:
        with self._write_lock:
            done = migrations.applied_versions(self._wconn)
        return done[-1] if done else 0

    def migrate(self) -> list[int]:
        """Apply missing migrations; the versions applied ([] when current)."""
        with self._write_lock:
            applied = migrations.migrate(self._wconn)
        self.migrations_applied.extend(applied)
        return applied

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._write_lock, self._read_lock:
            for conn in (self._rconn, self._wconn):
                with suppress(sqlite3.Error):
                    conn.close()

    # -- sessions --------------------------------------------------------------

    def ensure_session(self, name: str, now: float) -> SessionRecord:
        with self._write(name) as conn:
            conn.execute(
                "INSERT INTO sessions(name, created_at) VALUES (?, ?) ON CONFLICT(name) DO NOTHING",
                (name, now),
            )
        record = self.get_session(name)
        assert record is not None  # just written, sessions are never deleted here
        return record

    def get_session(self, name: str) -> SessionRecord | None:
        rows = self._read(
            "SELECT name, created_at, embedding_contract, last_gc_at, last_gc_epoch, "
            "mutation_count FROM sessions WHERE name = ?",
            (name,),
        )
        return _session(rows[0]) if rows else None

    def list_sessions(self) -> list[SessionRecord]:
        rows = self._read(
            "SELECT name, created_at, embedding_contract, last_gc_at, last_gc_epoch, "
            "mutation_count FROM sessions ORDER BY name"
        )
        return [_session(row) for row in rows]

    def stamp_contract(self, name: str, contract: dict[str, Any]) -> None:
        text = to_json(contract)
        with self._write(name) as conn:
            cur = conn.execute(
                "UPDATE sessions SET embedding_contract = ? WHERE name = ?", (text, name)
            )
            if cur.rowcount != 1:
                raise refused(f"no session {name!r}")

    def set_gc_clock(self, name: str, last_gc_at: float | None, last_gc_epoch: int) -> None:
        with self._write(name) as conn:
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
        with self._write(batch.session) as conn:
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
                f"INSERT INTO concepts({_CONCEPT_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [_concept_row(c) for c in batch.concepts],
            )
            # One statement per edge, in order: a repeat within the batch reinforces.
            for e in batch.edges:
                conn.execute(
                    f"INSERT INTO edges({_EDGE_COLUMNS}) "
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
            written = len(batch.concepts) + len(batch.edges)
            cur = conn.execute(
                "UPDATE sessions SET mutation_count = mutation_count + ? WHERE name = ?",
                (written, batch.session),
            )
            if cur.rowcount != 1:
                raise refused(f"no session {batch.session!r}")

    def concepts(self, session: str) -> Iterator[Concept]:
        rows = self._read_iter(
            f"SELECT {_CONCEPT_COLUMNS} FROM concepts WHERE session = ? ORDER BY rid", (session,)
        )
        return (_concept(row) for row in rows)

    def get_concept(self, session: str, node_id: str) -> Concept | None:
        rows = self._read(
            f"SELECT {_CONCEPT_COLUMNS} FROM concepts WHERE session = ? AND id = ?",
            (session, node_id),
        )
        return _concept(rows[0]) if rows else None

    def edges(self, session: str) -> Iterator[Edge]:
        rows = self._read_iter(
            f"SELECT {_EDGE_COLUMNS} FROM edges WHERE session = ? ORDER BY eid", (session,)
        )
        return (_edge(row) for row in rows)

    def interactions(self, session: str) -> Iterator[Interaction]:
        rows = self._read_iter(
            "SELECT id, session, agent_id, kind, created_at, about_time, summary "
            "FROM interactions WHERE session = ? ORDER BY created_at, rowid",
            (session,),
        )
        return (_interaction(row) for row in rows)

    def delete_concepts(self, session: str, node_ids: Iterable[str]) -> None:
        """Delete concepts; their edges (either end) and FTS rows go in the same transaction."""
        ids = list(dict.fromkeys(node_ids))
        with self._write(session) as conn:
            for start in range(0, len(ids), _CHUNK):
                chunk = ids[start : start + _CHUNK]
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
        with self._write(session) as conn:
            # one statement per key: each is a lookup on the (session, src, dst, edge_type) key
            for src, dst, kind in keys:
                cur = conn.execute(
                    "DELETE FROM edges WHERE session = ? AND src = ? AND dst = ? AND edge_type = ?",
                    (session, src, dst, kind),
                )
                deleted += cur.rowcount
        return deleted

    def set_status(self, session: str, node_id: str, status: Status) -> None:
        """A no-op for a concept no longer there (collected meanwhile)."""
        with self._write(session) as conn:
            conn.execute(
                "UPDATE concepts SET status = ? WHERE session = ? AND id = ?",
                (status.value, session, node_id),
            )

    def add_access_counts(self, session: str, counts: dict[str, int]) -> None:
        """Add to access counts; ids no longer there are skipped."""
        with self._write(session) as conn:
            conn.executemany(
                "UPDATE concepts SET access_count = access_count + ? WHERE session = ? AND id = ?",
                [(n, session, node_id) for node_id, n in counts.items()],
            )

    def bump_gc_survived(self, session: str, node_ids: Iterable[str]) -> None:
        """Add one per occurrence of each id to ``gc_survived``; ids no longer there skipped."""
        counts = Counter(node_ids)
        if not counts:
            return
        with self._write(session) as conn:
            conn.executemany(
                "UPDATE concepts SET gc_survived = gc_survived + ? WHERE session = ? AND id = ?",
                [(n, session, node_id) for node_id, n in counts.items()],
            )

    def keyword_index(self, session: str) -> _FtsKeywordIndex:
        return _FtsKeywordIndex(self, session)

    # -- write intents -----------------------------------------------------------

    def add_intent(self, intent: WriteIntent) -> WriteIntent:
        """Record a pending intent; returns it with its store-wide ``seq``."""
        payload = to_json(intent.payload)
        with self._write(intent.session) as conn:
            cur = conn.execute(
                "INSERT INTO write_intents(receipt_id, session, agent_id, tool, payload, "
                "created_at, state) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (intent.receipt_id, intent.session, intent.agent_id, intent.tool, payload,
                 intent.created_at, IntentState.PENDING.value),
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
        rows = self._read(
            f"SELECT {_INTENT_COLUMNS} FROM write_intents WHERE session = ? AND state = ? "
            "ORDER BY seq",
            (session, IntentState.PENDING.value),
        )
        return [_intent(row) for row in rows]

    def get_intent(self, receipt_id: str) -> WriteIntent | None:
        rows = self._read(
            f"SELECT {_INTENT_COLUMNS} FROM write_intents WHERE receipt_id = ?", (receipt_id,)
        )
        return _intent(rows[0]) if rows else None

    def settle_intent(
        self, receipt_id: str, state: str, outcome: dict[str, Any], when: float
    ) -> None:
        """Settle a pending intent as applied or failed; anything else is refused."""
        final = settled_state(state)
        text = to_json(outcome)
        with self._write() as conn:
            row = conn.execute(
                "SELECT session FROM write_intents WHERE receipt_id = ?", (receipt_id,)
            ).fetchone()
            if row is not None:
                self._check_fence(conn, str(row[0]))
            cur = conn.execute(
                "UPDATE write_intents SET state = ?, outcome = ?, settled_at = ? "
                "WHERE receipt_id = ? AND state = ?",
                (final.value, text, when, receipt_id, IntentState.PENDING.value),
            )
            if cur.rowcount != 1:
                raise IntentNotPending(WRITE_REFUSED, detail="no pending intent with that receipt")

    # -- canonization events -------------------------------------------------------

    def add_canon_event(self, event: CanonizationEvent) -> None:
        with self._write(event.session) as conn:
            conn.execute(
                "INSERT INTO canonization_events(session, node_id, from_status, to_status, "
                "blast_radius, occurred_at) VALUES (?, ?, ?, ?, ?, ?)",
                (event.session, event.node_id, event.from_status.value, event.to_status.value,
                 event.blast_radius, event.occurred_at),
            )  # fmt: skip

    def canon_events(self, session: str) -> list[CanonizationEvent]:
        rows = self._read(
            "SELECT session, node_id, from_status, to_status, blast_radius, occurred_at "
            "FROM canonization_events WHERE session = ? ORDER BY occurred_at, id",
            (session,),
        )
        return [
            CanonizationEvent(
                session=row[0],
                node_id=row[1],
                from_status=Status(row[2]),
                to_status=Status(row[3]),
                blast_radius=row[4],
                occurred_at=row[5],
            )
            for row in rows
        ]

    # -- leases ------------------------------------------------------------------

    def acquire_lease(self, lease: Lease, now: float) -> Lease | None:
        """Take the session's lease if it is free, expired, or already ours.

        Returns the stored lease (token = the previous token + 1, or 1), or
        None while another holder's lease is live.
        """
        with self._write() as conn:
            row = conn.execute(
                "SELECT holder, expires_at, token FROM session_leases WHERE session = ?",
                (lease.session,),
            ).fetchone()
            if row is not None and row[0] != lease.holder and row[1] > now:
                return None
            stored = replace(lease, token=(row[2] if row is not None else 0) + 1)
            conn.execute(
                f"INSERT OR REPLACE INTO session_leases({_LEASE_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                _lease_row(stored),
            )
        return stored

    def renew_lease(self, session: str, token: int, now: float, ttl: float) -> bool:
        """Extend our lease; False when the token is no longer the current one, or the
        lease was released (a heartbeat still in flight must not bring it back)."""
        with self._write() as conn:
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
        with self._write() as conn:
            conn.execute(
                "UPDATE session_leases SET expires_at = 0 WHERE session = ? AND token = ?",
                (session, token),
            )

    def record_lease_socket(self, session: str, token: int, socket: str) -> bool:
        """Record where the holder of lease ``token`` published ("" for nowhere).

        False (nothing changed) when the token is no longer the current one.
        """
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE session_leases SET socket = ? WHERE session = ? AND token = ?",
                (socket, session, token),
            )
            return cur.rowcount == 1

    def get_lease(self, session: str) -> Lease | None:
        rows = self._read(
            f"SELECT {_LEASE_COLUMNS} FROM session_leases WHERE session = ?", (session,)
        )
        return _lease(rows[0]) if rows else None


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
            f"SELECT {_LEASE_COLUMNS} FROM session_leases WHERE session = ?", (session,)
        ).fetchone()
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return _lease(row) if row is not None else None


# -- rules shared with MemoryStore (it mirrors this store's refusals) ---------------


def check_batch_sessions(batch: WriteBatch) -> None:
    rows: list[Any] = [*batch.concepts, *batch.edges]
    if batch.interaction is not None:
        rows.append(batch.interaction)
    if any(row.session != batch.session for row in rows):
        raise refused("a row of the batch belongs to another session")


def batch_time(batch: WriteBatch) -> float:
    """When a batch settles its intent: its interaction's time, else its newest row's."""
    if batch.interaction is not None:
        return batch.interaction.created_at
    times = [c.created_at for c in batch.concepts] + [e.created_at for e in batch.edges]
    return max(times, default=0.0)


def settled_state(state: str) -> IntentState:
    try:
        final = IntentState(state)
    except ValueError:
        final = IntentState.PENDING
    if final is IntentState.PENDING:
        raise refused(f"an intent settles as applied or failed, not {state!r}")
    return final


def to_json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise refused(f"value is not JSON-serialisable: {exc}") from exc


# -- row conversions ---------------------------------------------------------------


def _session(row: tuple[Any, ...]) -> SessionRecord:
    return SessionRecord(
        name=row[0],
        created_at=row[1],
        embedding_contract=json.loads(row[2]) if row[2] is not None else None,
        last_gc_at=row[3],
        last_gc_epoch=row[4],
        mutation_count=row[5],
    )


def _concept_row(c: Concept) -> tuple[Any, ...]:
    return (
        c.id, c.session, c.content, c.canonical_key, c.concept_type.value, c.status.value,
        c.created_at, c.about_time, c.agent_id, c.interaction_id, c.access_count,
        vector_to_blob(c.vector), c.repo_scope, c.gc_survived,
    )  # fmt: skip


def _concept(row: tuple[Any, ...]) -> Concept:
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
    )


def _edge(row: tuple[Any, ...]) -> Edge:
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


def _interaction(row: tuple[Any, ...]) -> Interaction:
    return Interaction(
        id=row[0],
        session=row[1],
        agent_id=row[2],
        kind=InteractionKind(row[3]),
        created_at=row[4],
        about_time=row[5],
        summary=row[6],
    )


def _intent(row: tuple[Any, ...]) -> WriteIntent:
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
    )


def _lease_row(lease: Lease) -> tuple[Any, ...]:
    return (
        lease.session, lease.holder, lease.pid, lease.agent, lease.acquired_at,
        lease.heartbeat_at, lease.expires_at, lease.token, lease.socket,
    )  # fmt: skip


def _lease(row: tuple[Any, ...]) -> Lease:
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
