"""Numbered schema migrations for the SQLite store.

Each migration is applied in ONE transaction together with its row in
``schema_migrations``, so a crash leaves the file either before or after a
migration, never half-way. ``migrate`` is safe to run twice and safe to race
(another process migrating the same file): it takes the write lock
(``BEGIN IMMEDIATE``) and re-checks what is applied before each step.

Never edit a migration that has shipped; add a new one.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import StoreError
from ..text import canonical_key


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]
    # SQL functions the statements call, registered on the connection first: a step that
    # must compute in Python what SQL cannot (a canonical key) stays one transaction.
    functions: tuple[tuple[str, Callable[[str], str]], ...] = ()


# Why ``rid INTEGER PRIMARY KEY`` beside the node UUID: the FTS5 table is an
# external-content index keyed by an integer rowid, and only an explicit
# INTEGER PRIMARY KEY keeps rowids stable across VACUUM. ``id`` is still the
# concept's identity (UNIQUE, referenced by edges).
#
# Why edges.src has no foreign key: a Derives edge starts at an interaction,
# not a concept. A trigger checks both ends instead (src: a concept of the
# session, or for 'derives' an interaction of it; dst: a concept of the
# session), and another removes edges leaving a deleted concept; dst keeps its
# real ON DELETE CASCADE foreign key.
_SCHEMA_V1: tuple[str, ...] = (
    """
    CREATE TABLE sessions (
        name TEXT PRIMARY KEY,
        created_at REAL NOT NULL,
        embedding_contract TEXT,
        last_gc_at REAL,
        last_gc_epoch INTEGER NOT NULL DEFAULT 0,
        mutation_count INTEGER NOT NULL DEFAULT 0
    )
    """,
    """
    CREATE TABLE concepts (
        rid INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        session TEXT NOT NULL REFERENCES sessions(name) ON DELETE CASCADE,
        content TEXT NOT NULL,
        canonical_key TEXT NOT NULL,
        concept_type TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'none',
        created_at REAL NOT NULL,
        about_time REAL NOT NULL,
        agent_id TEXT NOT NULL,
        interaction_id TEXT,
        access_count INTEGER NOT NULL DEFAULT 0,
        vector BLOB,
        repo_scope TEXT
    )
    """,
    "CREATE INDEX concepts_session_key ON concepts(session, canonical_key)",
    "CREATE INDEX concepts_session_created ON concepts(session, created_at)",
    """
    CREATE TABLE interactions (
        id TEXT PRIMARY KEY,
        session TEXT NOT NULL REFERENCES sessions(name) ON DELETE CASCADE,
        agent_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        created_at REAL NOT NULL,
        about_time REAL NOT NULL,
        summary TEXT NOT NULL
    )
    """,
    "CREATE INDEX interactions_session_created ON interactions(session, created_at)",
    """
    CREATE TABLE edges (
        eid INTEGER PRIMARY KEY,
        session TEXT NOT NULL REFERENCES sessions(name) ON DELETE CASCADE,
        src TEXT NOT NULL,
        dst TEXT NOT NULL REFERENCES concepts(id) ON DELETE CASCADE,
        edge_type TEXT NOT NULL,
        weight REAL NOT NULL,
        interaction_id TEXT,
        agent_id TEXT NOT NULL,
        created_at REAL NOT NULL,
        about_time REAL NOT NULL,
        UNIQUE (session, src, dst, edge_type)
    )
    """,
    "CREATE INDEX edges_src ON edges(src)",
    "CREATE INDEX edges_dst ON edges(dst)",
    """
    CREATE TRIGGER edges_check_ends BEFORE INSERT ON edges
    WHEN NOT EXISTS (SELECT 1 FROM concepts WHERE id = NEW.dst AND session = NEW.session)
      OR NOT (
        EXISTS (SELECT 1 FROM concepts WHERE id = NEW.src AND session = NEW.session)
        OR (NEW.edge_type = 'derives'
            AND EXISTS (SELECT 1 FROM interactions WHERE id = NEW.src AND session = NEW.session))
      )
    BEGIN
        SELECT RAISE(ABORT, 'edge end is not a concept of this session');
    END
    """,
    """
    CREATE TRIGGER concepts_drop_out_edges AFTER DELETE ON concepts
    BEGIN
        DELETE FROM edges WHERE src = OLD.id;
    END
    """,
    """
    CREATE VIRTUAL TABLE concepts_fts USING fts5(
        content,
        content = 'concepts',
        content_rowid = 'rid',
        tokenize = 'unicode61 remove_diacritics 2'
    )
    """,
    """
    CREATE TRIGGER concepts_fts_insert AFTER INSERT ON concepts
    BEGIN
        INSERT INTO concepts_fts(rowid, content) VALUES (NEW.rid, NEW.content);
    END
    """,
    """
    CREATE TRIGGER concepts_fts_delete AFTER DELETE ON concepts
    BEGIN
        INSERT INTO concepts_fts(concepts_fts, rowid, content)
        VALUES ('delete', OLD.rid, OLD.content);
    END
    """,
    """
    CREATE TRIGGER concepts_fts_update AFTER UPDATE OF content ON concepts
    BEGIN
        INSERT INTO concepts_fts(concepts_fts, rowid, content)
        VALUES ('delete', OLD.rid, OLD.content);
        INSERT INTO concepts_fts(rowid, content) VALUES (NEW.rid, NEW.content);
    END
    """,
    """
    CREATE TABLE write_intents (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        receipt_id TEXT NOT NULL UNIQUE,
        session TEXT NOT NULL REFERENCES sessions(name) ON DELETE CASCADE,
        agent_id TEXT NOT NULL,
        tool TEXT NOT NULL,
        payload TEXT NOT NULL,
        created_at REAL NOT NULL,
        state TEXT NOT NULL DEFAULT 'pending',
        settled_at REAL,
        outcome TEXT
    )
    """,
    "CREATE INDEX write_intents_session_state ON write_intents(session, state, seq)",
    """
    CREATE TABLE canonization_events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        session TEXT NOT NULL REFERENCES sessions(name) ON DELETE CASCADE,
        node_id TEXT NOT NULL,
        from_status TEXT NOT NULL,
        to_status TEXT NOT NULL,
        blast_radius INTEGER,
        occurred_at REAL NOT NULL
    )
    """,
    "CREATE INDEX canonization_events_session ON canonization_events(session, occurred_at)",
    # No foreign key to sessions: a serve takes the lease before it creates the session.
    """
    CREATE TABLE session_leases (
        session TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        pid INTEGER NOT NULL,
        agent TEXT NOT NULL,
        acquired_at REAL NOT NULL,
        heartbeat_at REAL NOT NULL,
        expires_at REAL NOT NULL,
        token INTEGER NOT NULL
    )
    """,
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial schema", _SCHEMA_V1),
    Migration(
        2,
        "concepts.gc_survived: garbage-collection sweeps a concept has outlived",
        ("ALTER TABLE concepts ADD COLUMN gc_survived INTEGER NOT NULL DEFAULT 0",),
    ),
    Migration(
        3,
        "session-ordered indexes: opening a session scans its rows in order without a sort",
        (
            "CREATE INDEX concepts_session_rid ON concepts(session, rid)",
            "CREATE INDEX edges_session_eid ON edges(session, eid)",
        ),
    ),
    Migration(
        4,
        "session_leases.socket: where the holder published its hub socket, so a serve in "
        "any environment finds it",
        ("ALTER TABLE session_leases ADD COLUMN socket TEXT",),
    ),
    # Keys kept case from here on (#15): "Case Test" and "case test" are two concepts, as
    # src/Main.rs and src/main.rs are two files. Recomputing every stored key cannot make
    # two concepts collide: a case-kept key is finer than the casefolded one it replaces,
    # so concepts that had different keys still do. Concepts that differed only in case
    # were one concept already; that one concept keeps its text, now its key. The
    # function is the current rule, which a later key change will migrate from again.
    Migration(
        5,
        "concepts.canonical_key keeps case: every stored key recomputed from its content",
        ("UPDATE concepts SET canonical_key = lambo_canonical_key(content)",),
        functions=(("lambo_canonical_key", canonical_key),),
    ),
    # NULL on the rows already there: they were written before a write could reach a
    # session through another one (a layer), so they came through their own session.
    Migration(
        6,
        "write_intents.via: the session a write was submitted through, which alone is "
        "told its receipt (a write into a layer is submitted through the project)",
        ("ALTER TABLE write_intents ADD COLUMN via TEXT",),
    ),
    Migration(
        7,
        "sessions.shared_layer: set once a serve attaches the session as a shared layer, "
        "so every serve of it refuses bare relative paths in its writes",
        ("ALTER TABLE sessions ADD COLUMN shared_layer INTEGER NOT NULL DEFAULT 0",),
    ),
    # The audit of `lambo forget`: ids and content digests (JSON arrays), never the content.
    Migration(
        8,
        "forget_events: who removed which concepts and when (ids and content digests only)",
        (
            """
            CREATE TABLE forget_events (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                session TEXT NOT NULL REFERENCES sessions(name) ON DELETE CASCADE,
                agent_id TEXT NOT NULL,
                occurred_at REAL NOT NULL,
                node_ids TEXT NOT NULL,
                digests TEXT NOT NULL,
                edges_removed INTEGER NOT NULL,
                forced INTEGER NOT NULL,
                receipt_id TEXT
            )
            """,
            "CREATE INDEX forget_events_session ON forget_events(session, occurred_at)",
        ),
    ),
    # NULL on the rows already there: before lambo_derive_image every vector was the
    # embedding of the concept's own text.
    Migration(
        9,
        "concepts.vector_source: where an image concept's vector came from (the image's "
        "mime, or 'client'); NULL for a text concept",
        ("ALTER TABLE concepts ADD COLUMN vector_source TEXT",),
    ),
)

LATEST_VERSION = MIGRATIONS[-1].version

_RECORD_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    description TEXT NOT NULL,
    applied_at REAL NOT NULL
)
"""


