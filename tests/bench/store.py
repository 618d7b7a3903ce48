"""Store and read-side index benchmark. Run by hand: ``python tests/bench/store.py``.

Builds (once, cached under /tmp) a SQLite store holding one session of 100k
concepts with random unit 1024-d vectors, short texts over a Zipf vocabulary,
a DERIVES edge per concept and ~50k Dependency edges. Then, in a fresh
subprocess so nothing is warm in this process, it measures:

- ``SessionIndex.open`` time and RSS (peak and current) for the 100k session;
- vector top-10 p50 at 10k and 100k rows beside the memory-bandwidth floor
  (a plain ``M[:n] @ q`` on the same matrix, same run), and their ratio;
- FTS5 bm25 top-20 p50 for 1-term and 3-term queries.

It prints medians and ratios and asserts nothing. Targets: open 100k <= 3 s;
top-10 at 100k <= 1.3x the floor.

Options: ``--rebuild`` drops the cache; ``--concepts N`` / ``--dim D`` change
the size (the cache file is keyed on both).

``--store postgres`` instead runs tests/bench/store_pg.py: recall p50/p95, applied
writes/s, open time and RSS on PostgreSQL at 10k, 100k and 1M concepts (``--sizes``)
beside SQLite's at 10k and 100k, and the HNSW index's recall@10 at 100k; see its docstring.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from lambo_core.index.session_index import SessionIndex  # noqa: E402
from lambo_core.index.vectors import VectorMatrix  # noqa: E402
from lambo_core.model import (  # noqa: E402
    Concept,
    ConceptType,
    Edge,
    EdgeType,
    Interaction,
    InteractionKind,
    WriteBatch,
)
from lambo_core.store import SqliteStore  # noqa: E402

SESSION = "bench"
BATCH = 1000
VOCAB = 20_000
WORDS_PER_DOC = 8
CACHE_DIR = Path("/tmp/lambo-bench")


# -- the synthetic corpus ------------------------------------------------------------
def vocabulary(rng: np.random.Generator) -> list[str]:
    """Distinct pronounceable words, ranked by frequency (index 0 is the most common)."""
    cons, vows = "bcdfghjklmnprstvz", "aeiou"
    words: dict[str, None] = {}
    while len(words) < VOCAB:
        syllables = rng.integers(2, 5)
        word = "".join(
            cons[rng.integers(len(cons))] + vows[rng.integers(len(vows))] for _ in range(syllables)
        )
        words.setdefault(word, None)
    return list(words)


def zipf_ranks(rng: np.random.Generator, count: int) -> np.ndarray:
    """Word ranks drawn from a Zipf(1.1) law truncated to the vocabulary."""
    weights = 1.0 / np.arange(1, VOCAB + 1) ** 1.1
    return rng.choice(VOCAB, size=count, p=weights / weights.sum())


def uuid_from(rng: np.random.Generator) -> str:
    h = rng.bytes(16).hex()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"


def build(path: Path, n: int, dim: int) -> None:
    rng = np.random.default_rng(20240601)
    words = vocabulary(rng)
    tmp = path.with_suffix(".building")
    for leftover in tmp.parent.glob(tmp.name + "*"):
        leftover.unlink()
    store = SqliteStore(tmp)
    t0 = time.perf_counter()
    store.ensure_session(SESSION, 1_700_000_000.0)
    store.stamp_contract(SESSION, {"kind": "random", "model": "bench", "dim": dim})
    ids: list[str] = []
    for start in range(0, n, BATCH):
        count = min(BATCH, n - start)
        now = 1_700_000_000.0 + start
        inter = Interaction(
            uuid_from(rng), SESSION, "bench", InteractionKind.DERIVE, now, now, f"batch {start}"
        )
        vecs = rng.standard_normal((count, dim), dtype=np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        ranks = zipf_ranks(rng, count * WORDS_PER_DOC).reshape(count, WORDS_PER_DOC)
        concepts: list[Concept] = []
        edges: list[Edge] = []
        for i in range(count):
            text = " ".join(words[r] for r in ranks[i]) + f" item{start + i}"
            node = uuid_from(rng)
            concepts.append(
                Concept(
                    id=node,
                    session=SESSION,
                    content=text,
                    canonical_key=text,
                    concept_type=ConceptType.ENTITY,
                    created_at=now,
                    about_time=now,
                    agent_id="bench",
                    interaction_id=inter.id,
                    vector=vecs[i],
                )
            )
            edges.append(
                Edge(SESSION, inter.id, node, EdgeType.DERIVES, 1.0, inter.id, "bench", now, now)
            )
            if ids and rng.random() < 0.5:  # depends on an earlier concept: acyclic
                dst = ids[int(rng.integers(len(ids)))]
                edges.append(
                    Edge(SESSION, node, dst, EdgeType.DEPENDENCY, 1.0, inter.id, "bench", now, now)
                )
            ids.append(node)
        store.apply(WriteBatch(SESSION, interaction=inter, concepts=concepts, edges=edges))
        if (start // BATCH) % 10 == 0:
            print(f"  built {start + count:>7} / {n}  ({time.perf_counter() - t0:.1f} s)")
    store.close()
    for suffix in ("-wal", "-shm"):
        leftover = Path(str(tmp) + suffix)
        if leftover.exists():
            leftover.unlink()
    tmp.rename(path)  # only a finished build is ever reused
    print(f"  built {n} concepts in {time.perf_counter() - t0:.1f} s -> {path}")


# -- measurement (runs in a fresh subprocess) ---------------------------------------
def rss_now_kb() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def p50(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3  # ms


def measure(path: Path, reps: int) -> dict[str, Any]:
    out: dict[str, Any] = {"rss_before_kb": rss_now_kb()}
    store = SqliteStore(path)
    t0 = time.perf_counter()
    index = SessionIndex.open(store, SESSION)
    out["open_s"] = time.perf_counter() - t0
    out["rss_after_open_kb"] = rss_now_kb()
    out["maxrss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out["concepts"] = len(index.graph)
    out["edges"] = index.graph.edge_count
    # the store's own share of the open: decoding rows into Concept / Edge objects
    t0 = time.perf_counter()
    for _ in store.concepts(SESSION):
        pass
    out["scan_concepts_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in store.edges(SESSION):
        pass
    out["scan_edges_s"] = time.perf_counter() - t0
    assert index.vectors is not None
    vectors = index.vectors.in_ram()  # the SQLite store's own matrix (no copy)
    n_all = len(vectors)
    dim = vectors.dim
    rng = np.random.default_rng(7)

    rows: dict[str, Any] = {}
    for n in (10_000, n_all):
        if n > n_all:
            continue
        if n == n_all:
            vm = vectors
        else:  # its own matrix, so the floor and top_k read the same n rows
            buf = np.array(vectors.rows()[:n], dtype=np.float32, order="C")
            vm = VectorMatrix.from_rows(dim, vectors.ids()[:n], buf)
        mat = vm.rows()  # the floor reads exactly the buffer top_k reads
        floor: list[float] = []
        topk: list[float] = []
        for _ in range(3):  # warm caches and BLAS threads
            q = rng.standard_normal(dim).astype(np.float32)
            vm.top_k(q / np.linalg.norm(q), 10)
        for _ in range(reps):
            q = rng.standard_normal(dim).astype(np.float32)
            q /= np.linalg.norm(q)
            # interleaved, so drift on a shared machine hits both alike
            t = time.perf_counter()
            mat @ q
            floor.append(time.perf_counter() - t)
            t = time.perf_counter()
            vm.top_k(q, 10)
            topk.append(time.perf_counter() - t)
        rows[str(n)] = {"floor_ms": p50(floor), "topk_ms": p50(topk)}
    out["vectors"] = rows

    words = vocabulary(np.random.default_rng(20240601))
    fts: dict[str, float] = {}
    pick = np.random.default_rng(11)
    for label, nterms, lo, hi in (
        ("1 term", 1, 50, 5000),
        ("3 terms", 3, 50, 5000),
        ("1 common term (rank 0)", 1, 0, 1),
    ):
        samples: list[float] = []
        for _ in range(reps):
            query = " ".join(words[int(r)] for r in pick.integers(lo, hi, size=nterms))
            t = time.perf_counter()
            index.keywords.search(query, 20)
            samples.append(time.perf_counter() - t)
        fts[label] = p50(samples)
    out["fts"] = fts
    out["blas_threads"] = os.environ.get("OPENBLAS_NUM_THREADS", "default")
    store.close()
    return out


def report(res: dict[str, Any], n: int, dim: int) -> None:
    mb = 1024.0
    print()
    print(f"lambo store bench: {res['concepts']} concepts x {dim}-d, {res['edges']} edges,")
    threads = res["blas_threads"]
    print(f"  cpus {os.cpu_count()}, OPENBLAS_NUM_THREADS={threads}, numpy {np.__version__}")
    print()
    print(f"{'measure':<44}{'value':>12}  {'target':>12}")
    print("-" * 70)
    print(f"{'SessionIndex.open (s)':<44}{res['open_s']:>12.2f}  {'<= 3 s':>12}")
    print(f"{'  store.concepts() scan alone (s)':<44}{res['scan_concepts_s']:>12.2f}")
    print(f"{'  store.edges() scan alone (s)':<44}{res['scan_edges_s']:>12.2f}")
    print(f"{'RSS before open (MB)':<44}{res['rss_before_kb'] / mb:>12.0f}")
    print(f"{'RSS after open (MB)':<44}{res['rss_after_open_kb'] / mb:>12.0f}")
    print(f"{'peak RSS, ru_maxrss (MB)':<44}{res['maxrss_kb'] / mb:>12.0f}")
    raw_mb = res["concepts"] * dim * 4 / 1e6
    print(f"{'  (raw float32 vectors, MB)':<44}{raw_mb:>12.0f}")
    print()
    print(
        f"{'vector top-10 p50':<18}{'floor M@q ms':>14}{'top_k ms':>12}{'ratio':>10}  {'target':>8}"
    )
    print("-" * 70)
    for rows, v in res["vectors"].items():
        ratio = v["topk_ms"] / v["floor_ms"]
        target = "<= 1.3x" if int(rows) >= 100_000 else ""
        cells = f"{v['floor_ms']:>14.2f}{v['topk_ms']:>12.2f}{ratio:>9.2f}x"
        print(f"{int(rows):>10} rows  {cells}  {target:>8}")
    print()
    print(f"{'FTS5 bm25 top-20 p50':<44}{'ms':>12}")
    print("-" * 70)
    for label, ms in res["fts"].items():
        print(f"{'  ' + label:<44}{ms:>12.3f}")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concepts", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--reps", type=int, default=101)
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # the child's entry
    parser.add_argument(
        "--store",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="postgres: PostgreSQL beside SQLite (tests/bench/store_pg.py); default sqlite",
    )
    parser.add_argument(
        "--sizes", default=None, help="--store postgres: sizes (default 10000,100000,1000000)"
    )
    parser.add_argument(
        "--sqlite-max", type=int, default=100_000, help="--store postgres: largest SQLite size"
    )
    parser.add_argument(
        "--bulk-above",
        type=int,
        default=100_000,
        help="--store postgres: sizes above this are bulk-loaded with COPY, index built after",
    )
    parser.add_argument(
        "--recall-at",
        type=lambda text: [int(n) for n in text.split(",") if n.strip()],
        default=[100_000],
        help="--store postgres: sizes whose HNSW recall@10 is measured (default 100000)",
    )
    parser.add_argument(
        "--build-only",
        action="store_true",
        help="--store postgres: build the caches, measure nothing",
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)  # store_pg's child
    args = parser.parse_args()

    if args.store == "postgres" or args.child is not None:
        # run as a script, this directory is first on sys.path, where http.py would shadow
        # the standard library's http for recall.py's imports
        here = Path(__file__).resolve().parent
        sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != here]
        from tests.bench import store_pg

        store_pg.main(args)
        return

    if args.measure is not None:
        print(json.dumps(measure(args.measure, args.reps)))
        return

    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    path = CACHE_DIR / f"store-{args.concepts}-{args.dim}.db"
    if args.rebuild and path.exists():
        path.unlink()
    if path.exists():
        print(f"reusing {path} ({path.stat().st_size / 1e6:.0f} MB)")
    else:
        print(f"building {path} ...")
        build(path, args.concepts, args.dim)

    child = subprocess.run(
        [sys.executable, __file__, "--measure", str(path), "--reps", str(args.reps)],
        check=True,
        capture_output=True,
        text=True,
    )
    report(json.loads(child.stdout.strip().splitlines()[-1]), args.concepts, args.dim)


if __name__ == "__main__":
    main()
