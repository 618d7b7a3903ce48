"""`lambo store copy` timing. Run by hand: ``python tests/bench/store_copy.py [--postgres]``.

Builds a SQLite store (cached under /tmp, keyed on the size) with one session of N
concepts with random unit 1024-d vectors, a DERIVES edge and a Dependency edge per
concept, an interaction and an applied intent per 5 concepts and a canonization event per
100; then times ``lambo store copy`` (a subprocess, as a user runs it) into a fresh SQLite
file, or into ``--to DSN`` (which must name an empty database); ``--postgres`` copies into
a fresh database on the tests' own server (tests/pg_server.py) and back into SQLite.
Prints the command's lines and its wall time; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from lambo_core.model import (  # noqa: E402
    CanonizationEvent,
    Concept,
    ConceptType,
    Edge,
    EdgeType,
    Interaction,
    InteractionKind,
    Status,
    WriteBatch,
    WriteIntent,
)
from lambo_core.store import SqliteStore  # noqa: E402

SESSION = "bench"
PER_CALL = 5
T0 = 1_700_000_000.0


def build(path: Path, n: int, dim: int) -> None:
    rng = np.random.default_rng(7)
    store = SqliteStore(path)
    try:
        store.ensure_session(SESSION, T0)
        store.stamp_contract(SESSION, {"kind": "bench", "model": "random", "dim": dim})
        previous: str | None = None
        for call in range(0, n, PER_CALL):
            i = Interaction(f"i{call}", SESSION, "bench", InteractionKind.DERIVE, T0 + call,
                            T0 + call, f"call {call}")  # fmt: skip
            receipt = f"r{call}"
            store.add_intent(WriteIntent(receipt, SESSION, "bench", "lambo_derive",
                                         {"call": call}, T0 + call))  # fmt: skip
            vectors = rng.standard_normal((PER_CALL, dim)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            concepts, edges = [], []
            for k in range(min(PER_CALL, n - call)):
                node = f"c{call + k:07d}"
                text = f"concept {call + k}"
                concepts.append(Concept(node, SESSION, text + " text", text, ConceptType.ENTITY,
                                        T0 + call, T0 + call, "bench", i.id,
                                        vector=vectors[k]))  # fmt: skip
                edges.append(Edge(SESSION, i.id, node, EdgeType.DERIVES, 1.0, i.id, "bench",
                                  T0 + call, T0 + call))  # fmt: skip
                if previous is not None:
                    edges.append(Edge(SESSION, node, previous, EdgeType.DEPENDENCY, 1.0, i.id,
                                      "bench", T0 + call, T0 + call))  # fmt: skip
                previous = node
            store.apply(WriteBatch(SESSION, i, concepts, edges, receipt, {"created": call}))
            if call % 100 == 0:
                event = CanonizationEvent(SESSION, concepts[0].id, Status.NONE, Status.CANDIDATE,
                                          1, T0 + call)  # fmt: skip
                store.add_canon_event(event)
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--concepts", type=int, default=10_000)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--to", help="a DSN to copy into (default: a fresh SQLite file)")
    parser.add_argument("--postgres", action="store_true", help="to the test server and back")
    args = parser.parse_args()
    source = Path(tempfile.gettempdir()) / f"lambo-bench-copy-{args.concepts}-{args.dim}.db"
    if not source.exists():
        started = time.perf_counter()
        build(source, args.concepts, args.dim)
        print(f"built {source} in {time.perf_counter() - started:.1f} s")
    if args.postgres:
        from tests import pg_server

        dsn = pg_server.new_database("bench")
        try:
            with tempfile.TemporaryDirectory() as tmp:
                copy(str(source), dsn, args)
                copy(dsn, str(Path(tmp) / "back.db"), args)
        finally:
            pg_server.drop_database(dsn)
        return
    with tempfile.TemporaryDirectory() as tmp:
        copy(str(source), args.to or str(Path(tmp) / "to.db"), args)


def copy(source: str, target: str, args: argparse.Namespace) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "lambo_core", "store", "copy", "--from", source,
               "--to", target]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    print(done.stdout, end="")
    if done.returncode != 0:
        print(done.stderr, end="", file=sys.stderr)
        sys.exit(done.returncode)
    print(f"wall {seconds:.2f} s for {args.concepts} concepts of {args.dim}-d")


if __name__ == "__main__":
    main()
