"""The pgvector leg (lambo_core/store/postgres/vectors.py) against a real PostgreSQL.

The table here has the contract's vector columns only; the store's own table has more.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
import pytest
from psycopg.adapt import Dumper
from psycopg.pq import Format
from psycopg.types import TypeInfo

from lambo_core.store.postgres import vectors

TABLE = """
CREATE TABLE concepts (
    session text NOT NULL,
    id text NOT NULL,
    status text NOT NULL DEFAULT 'none',
    vector_dim integer,
    embedding vector,
    PRIMARY KEY (session, id)
)
"""


@pytest.fixture
def conn(pg_dsn: str) -> Iterator[Any]:
    with psycopg.connect(pg_dsn, autocommit=True) as opened:
        opened.execute(TABLE)
        yield opened


def clustered(rng: np.random.Generator, n: int, dim: int) -> npt.NDArray[np.float32]:
    """Unit rows around a few centres: near neighbours are close, as real embeddings are."""
    centres = rng.standard_normal((8, dim)).astype(np.float32)
    rows = centres[rng.integers(0, 8, n)] + 0.6 * rng.standard_normal((n, dim)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows.astype(np.float32)


def insert(
    conn: Any,
    session: str,
    rows: npt.NDArray[np.float32],
    prefix: str = "n",
    status: str = "none",
) -> list[str]:
    ids = [f"{prefix}{i:05d}" for i in range(len(rows))]
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO concepts (session, id, status, vector_dim, embedding) "
            "VALUES (%s, %s, %s, %s, %s::vector)",
            [
                (session, node_id, status, rows.shape[1], vectors.vector_text(row))
                for node_id, row in zip(ids, rows, strict=True)
            ],
        )
    conn.execute("ANALYZE concepts")
    return ids


def exact(
    ids: list[str], rows: npt.NDArray[np.float32], q: npt.NDArray[np.float32], k: int
) -> list[tuple[str, float]]:
    scores = rows @ q
    order = sorted(range(len(ids)), key=lambda i: (-float(scores[i]), ids[i]))[:k]
    return [(ids[i], float(scores[i])) for i in order]


def plan(conn: Any, dim: int, q: npt.NDArray[np.float32], **params: Any) -> str:
    """EXPLAIN of the very statement ``top_k`` sends."""
    statement = vectors.search_sql(
        dim, exclude_ids="excluded" in params, exclude_statuses="statuses" in params
    )
    lines = conn.execute(
        psycopg.sql.SQL("EXPLAIN ") + statement,
        {"q": vectors.vector_text(q), "session": "s", "limit": 20, **params},
    ).fetchall()
    return "\n".join(line for (line,) in lines)


def test_the_planner_uses_the_width_s_hnsw_index(conn: Any) -> None:
    rng = np.random.default_rng(1)
    rows = clustered(rng, 3000, 32)
    assert vectors.ensure_vector_index(conn, 32)
    insert(conn, "s", rows)
    assert "Index Scan using concepts_hnsw_32" in plan(conn, 32, rows[0])
    filtered = plan(conn, 32, rows[0], excluded=["n00001"], statuses=["superseded"])
    assert "Index Scan using concepts_hnsw_32" in filtered
    # and the search itself runs through it: it answers inside one pipelined transaction
    hits = vectors.top_k(conn, "s", 32, rows[0], 5)
    assert hits[0].node_id == "n00000"
    assert hits[0].cosine == pytest.approx(1.0, abs=1e-5)


def test_results_match_exact_cosine_on_small_data(conn: Any) -> None:
    rng = np.random.default_rng(2)
    rows = clustered(rng, 400, 16)
    vectors.ensure_vector_index(conn, 16)
    ids = insert(conn, "s", rows)
    for q in clustered(rng, 10, 16):
        got = vectors.top_k(conn, "s", 16, q, 10)
        want = exact(ids, rows, q, 10)
        assert [h.node_id for h in got] == [node_id for node_id, _ in want]
        for hit, (_, score) in zip(got, want, strict=True):
            assert hit.cosine == pytest.approx(score, abs=1e-5)


def test_a_connection_with_a_binary_vector_dumper_sends_the_array(conn: Any) -> None:
    """The store's connections dump numpy arrays as binary ``vector``: the same answers."""
    rng = np.random.default_rng(10)
    rows = clustered(rng, 200, 16)
    vectors.ensure_vector_index(conn, 16)
    ids = insert(conn, "s", rows)
    text_hits = vectors.top_k(conn, "s", 16, rows[9], 10)
    info = TypeInfo.fetch(conn, "vector")
    assert info is not None

    class BinaryVector(Dumper):
        format = Format.BINARY
        oid = info.oid

        def dump(self, obj: Any) -> bytes:
            values = np.ascontiguousarray(obj, dtype=">f4").ravel()
            return struct.pack(">HH", values.size, 0) + values.tobytes()

    conn.adapters.register_dumper(np.ndarray, BinaryVector)
    binary_hits = vectors.top_k(conn, "s", 16, rows[9], 10)
    assert binary_hits == text_hits
    assert [h.node_id for h in binary_hits] == [n for n, _ in exact(ids, rows, rows[9], 10)]


