"""The PostgreSQL keyword leg ranks by BM25 as SQLite's FTS5 does (keywords.py).

A real PostgreSQL (tests/pg_server.py) beside a real SQLite file, the same
documents into both.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from lambo_core.model import Concept, ConceptType, Status, WriteBatch
from lambo_core.store import SqliteStore
from lambo_core.store.postgres import keywords, schema
from lambo_core.store.postgres.store import PostgresStore

S = "sess"
T0 = 1_700_000_000.0

# ids fixed so ties break the same way in both stores
CORPUS = [
    "lease heartbeat",
    "lease renewal",
    "lease renewal is what a serve does every few seconds to keep it",
    "the lease the lease the lease",
    "Zorblax lease",
    "store copy moves sessions between sqlite and postgres",
    "postgres store keeps the lease in a table",
    "heartbeat heartbeat lease table",
    "vector search with pgvector and a lease",
    "graph edges in tables",
    "a serve refuses a session held on another host",
    "the fencing token grows on each takeover of the lease",
]


def concept(n: int, content: str) -> Concept:
    return Concept(f"c{n:03d}", S, content, content, ConceptType.ENTITY, T0, T0, "agent-a")


@pytest.fixture
def pg(pg_dsn: str) -> Iterator[PostgresStore]:
    opened = PostgresStore(pg_dsn)
    opened.ensure_session(S, T0)
    yield opened
    opened.close()


def fill(store: PostgresStore | SqliteStore, texts: list[str]) -> list[Concept]:
    concepts = [concept(n, text) for n, text in enumerate(texts)]
    store.apply(WriteBatch(session=S, concepts=concepts))
    return concepts


def stats(dsn: str) -> tuple[int, int]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT kw_docs, kw_length FROM sessions WHERE name = %s", (S,))
        got = row.fetchone()
    assert got is not None
    return int(got[0]), int(got[1])


def test_a_rare_exact_name_beats_a_common_word(pg: PostgresStore) -> None:
    common = [f"lease note {n}" for n in range(30)]
    rare = concept(99, "Zorblax configuration of the lease manager in the hub")
    fill(pg, common)
    pg.apply(WriteBatch(session=S, concepts=[rare]))
    hits = pg.keyword_index(S).search("zorblax lease", 5)
    assert hits[0][0] == rare.id  # ts_rank put a short "lease note" first


@pytest.mark.parametrize(
    "query",
    ["lease", "lease heartbeat", "zorblax", "postgres lease table", "serve session host",
     "the lease", "graph", "heartbeat renewal token"],
)  # fmt: skip
def test_the_order_is_sqlite_bm25_order(pg: PostgresStore, tmp_path: Path, query: str) -> None:
    lite = SqliteStore(tmp_path / "lambo.db")
    try:
        lite.ensure_session(S, T0)
        fill(lite, CORPUS)
        fill(pg, CORPUS)
        want = lite.keyword_index(S).search(query, 20)
        got = pg.keyword_index(S).search(query, 20)
    finally:
        lite.close()
    assert [n for n, _ in got] == [n for n, _ in want]
    for (_, mine), (_, theirs) in zip(got, want, strict=True):
        assert mine == pytest.approx(theirs, rel=1e-9)  # FTS5 reports -bm25: the same score


def test_deletes_and_updates_keep_the_statistics(pg: PostgresStore, pg_dsn: str) -> None:
    concepts = fill(pg, CORPUS)
    tokens = sum(len(c.content.split()) for c in concepts)
    assert stats(pg_dsn) == (len(CORPUS), tokens)
    pg.set_status(S, concepts[0].id, Status.CANONICAL)
    pg.add_access_counts(S, {concepts[1].id: 3})
    assert stats(pg_dsn) == (len(CORPUS), tokens)
    pg.delete_concepts(S, [concepts[0].id, concepts[4].id, "no-such-id"])
    gone = len(concepts[0].content.split()) + len(concepts[4].content.split())
    assert stats(pg_dsn) == (len(CORPUS) - 2, tokens - gone)
    assert pg.keyword_index(S).search("zorblax", 5) == []
    pg.delete_concepts(S, [c.id for c in concepts])
    assert stats(pg_dsn) == (0, 0)


def test_unknown_words_find_nothing(pg: PostgresStore) -> None:
    fill(pg, CORPUS)
    assert pg.keyword_index(S).search("quuxly frobnicate", 10) == []
    assert pg.keyword_index(S).search("!!! ...", 10) == []
    assert pg.keyword_index(S).search("lease", 0) == []
    assert [n for n, _ in pg.keyword_index(S).search("frobnicate graph", 10)] == ["c009"]


def test_migration_2_counts_a_version_1_database(pg_dsn: str) -> None:
    """Concepts written before the statistics existed are counted by the migration."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert schema.migrate_to(conn, "postgres", 1) == [1]
        conn.execute("INSERT INTO sessions(name, created_at) VALUES (%s, %s)", (S, T0))
        for n, text in enumerate(CORPUS):
            conn.execute(
                "INSERT INTO concepts(session, id, content, canonical_key, concept_type, "
                "created_at, about_time, agent_id, tsv) "
                "VALUES (%s, %s, %s, %s, 'entity', %s, %s, 'a', to_tsvector('simple', %s))",
                (S, f"c{n:03d}", text, text, T0, T0, text.lower()),
            )
    opened = PostgresStore(pg_dsn)
    try:
        assert opened.migrations_applied == [2, 3, 4, 5]
        assert stats(pg_dsn) == (len(CORPUS), sum(len(t.split()) for t in CORPUS))
        assert opened.keyword_index(S).search("zorblax lease", 1)[0][0] == "c004"
    finally:
        opened.close()


def test_the_bound_keeps_the_best_matches(
    pg: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only MAX_CANDIDATES matches are scored exactly: those with the highest bound."""
    monkeypatch.setattr(keywords, "MAX_CANDIDATES", 3)
    fill(pg, [f"lease note {n}" for n in range(30)] + ["lease lease lease", "Zorblax lease"])
    hits = pg.keyword_index(S).search("zorblax lease", 3)
    assert [n for n, _ in hits][:2] == ["c031", "c030"]
