"""p50 of the store's two hottest calls, SQLite beside PostgreSQL. Run by hand:
``python tests/bench/store_ops.py [--concepts N] [--rounds R]``.

- ``apply`` of a one-concept batch (with a 384-d vector, an interaction and a Derives
  edge: what one derive of one concept writes), fenced as a serve's writes are;
- ``keyword_index(session).search`` of a 2-term query, top 20.

Both stores start from the same N concepts of Zipf-ish words. PostgreSQL is a local
pgserver over a Unix socket (tests/pg_server.py), so its numbers are round trips to a
server on the same machine, not over a network. Prints medians; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lambo_core.model import (  # noqa: E402
    Concept,
    ConceptType,
    Edge,
    EdgeType,
    Interaction,
    InteractionKind,
    Lease,
    WriteBatch,
    new_id,
)
from lambo_core.store import open_store  # noqa: E402
from lambo_core.store.base import Fence, Store  # noqa: E402
from tests import pg_server  # noqa: E402

S = "bench"
DIM = 384
WORDS = [f"w{n}" for n in range(2000)]


def batch(rng: np.random.Generator, n_words: int = 8) -> WriteBatch:
    picks = np.minimum(rng.zipf(1.3, n_words), len(WORDS)) - 1
    text = " ".join(WORDS[i] for i in picks)
    vector = rng.standard_normal(DIM).astype(np.float32)
    vector /= np.linalg.norm(vector)
    now = time.time()
    call = Interaction(new_id(), S, "bench", InteractionKind.DERIVE, now, now, text)
    c = Concept(new_id(), S, text, text, ConceptType.LOGIC, now, now, "bench", call.id,
                vector=vector)  # fmt: skip
    derives = Edge(S, call.id, c.id, EdgeType.DERIVES, 1.0, call.id, "bench", now, now)
    return WriteBatch(session=S, interaction=call, concepts=[c], edges=[derives])


def measure(store: Store, concepts: int, rounds: int) -> tuple[float, float]:
    rng = np.random.default_rng(1)
    now = time.time()
    held = store.acquire_lease(Lease(S, "bench@host#1", 1, "bench", now, now, now + 3600, 0), now)
    assert held is not None
    store.fence(S, Fence(held.token, time.time))
    store.ensure_session(S, now)
    for _ in range(concepts):
        store.apply(batch(rng))
    applies = []
    for _ in range(rounds):
        b = batch(rng)
        start = time.perf_counter()
        store.apply(b)
        applies.append(time.perf_counter() - start)
    index = store.keyword_index(S)
    searches = []
    for n in range(rounds):
        query = f"{WORDS[n % 50]} {WORDS[(n * 7) % 300]}"
        start = time.perf_counter()
        index.search(query, 20)
        searches.append(time.perf_counter() - start)
    return statistics.median(applies) * 1000, statistics.median(searches) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--concepts", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = open_store("sqlite", Path(tmp) / "bench.db")
        results = {"sqlite": measure(sqlite, args.concepts, args.rounds)}
        sqlite.close()
    dsn = pg_server.new_database("bench")
    try:
        postgres = open_store("postgres", None, dsn)
        results["postgres"] = measure(postgres, args.concepts, args.rounds)
        postgres.close()
    finally:
        pg_server.drop_database(dsn)
    print(f"{args.concepts} concepts, {args.rounds} rounds, p50 in ms")
    for kind, (apply_ms, search_ms) in results.items():
        print(f"{kind:9} apply(1 concept) {apply_ms:7.3f}   keyword search {search_ms:7.3f}")


if __name__ == "__main__":
    main()
