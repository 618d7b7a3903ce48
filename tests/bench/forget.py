"""``python tests/bench/forget.py``: what one `lambo forget` costs on a SQLite store, and what a
backup of it costs, by session size.

For each size (``--sizes``, default 10k and 100k concepts of ~120 bytes, no vectors: the
keyword index is what grows the forget's cost) it builds a store file under a temp dir, then
times ``SqliteStore.forget`` of one concept (secure_delete, the FTS5 optimize, the WAL
checkpoint) against a plain ``delete_concepts`` of another, and ``backup_sqlite`` of the whole
file. Prints one table and asserts nothing.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from lambo_core.forget import ForgetRequest
from lambo_core.model import Concept, ConceptType, WriteBatch, new_id
from lambo_core.store import SqliteStore
from lambo_core.store.backup import backup_sqlite

S = "bench"


def build(path: Path, n: int) -> list[Concept]:
    store = SqliteStore(path)
    store.ensure_session(S, 1.0)
    made: list[Concept] = []
    for start in range(0, n, 5000):
        batch = [
            Concept(new_id(), S, text, text, ConceptType.ENTITY, 1.0, 1.0, "bench")
            for text in (
                f"fact {i}: service {i % 97} reads table t{i % 311} through queue q{i % 53}"
                for i in range(start, min(n, start + 5000))
            )
        ]
        store.apply(WriteBatch(session=S, concepts=batch))
        made.extend(batch[:2])
    store.close()
    return made


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000")
    sizes = [int(s) for s in parser.parse_args().sizes.split(",")]
    print(f"{'concepts':>9} {'file MiB':>9} {'forget ms':>10} {'delete ms':>10} {'backup s':>9}")
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "lambo.db"
            victims = build(path, n)
            store = SqliteStore(path)
            started = time.perf_counter()
            store.delete_concepts(S, [victims[1].id])
            delete_ms = (time.perf_counter() - started) * 1000
            target = victims[0]
            request = ForgetRequest(S, "bench", 2.0, (target.id,), (target.content,), False, None)
            started = time.perf_counter()
            store.forget(request)
            forget_ms = (time.perf_counter() - started) * 1000
            store.close()
            size_mib = path.stat().st_size / 2**20
            started = time.perf_counter()
            backup_sqlite(path, Path(tmp) / "copy.db")
            backup_s = time.perf_counter() - started
            print(f"{n:>9} {size_mib:>9.1f} {forget_ms:>10.1f} {delete_ms:>10.1f} {backup_s:>9.2f}")


if __name__ == "__main__":
    main()
