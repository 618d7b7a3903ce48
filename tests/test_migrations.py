"""Numbered migrations: one transaction each, recorded, idempotent, upgrading old files."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from lambo_core.errors import StoreError
from lambo_core.model import ConceptType, EdgeType, IntentState, Status
from lambo_core.store import SqliteStore, migrations
from lambo_core.store.migrations import LATEST_VERSION, MIGRATIONS, Migration, migrate

T0 = 1_700_000_000.0
A = "11111111-1111-4111-8111-111111111111"
B = "22222222-2222-4222-8222-222222222222"


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def versions(conn: sqlite3.Connection) -> list[int]:
    return [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]


def test_versions_are_numbered_from_one_without_gaps() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    assert LATEST_VERSION == MIGRATIONS[-1].version >= 2
    assert all(m.description and m.statements for m in MIGRATIONS)


def test_migrate_applies_all_then_nothing(tmp_path: Path) -> None:
    conn = connect(tmp_path / "m.db")
    assert migrations.applied_versions(conn) == []
    assert migrate(conn) == list(range(1, LATEST_VERSION + 1))
    assert migrate(conn) == []
    assert versions(conn) == list(range(1, LATEST_VERSION + 1))
    descriptions = [r[0] for r in conn.execute("SELECT description FROM schema_migrations")]
    assert descriptions == [m.description for m in MIGRATIONS]


def test_store_migrate_twice_applies_nothing_the_second_time(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    assert store.migrations_applied == list(range(1, LATEST_VERSION + 1))
    assert store.migrate() == []
    assert store.migrate() == []
    assert store.schema_version() == LATEST_VERSION
    store.close()
    again = SqliteStore(tmp_path / "s.db")
    assert again.migrations_applied == [] and again.migrate() == []
    again.close()


def test_a_failing_migration_leaves_no_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = connect(tmp_path / "f.db")
    migrate(conn, upto=1)
    broken = Migration(
        2,
        "half-way failure",
        ("CREATE TABLE half_done (x INTEGER)", "THIS IS NOT SQL"),
    )
    monkeypatch.setattr(migrations, "MIGRATIONS", (MIGRATIONS[0], broken))
    with pytest.raises(StoreError) as info:
        migrate(conn)
    assert "version 2" in info.value.message and info.value.detail
    assert versions(conn) == [1]  # neither the record row ...
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "half_done" not in tables  # ... nor the migration's own first statement
    assert not conn.in_transaction


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    conn = connect(tmp_path / "n.db")
    migrate(conn)
    conn.execute(
        "INSERT INTO schema_migrations(version, description, applied_at) VALUES (?, 'future', 0)",
        (LATEST_VERSION + 1,),
    )
    conn.close()
    with pytest.raises(StoreError) as info:
        SqliteStore(tmp_path / "n.db")
    assert "newer lambo" in info.value.message


def test_opening_a_version_1_file_upgrades_it_with_data_intact(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    assert migrate(conn, upto=1) == [1]
    columns = {r[1] for r in conn.execute("PRAGMA table_info(concepts)")}
    assert "gc_survived" not in columns  # really the older schema
    # rows as a version-1 lambo wrote them
    conn.execute(
        "INSERT INTO sessions(name, created_at, mutation_count) VALUES ('old', ?, 3)", (T0,)
    )
    vector = np.array([0.6, 0.8], dtype="<f4").tobytes()
    for node, text, blob in ((A, "legacy lease heartbeat", vector), (B, "legacy schema", None)):
        conn.execute(
            "INSERT INTO concepts(id, session, content, canonical_key, concept_type, status, "
            "created_at, about_time, agent_id, access_count, vector) "
            "VALUES (?, 'old', ?, ?, 'logic', 'candidate', ?, ?, 'agent-a', 2, ?)",
            (node, text, text, T0, T0, blob),
        )
    conn.execute(
        "INSERT INTO edges(session, src, dst, edge_type, weight, agent_id, created_at, about_time)"
        " VALUES ('old', ?, ?, 'dependency', 2.0, 'agent-a', ?, ?)",
        (A, B, T0, T0),
    )
    conn.execute(
        "INSERT INTO write_intents(receipt_id, session, agent_id, tool, payload, created_at) "
        "VALUES ('r-old', 'old', 'agent-a', 'lambo_derive', '{\"k\":1}', ?)",
        (T0,),
    )
    conn.close()

    store = SqliteStore(path)
    assert store.migrations_applied == list(range(2, LATEST_VERSION + 1))
    assert store.schema_version() == LATEST_VERSION
    record = store.get_session("old")
    assert record is not None and record.mutation_count == 3
    concepts = {c.id: c for c in store.concepts("old")}
    assert set(concepts) == {A, B}
    a = concepts[A]
    assert (a.content, a.concept_type, a.status, a.access_count, a.gc_survived) == (
        "legacy lease heartbeat",
        ConceptType.LOGIC,
        Status.CANDIDATE,
        2,
        0,
    )
    assert a.vector is not None and a.vector.tolist() == pytest.approx([0.6, 0.8])
    assert concepts[B].vector is None
    ((src, dst, kind, weight),) = [
        (e.src, e.dst, e.edge_type, e.weight) for e in store.edges("old")
    ]
    assert (src, dst, kind, weight) == (A, B, EdgeType.DEPENDENCY, 2.0)
    (pending,) = store.pending_intents("old")
    assert (pending.receipt_id, pending.payload, pending.state) == (
        "r-old",
        {"k": 1},
        IntentState.PENDING,
    )
    # the FTS rows written by version 1's triggers still answer
    assert [n for n, _ in store.keyword_index("old").search("heartbeat", 5)] == [A]
    store.close()


def test_a_version_3_lease_row_upgrades_with_no_socket_recorded(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    conn = connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    assert migrate(conn, upto=3) == [1, 2, 3]
    columns = {r[1] for r in conn.execute("PRAGMA table_info(session_leases)")}
    assert "socket" not in columns  # really the older schema
    conn.execute(
        "INSERT INTO session_leases(session, holder, pid, agent, acquired_at, heartbeat_at, "
        "expires_at, token) VALUES ('s', 'serve@host#7', 7, 'serve', ?, ?, ?, 3)",
        (T0, T0, T0 + 45),
    )
    conn.close()
    store = SqliteStore(path)
    try:
        assert 4 in store.migrations_applied
        lease = store.get_lease("s")
        assert lease is not None and lease.socket is None and lease.token == 3
        assert lease.holder == "serve@host#7" and lease.expires_at == T0 + 45
        assert store.record_lease_socket("s", 3, "/tmp/lambo-7/lambo-x.sock") is True
        again = store.get_lease("s")
        assert again is not None and again.socket == "/tmp/lambo-7/lambo-x.sock"
    finally:
        store.close()


def test_version_5_recomputes_every_key_with_case_kept(tmp_path: Path) -> None:
    path = tmp_path / "v4.db"
    conn = connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    assert migrate(conn, upto=4) == [1, 2, 3, 4]
    conn.execute("INSERT INTO sessions(name, created_at) VALUES ('old', ?)", (T0,))
    # keys as a version-4 lambo wrote them: casefolded, invisibles dropped, spacing collapsed
    rows = ((A, "Lease  TTL is 45s", "lease ttl is 45s"), (B, "src/Main.rs\u200d", "src/main.rs"))
    for node, text, key in rows:
        conn.execute(
            "INSERT INTO concepts(id, session, content, canonical_key, concept_type, status, "
            "created_at, about_time, agent_id) "
            "VALUES (?, 'old', ?, ?, 'logic', 'none', ?, ?, 'agent-a')",
            (node, text, key, T0, T0),
        )
    conn.close()
    store = SqliteStore(path)
    try:
        assert store.migrations_applied == list(range(5, LATEST_VERSION + 1))
        keys = {c.id: c.canonical_key for c in store.concepts("old")}
        assert keys == {A: "Lease TTL is 45s", B: "src/Main.rs"}
        # the content and its keyword index are untouched
        contents = {c.id: c.content for c in store.concepts("old")}
        assert contents == {A: "Lease  TTL is 45s", B: "src/Main.rs\u200d"}
        assert [n for n, _ in store.keyword_index("old").search("lease", 5)] == [A]
    finally:
        store.close()


def test_version_9_adds_vector_source_as_null_and_keeps_every_row(tmp_path: Path) -> None:
    path = tmp_path / "v8.db"
    conn = connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    assert migrate(conn, upto=8) == list(range(1, 9))
    columns = {r[1] for r in conn.execute("PRAGMA table_info(concepts)")}
    assert "vector_source" not in columns  # really the older schema
    conn.execute("INSERT INTO sessions(name, created_at) VALUES ('old', ?)", (T0,))
    vector = np.array([0.6, 0.8], dtype="<f4").tobytes()
    for node, text, blob in ((A, "an embedded fact", vector), (B, "a keyword-only fact", None)):
        conn.execute(
            "INSERT INTO concepts(id, session, content, canonical_key, concept_type, status, "
            "created_at, about_time, agent_id, vector, repo_scope) "
            "VALUES (?, 'old', ?, ?, 'entity', 'none', ?, ?, 'agent-a', ?, 'acme/app')",
            (node, text, text, T0, T0, blob),
        )
    conn.close()
    store = SqliteStore(path)
    try:
        assert store.migrations_applied == [9]
        concepts = {c.id: c for c in store.concepts("old")}
        assert {c.content for c in concepts.values()} == {"an embedded fact", "a keyword-only fact"}
        for c in concepts.values():
            assert c.vector_source is None and not c.is_image and c.repo_scope == "acme/app"
        a = concepts[A]
        assert a.vector is not None and a.vector.tolist() == pytest.approx([0.6, 0.8])
        assert [n for n, _ in store.keyword_index("old").search("embedded", 5)] == [A]
    finally:
        store.close()
    conn = connect(path)
    nulls = conn.execute("SELECT count(*) FROM concepts WHERE vector_source IS NULL").fetchone()
    conn.close()
    assert nulls[0] == 2
