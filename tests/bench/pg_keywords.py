"""PostgreSQL keyword ranking against SQLite's FTS5 bm25. Run by hand:
``python tests/bench/pg_keywords.py [--sizes 3000,30000] [--queries 240]``.

The same corpus goes into a SQLite store and a PostgreSQL store (the tests'
pgserver, tests/pg_server.py): short texts over tests/bench/store.py's Zipf
vocabulary, each with a unique ``itemN`` name. Queries of 1-3 terms mix
Zipf-drawn (common) words, uniformly drawn (mostly rare) words and item names.
For each PostgreSQL ranking it prints the mean top-10 overlap with SQLite's
bm25 top 10, top-1 agreement, and search p50 beside SQLite's:

- ``ts_rank``: the old query (``ts_rank(tsv, q, 1)``, no idf);
- ``bm25``: keywords.py as shipped (candidates bounded by MAX_CANDIDATES);
- ``bm25 unbnd``: the same statement with no bound (what the bound costs).

Asserts nothing. Queries SQLite finds nothing for are skipped.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psycopg

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from lambo_core.model import Concept, ConceptType, WriteBatch  # noqa: E402
from lambo_core.store import SqliteStore  # noqa: E402
from lambo_core.store.postgres import keywords  # noqa: E402
from lambo_core.store.postgres.store import PostgresStore  # noqa: E402
from tests import pg_server  # noqa: E402
from tests.bench.store import VOCAB, WORDS_PER_DOC, vocabulary, zipf_ranks  # noqa: E402

SESSION = "bench"
T0 = 1_700_000_000.0
BATCH = 1000
K = 10

Search = Callable[[str], list[str]]


def corpus(n: int, rng: np.random.Generator, words: list[str]) -> list[Concept]:
    ranks = zipf_ranks(rng, n * WORDS_PER_DOC).reshape(n, WORDS_PER_DOC)
    out = []
    for i in range(n):
        length = int(rng.integers(3, WORDS_PER_DOC + 1))  # lengths vary, as b matters
        text = " ".join(words[r] for r in ranks[i][:length]) + f" item{i}"
        out.append(Concept(f"c{i:06d}", SESSION, text, text, ConceptType.ENTITY, T0, T0, "bench"))
    return out


def queries(count: int, n: int, rng: np.random.Generator, words: list[str]) -> list[str]:
    out = []
    for _ in range(count):
        terms = []
        for _ in range(int(rng.integers(1, 4))):
            pick = rng.random()
            if pick < 0.5:
                terms.append(words[int(zipf_ranks(rng, 1)[0])])
            elif pick < 0.85:
                terms.append(words[int(rng.integers(VOCAB))])
            else:
                terms.append(f"item{int(rng.integers(n))}")
        out.append(" ".join(terms))
    return out


def load(store: SqliteStore | PostgresStore, concepts: list[Concept]) -> float:
    start = time.perf_counter()
    store.ensure_session(SESSION, T0)
    for at in range(0, len(concepts), BATCH):
        store.apply(WriteBatch(session=SESSION, concepts=concepts[at : at + BATCH]))
    return time.perf_counter() - start


def timed(search: Search, qs: list[str]) -> tuple[list[list[str]], float]:
    for q in qs[:5]:  # warm caches and plans
        search(q)
    results, times = [], []
    for q in qs:
        start = time.perf_counter()
        results.append(search(q))
        times.append(1000 * (time.perf_counter() - start))
    return results, statistics.median(times)


def run(n: int, n_queries: int) -> None:
    rng = np.random.default_rng(20251202 + n)
    words = vocabulary(np.random.default_rng(20240601))
    concepts = corpus(n, rng, words)
    dsn = pg_server.new_database("bench")
    with tempfile.TemporaryDirectory() as tmp:
        lite = SqliteStore(Path(tmp) / "lambo.db")
        pg = PostgresStore(dsn)
        try:
            lite_s, pg_s = load(lite, concepts), load(pg, concepts)
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("ANALYZE concepts")
            lite_index, pg_index = lite.keyword_index(SESSION), pg.keyword_index(SESSION)
            found = [q for q in queries(n_queries, n, rng, words) if lite_index.search(q, K)]

            def ts_rank(q: str) -> list[str]:
                params = {"q": keywords.tsquery_text(q), "s": SESSION, "n": K}
                return [str(r[0]) for r in pg._db.read(keywords.TS_RANK_SQL, params)]

            def bm25(q: str) -> list[str]:
                return [node for node, _ in pg_index.search(q, K)]

            def unbounded(q: str) -> list[str]:
                bound = keywords.MAX_CANDIDATES
                keywords.MAX_CANDIDATES = n + 1
                try:
                    return bm25(q)
                finally:
                    keywords.MAX_CANDIDATES = bound

            want, lite_ms = timed(lambda q: [node for node, _ in lite_index.search(q, K)], found)
            print(
                f"\n{n} concepts, {len(found)} queries of 1-3 terms (load: SQLite {lite_s:.1f} s,"
                f" PostgreSQL {pg_s:.1f} s; bound {keywords.MAX_CANDIDATES} candidates)"
            )
            print(f"  {'ranking':<22} {'top-10 overlap':>14} {'top-1 agree':>11} {'p50 ms':>7}")
            print(f"  {'SQLite FTS5 bm25':<22} {1.0:>14.3f} {1.0:>11.3f} {lite_ms:>7.2f}")
            for name, search in (
                ("PostgreSQL ts_rank", ts_rank),
                ("PostgreSQL bm25", bm25),
                ("PostgreSQL bm25 unbnd", unbounded),
            ):
                got, ms = timed(search, found)
                overlap = statistics.mean(
                    len(set(g) & set(w)) / len(w) for g, w in zip(got, want, strict=True)
                )
                top1 = statistics.mean(
                    float(g[:1] == w[:1]) for g, w in zip(got, want, strict=True)
                )
                print(f"  {name:<22} {overlap:>14.3f} {top1:>11.3f} {ms:>7.2f}")
        finally:
            lite.close()
            pg.close()
            pg_server.drop_database(dsn)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="3000,30000", help="corpus sizes, comma-separated")
    parser.add_argument("--queries", type=int, default=240, help="queries per size")
    args = parser.parse_args()
    for n in (int(s) for s in args.sizes.split(",")):
        run(n, args.queries)


if __name__ == "__main__":
    main()