def test_an_unnormalised_query_is_scaled_not_refused(conn: Any) -> None:
    rng = np.random.default_rng(3)
    rows = clustered(rng, 50, 8)
    vectors.ensure_vector_index(conn, 8)
    ids = insert(conn, "s", rows)
    got = vectors.top_k(conn, "s", 8, 7.0 * rows[3], 3)
    assert [h.node_id for h in got] == [node_id for node_id, _ in exact(ids, rows, rows[3], 3)]


def test_the_session_filter_keeps_to_the_session(conn: Any) -> None:
    rng = np.random.default_rng(4)
    big = clustered(rng, 3000, 32)
    small = clustered(rng, 40, 32)
    vectors.ensure_vector_index(conn, 32)
    insert(conn, "big", big, prefix="b")
    small_ids = insert(conn, "small", small, prefix="s")
    for q in (big[0], small[0]):
        got = vectors.top_k(conn, "small", 32, q, 10)
        assert [h.node_id for h in got] == [n for n, _ in exact(small_ids, small, q, 10)]
        # a session smaller than k gives every row it has, no other session's
        every = vectors.top_k(conn, "small", 32, q, 100)
        assert sorted(h.node_id for h in every) == small_ids
    assert vectors.top_k(conn, "nobody", 32, big[0], 10) == []


def test_two_widths_share_the_table(conn: Any) -> None:
    rng = np.random.default_rng(5)
    narrow, wide = clustered(rng, 300, 8), clustered(rng, 300, 24)
    assert vectors.ensure_vector_index(conn, 8)
    assert vectors.ensure_vector_index(conn, 24)
    assert vectors.ensure_vector_index(conn, 24)  # twice is fine
    narrow_ids = insert(conn, "s", narrow, prefix="a")
    wide_ids = insert(conn, "s", wide, prefix="w")
    got = vectors.top_k(conn, "s", 24, wide[7], 5)
    assert [h.node_id for h in got] == [n for n, _ in exact(wide_ids, wide, wide[7], 5)]
    got = vectors.top_k(conn, "s", 8, narrow[7], 5)
    assert [h.node_id for h in got] == [n for n, _ in exact(narrow_ids, narrow, narrow[7], 5)]
    indexes = {
        name
        for (name,) in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'concepts'"
        ).fetchall()
    }
    assert {"concepts_hnsw_8", "concepts_hnsw_24"} <= indexes
    assert vectors.vector_count(conn, "s", 8) == 300
    assert vectors.vector_count(conn, "s", 24) == 300
    assert vectors.vector_count(conn, "s", 9) == 0
    assert vectors.vector_count(conn, "s", 8, at_most=1) == 1


def test_exclusions_by_id_and_status(conn: Any) -> None:
    rng = np.random.default_rng(6)
    rows = clustered(rng, 60, 8)
    vectors.ensure_vector_index(conn, 8)
    ids = insert(conn, "s", rows[:50])
    insert(conn, "s", rows[50:], prefix="x", status="superseded")
    q = rows[55]
    got = vectors.top_k(conn, "s", 8, q, 5, exclude_ids=[ids[0], ids[1]])
    assert not {ids[0], ids[1]} & {h.node_id for h in got}
    got = vectors.top_k(conn, "s", 8, q, 60, exclude_statuses=["superseded"])
    assert sorted(h.node_id for h in got) == ids


def test_vectors_come_back_exactly(conn: Any) -> None:
    rng = np.random.default_rng(7)
    rows = clustered(rng, 5, 12)
    ids = insert(conn, "s", rows)
    got = vectors.vectors_of(conn, "s", [ids[1], ids[3], "missing"])
    assert set(got) == {ids[1], ids[3]}
    assert np.array_equal(got[ids[1]], rows[1])
    assert got[ids[3]].dtype == np.float32
    assert vectors.vectors_of(conn, "s", [ids[1]], dim=13) == {}
    assert vectors.vectors_of(conn, "s", []) == {}