def applied_versions(conn: sqlite3.Connection) -> list[int]:
    """Versions recorded in the file, ascending ([] for a fresh file)."""
    try:
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
        ).fetchone()
        if exists is None:
            return []
        rows = conn.execute("SELECT version FROM schema_migrations ORDER BY version").fetchall()
    except sqlite3.Error as exc:
        raise StoreError("the store's schema could not be read", detail=str(exc)) from exc
    return [int(row[0]) for row in rows]


def migrate(conn: sqlite3.Connection, upto: int | None = None) -> list[int]:
    """Apply every missing migration (up to ``upto``), each in one transaction.

    ``conn`` must be in autocommit mode (``isolation_level=None``): this
    function issues its own BEGIN/COMMIT. Returns the versions it applied,
    ascending; ``[]`` when the file was already current. A file written by a
    newer lambo (a version this code does not know) is refused.
    """
    target = LATEST_VERSION if upto is None else upto
    done = applied_versions(conn)
    if done and done[-1] > LATEST_VERSION:
        raise StoreError(
            f"the store was written by a newer lambo (schema {done[-1]}, "
            f"this one knows up to {LATEST_VERSION})"
        )
    applied: list[int] = []
    for migration in MIGRATIONS:
        if migration.version > target or migration.version in done:
            continue
        if _apply_one(conn, migration):
            applied.append(migration.version)
    return applied


def _apply_one(conn: sqlite3.Connection, migration: Migration) -> bool:
    """Apply one migration with its record row; False if another process beat us to it."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(_RECORD_TABLE)
            # Re-check under the write lock: a concurrent `migrate` may have won.
            row = conn.execute(
                "SELECT 1 FROM schema_migrations WHERE version = ?", (migration.version,)
            ).fetchone()
            if row is not None:
                conn.execute("ROLLBACK")
                return False
            for name, function in migration.functions:
                conn.create_function(name, 1, function, deterministic=True)
            for statement in migration.statements:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_migrations(version, description, applied_at) VALUES (?, ?, ?)",
                (migration.version, migration.description, time.time()),
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    except sqlite3.Error as exc:
        raise StoreError(
            f"the store's schema could not be migrated to version {migration.version}",
            detail=str(exc),
        ) from exc
    return True