def test_a_width_past_hnsw_s_limit_is_searched_exactly(conn: Any) -> None:
    rng = np.random.default_rng(8)
    rows = clustered(rng, 30, 2048)
    assert not vectors.ensure_vector_index(conn, 2048)
    ids = insert(conn, "s", rows)
    got = vectors.top_k(conn, "s", 2048, rows[4], 3)
    assert [h.node_id for h in got] == [n for n, _ in exact(ids, rows, rows[4], 3)]


@pytest.mark.parametrize(
    ("dim", "query", "k", "message"),
    [
        (0, [1.0], 1, "vector dim must be an integer from 1"),
        (True, [1.0], 1, "vector dim must be an integer from 1"),
        (2, [1.0, 0.0, 0.0], 1, "query vector must have shape (2,)"),
        (2, [0.0, 0.0], 1, "query vector must be finite and non-zero"),
        (2, [float("nan"), 1.0], 1, "query vector must be finite and non-zero"),
        (2, [1, 0], 1, "query vector must be floating point"),
        (2, [1.0, 0.0], -1, "k must be a non-negative integer"),
    ],
)
def test_bad_input_is_refused_before_the_database(
    dim: Any, query: list[float], k: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        vectors.top_k(None, "s", dim, np.asarray(query), k)


def test_a_failed_search_leaves_the_connection_idle(conn: Any) -> None:
    conn.execute("DROP TABLE concepts")
    with pytest.raises(psycopg.errors.UndefinedTable):
        vectors.top_k(conn, "s", 4, np.ones(4, dtype=np.float32), 3)
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert conn.execute("SELECT 1").fetchone() == (1,)


def test_inside_a_caller_s_transaction_nothing_is_committed(conn: Any, pg_dsn: str) -> None:
    rng = np.random.default_rng(12)
    rows = clustered(rng, 20, 4)
    insert(conn, "s", rows)
    with psycopg.connect(pg_dsn) as caller:  # not autocommit: psycopg opens a transaction
        caller.execute("DELETE FROM concepts WHERE id = 'n00000'")
        hits = vectors.top_k(caller, "s", 4, rows[0], 3)
        assert "n00000" not in {h.node_id for h in hits}  # it sees its own delete
        caller.rollback()
    assert vectors.top_k(conn, "s", 4, rows[0], 1)[0].node_id == "n00000"


def test_the_session_name_is_a_parameter_not_sql(conn: Any) -> None:
    rng = np.random.default_rng(9)
    rows = clustered(rng, 5, 4)
    insert(conn, "s", rows)
    assert vectors.top_k(conn, "s' OR '1'='1", 4, rows[0], 5) == []
    assert conn.execute("SELECT count(*) FROM concepts").fetchone()[0] == 5


def test_a_small_session_among_a_big_one_s_neighbours_gets_its_exact_top_k(conn: Any) -> None:
    """The index covers every session; its iterative scan stops at hnsw.max_scan_tuples
    (20,000 by default, lowered here so a small table shows it). A small session whose
    rows all lie behind a big session's gets its exact top k, not nothing."""
    rng = np.random.default_rng(13)
    q = np.zeros(8, dtype=np.float32)
    q[0] = 1.0
    near = q + 0.3 * rng.standard_normal((3000, 8)).astype(np.float32)
    far = -q + 0.3 * rng.standard_normal((300, 8)).astype(np.float32)
    near /= np.linalg.norm(near, axis=1, keepdims=True)
    far /= np.linalg.norm(far, axis=1, keepdims=True)
    insert(conn, "big", near, prefix="b")
    small_ids = insert(conn, "small", far, prefix="s")
    tiny_ids = insert(conn, "tiny", far[:4], prefix="t")
    assert vectors.ensure_vector_index(conn, 8)
    conn.execute("SET hnsw.max_scan_tuples = 1000")
    # at this size the planner would read the small session's rows itself; in a big
    # table it takes the vector index, as it must here without the key or a cheap scan
    conn.execute("ALTER TABLE concepts DROP CONSTRAINT concepts_pkey")
    conn.execute("SET enable_seqscan = off")
    # the index alone gives the small session too little: the case being fixed
    conn.execute("SET hnsw.iterative_scan = relaxed_order")
    params = {"q": vectors.vector_text(q), "session": "small", "limit": 20}
    explained = conn.execute(psycopg.sql.SQL("EXPLAIN ") + vectors.search_sql(8), params)
    assert "Index Scan using concepts_hnsw_8" in str(explained.fetchall())
    assert len(conn.execute(vectors.search_sql(8), params).fetchall()) < 20
    got = vectors.top_k(conn, "small", 8, q, 10)
    assert [h.node_id for h in got] == [n for n, _ in exact(small_ids, far, q, 10)]
    # with exclusions too
    best = exact(small_ids, far, q, 11)
    got = vectors.top_k(conn, "small", 8, q, 10, exclude_ids=[best[0][0]])
    assert [h.node_id for h in got] == [n for n, _ in best[1:]]
    # a session with fewer vectors than k gets all of them
    assert sorted(h.node_id for h in vectors.top_k(conn, "tiny", 8, q, 10)) == tiny_ids
    # and inside a caller's transaction too
    with conn.transaction():
        got = vectors.top_k(conn, "small", 8, q, 10)
    assert [h.node_id for h in got] == [n for n, _ in exact(small_ids, far, q, 10)]
    # the big session is still served by the index, in full
    big = vectors.top_k(conn, "big", 8, q, 10)
    assert len(big) == 10


def _wait_for(conn: Any, statement: str, deadline_s: float = 60.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not conn.execute(statement).fetchone()[0]:
        assert time.monotonic() < deadline, f"never true: {statement}"
        time.sleep(0.05)


def _holding_a_write(pg_dsn: str, node_id: str) -> Any:
    """A connection with an open transaction that wrote a row of ``concepts``."""
    holder = psycopg.connect(pg_dsn)  # not autocommit: the insert's transaction stays open
    holder.execute("INSERT INTO concepts (session, id) VALUES ('other', %s)", (node_id,))
    return holder


def test_an_index_build_blocks_no_write(conn: Any, pg_dsn: str) -> None:
    """The build waits for open writes to end (CONCURRENTLY) and stops none meanwhile; a
    plain CREATE INDEX's SHARE lock would queue every later write behind it."""
    holder = _holding_a_write(pg_dsn, "open")
    result: list[Any] = []

    def build() -> None:
        with psycopg.connect(pg_dsn, autocommit=True) as builder:
            result.append(vectors.ensure_vector_index(builder, 8))

    thread = threading.Thread(target=build)
    thread.start()
    try:
        _wait_for(
            conn,
            "SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND query LIKE 'CREATE INDEX CONCURRENTLY%'",
        )
        with psycopg.connect(pg_dsn) as writer:
            writer.execute("SET lock_timeout = '30s'")  # a generous deadline, not a timing
            writer.execute("INSERT INTO concepts (session, id) VALUES ('other', 'later')")
            writer.commit()
    finally:
        holder.commit()
        holder.close()
        thread.join(timeout=120)
    assert result == [True]
    assert vectors.index_valid(conn, 8) is True


def test_a_failed_build_is_dropped_and_built_again(conn: Any, pg_dsn: str) -> None:
    holder = _holding_a_write(pg_dsn, "open")
    try:
        conn.execute("SET lock_timeout = '1s'")  # the build cannot outwait the holder
        with pytest.raises(psycopg.errors.LockNotAvailable):
            vectors.ensure_vector_index(conn, 16)
        # a failed concurrent build leaves an invalid index behind, unused by the planner
        assert vectors.index_valid(conn, 16) is False
    finally:
        holder.commit()
        holder.close()
    conn.execute("RESET lock_timeout")
    assert vectors.ensure_vector_index(conn, 16)
    assert vectors.index_valid(conn, 16) is True
    # and the advisory lock was given back both times: another connection can build
    with psycopg.connect(pg_dsn, autocommit=True) as other:
        assert vectors.ensure_vector_index(other, 24)


def test_a_build_waits_for_an_old_transaction_only_so_long(conn: Any, pg_dsn: str) -> None:
    """Another client's open transaction (not lambo's: no idle timeout ends it) holds a
    concurrent build; the write that asked for the index is not held with it for ever."""
    holder = _holding_a_write(pg_dsn, "open")
    outcome: list[BaseException | bool] = []

    def build() -> None:
        try:
            outcome.append(vectors.ensure_vector_index(conn, 12))
        except BaseException as exc:  # the refusal is what this test waits for
            outcome.append(exc)

    builder = threading.Thread(target=build, daemon=True)
    try:
        builder.start()
        builder.join(30.0)  # a deadline, not a timing: the bound is 2 s
        assert outcome, "the build still waits on the other client's transaction"
        assert isinstance(outcome[0], psycopg.errors.LockNotAvailable)
    finally:
        holder.commit()
        holder.close()
    assert conn.execute("SELECT current_setting('lock_timeout')").fetchone()[0] == "0"
    assert vectors.ensure_vector_index(conn, 12)  # the old transaction gone: built


def test_an_index_is_built_outside_any_transaction(conn: Any) -> None:
    with conn.transaction(), pytest.raises(ValueError, match="idle autocommit"):
        vectors.ensure_vector_index(conn, 8)
