"""``python tests/bench/store.py --store postgres``: PostgreSQL beside SQLite, one run.

For each size (``--sizes``, default 10k, 100k and 1M concepts of ``--dim`` 1024; SQLite
only up to 100k) it builds once, cached under /tmp/lambo-bench keyed on size and width
(SQLite files; PostgreSQL databases on a server whose data directory is kept there, started
for the run and stopped at its end), the session of tests/bench/store_data.py (recall.py's
shape, vectors from a Gaussian mixture). Then, in a fresh subprocess per store and size:

- ``Session.open`` as a serve opens it (``SessionIndex.open`` inside) and the process's RSS
  after it (the hub's; PostgreSQL's own memory is the server's, not in it);
- whole ``recall`` calls with the default arguments, excluding the query embedding, each
  with a query no earlier call used (recall.py's ``timed_recall``): p50 and p95;
- applied writes/s of one writer, fenced by a held lease as a hub's are (``LeaseKeeper``):
  ``store.apply`` of 1-concept batches (an interaction, a vector, a Derives edge) and of
  16-concept batches, into a second session of the same store (deleted after);
- on PostgreSQL at 100k (``--recall-at``): the HNSW index's recall@10 against exact
  numpy search over the session's vectors, for queries from the same mixture.

Prints one table and asserts nothing.
"""

from __future__ import annotations

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

from lambo_core.hub.lease import LeaseKeeper
from lambo_core.model import (
    Concept,
    ConceptType,
    Edge,
    EdgeType,
    Interaction,
    InteractionKind,
    WriteBatch,
)
from lambo_core.store.base import Store
from tests.bench.recall import (
    SESSION,
    SwitchEmbedder,
    open_as_serve,
    percentile,
    serve_history,
    timed_recall,
    vocabulary,
    warm_summaries,
)
from tests.bench.store_data import BATCH, apply_build, centres, contract, copy_build, mixture

CACHE_DIR = Path("/tmp/lambo-bench")
PG_DIR = CACHE_DIR / "pg-store-bench"
WRITES_SESSION = "bench-writes"
MAINTENANCE_MEM = "8GB"  # the 1M HNSW graph (about 4.5 GB at 1024-d) is built in memory
SERVER_SETTINGS = {"max_wal_size": "4GB"}  # fewer checkpoints during the 1M load
SHOWN_SETTINGS = ("shared_buffers", "max_wal_size", "synchronous_commit", "work_mem")
K = 10


# -- the server and the cached builds --------------------------------------------------
def dsn_of(server: Any, database: str = "postgres") -> str:
    from tests.pg_server import _admin_dsn  # the tests' server module's DSN rule

    return _admin_dsn(server, database)


def start_server() -> Any:
    import warnings

    import psycopg

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pgserver asks platformdirs for a runtime dir
        import pgserver

    PG_DIR.parent.mkdir(parents=True, exist_ok=True)
    from tests.pg_server import _use_portable_pgvector

    # the data directory is kept between runs; the server stops when the last process ends
    server = pgserver.get_server(PG_DIR, cleanup_mode="stop")  # type: ignore[attr-defined]
    _use_portable_pgvector(server)  # the shipped vector.so needs AVX-512, as in the tests
    with psycopg.connect(dsn_of(server), autocommit=True) as conn:
        changed = False
        for name, value in SERVER_SETTINGS.items():
            if conn.execute(f"SHOW {name}").fetchone() != (value,):
                conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
                changed = True
        if changed:
            conn.execute("SELECT pg_reload_conf()")
    return server


def settings(dsn: str) -> dict[str, str]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        return {s: str(conn.execute(f"SHOW {s}").fetchone()[0]) for s in SHOWN_SETTINGS}  # type: ignore[index]


def pg_database(server: Any, n: int, dim: int, bulk_above: int) -> tuple[str, dict[str, Any]]:
    """The DSN of size ``n``'s database, built if its marker file is missing."""
    import psycopg

    from lambo_core.store.postgres.store import PostgresStore

    name = f"storebench_{n}_{dim}"
    marker = CACHE_DIR / f"pg-{name}.json"
    dsn = dsn_of(server, name)
    if marker.exists():
        return dsn, json.loads(marker.read_text())
    with psycopg.connect(dsn_of(server), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    store = PostgresStore(dsn)
    bulk = n > bulk_above
    print(f"building PostgreSQL {name} ({'COPY + index after' if bulk else 'store.apply'}) ...")
    try:
        if bulk:
            with psycopg.connect(dsn, autocommit=True) as conn:
                stats = {"how": "COPY", **copy_build(conn, store, n, dim, MAINTENANCE_MEM)}
        else:
            stats = {"how": "apply", **apply_build(store, n, dim)}
    finally:
        store.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        row = conn.execute("SELECT pg_size_pretty(pg_database_size(current_database()))")
        stats["db_size"] = row.fetchone()[0]  # type: ignore[index]
    stats["built_at"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    marker.write_text(json.dumps(stats))
    return dsn, stats


def sqlite_file(n: int, dim: int) -> tuple[Path, dict[str, Any]]:
    from lambo_core.store import SqliteStore

    path = CACHE_DIR / f"storebench-{n}-{dim}.db"
    marker = path.with_suffix(".json")
    if path.exists() and marker.exists():
        return path, json.loads(marker.read_text())
    tmp = path.with_suffix(".building")
    for leftover in tmp.parent.glob(tmp.name + "*"):
        leftover.unlink()
    print(f"building SQLite {path} (store.apply) ...")
    store = SqliteStore(tmp)
    stats: dict[str, Any] = {"how": "apply", **apply_build(store, n, dim)}
    store.close()
    for suffix in ("-wal", "-shm"):
        Path(str(tmp) + suffix).unlink(missing_ok=True)
    tmp.rename(path)
    stats["db_size"] = f"{path.stat().st_size / 1e6:.0f} MB"
    stats["built_at"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    marker.write_text(json.dumps(stats))
    return path, stats


# -- measurement, in a fresh subprocess -------------------------------------------------
def rss_kb() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def open_store(kind: str, where: str) -> Store:
    if kind == "postgres":
        from lambo_core.store.postgres.store import PostgresStore

        return PostgresStore(where)
    from lambo_core.store import SqliteStore

    return SqliteStore(Path(where))


def measure(kind: str, where: str, n: int, dim: int, reps: int, recall_k: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"rss_before_kb": rss_kb()}
    store = open_store(kind, where)
    embedder = SwitchEmbedder(dim, None)
    session, out["open_s"] = open_as_serve(store, embedder)
    out["rss_open_kb"] = rss_kb()
    out["maxrss_open_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out["concepts"] = len(session.index.graph)
    out["edges"] = session.index.graph.edge_count
    out["vectors_in_ram"] = type(session.index.vectors).__name__
    t = time.perf_counter()
    warm_summaries(session)
    out["summaries_s"] = time.perf_counter() - t
    history = serve_history(session)
    rng = np.random.default_rng([n, dim, 3])
    words = vocabulary(np.random.default_rng(20240611))
    centre_rows = centres(n, dim)

    def query(i: int, tag: str) -> tuple[str, Any]:
        terms = [words[int(r)] for r in rng.integers(50, 5000, size=3)]
        return " ".join(terms) + f" {tag}{i}", mixture(rng, 1, centre_rows)[0]

    for i in range(5):  # warm: pool connections, pages, the degree table
        timed_recall(session, embedder, history, *query(i, "warm"))
    took: list[float] = []
    hits: list[int] = []
    for i in range(reps):
        seconds, found = timed_recall(session, embedder, history, *query(i, "x"))
        took.append(seconds)
        hits.append(found)
        session.access_counts.drain()
    out["recall"] = (percentile(took, 0.5), percentile(took, 0.95))
    out["hits"] = statistics.mean(hits)
    out["writes"] = measure_writes(store, dim, rng, centre_rows)
    if recall_k and kind == "postgres":
        out["hnsw"] = hnsw_recall(store, dim, rng, centre_rows)
    store.close()
    return out


def _concept(node: str, inter: Interaction, vector: Any, i: int) -> Concept:
    return Concept(
        id=node,
        session=inter.session,
        content=f"written concept number {i}",
        canonical_key=f"written concept number {i}",
        concept_type=ConceptType.ENTITY,
        created_at=inter.created_at,
        about_time=inter.created_at,
        agent_id="bench",
        interaction_id=inter.id,
        vector=vector,
    )


def measure_writes(store: Store, dim: int, rng: Any, centre_rows: Any) -> dict[str, Any]:
    """Applied batches per second of one fenced writer, 1 and 16 concepts a batch."""
    keeper = LeaseKeeper(store, WRITES_SESSION, "bench", ttl=3600.0)
    lease = keeper.try_acquire()
    assert lease is not None, "the writes session's lease is held elsewhere"
    now = time.time()
    store.ensure_session(WRITES_SESSION, now)
    store.stamp_contract(WRITES_SESSION, contract(dim))
    written: list[str] = []
    out: dict[str, Any] = {}
    serial = 0
    for per_batch, count in ((1, 200), (16, 60)):
        times: list[float] = []
        for _ in range(count):
            serial += 1
            t0 = now + serial
            inter = Interaction(
                f"w-{os.getpid()}-{serial}", WRITES_SESSION, "bench", InteractionKind.DERIVE,
                t0, t0, "bench write",
            )  # fmt: skip
            vecs = mixture(rng, per_batch, centre_rows)
            concepts = [
                _concept(f"{inter.id}-{j}", inter, vecs[j], serial * 100 + j)
                for j in range(per_batch)
            ]
            edges = [
                Edge(WRITES_SESSION, inter.id, c.id, EdgeType.DERIVES, 1.0, inter.id, "bench",
                     t0, t0)
                for c in concepts
            ]  # fmt: skip
            batch = WriteBatch(WRITES_SESSION, interaction=inter, concepts=concepts, edges=edges)
            t = time.perf_counter()
            store.apply(batch)
            times.append(time.perf_counter() - t)
            written.extend(c.id for c in concepts)
        times = times[5:]  # the first few open pool connections
        out[str(per_batch)] = {
            "batches_s": len(times) / sum(times),
            "p50_ms": percentile(times, 0.5),
            "concepts_s": per_batch * len(times) / sum(times),
        }
    store.delete_concepts(WRITES_SESSION, written)
    store.release_lease(WRITES_SESSION, lease.token)
    store.fence(WRITES_SESSION, None)
    return out


def hnsw_recall(store: Store, dim: int, rng: Any, centre_rows: Any) -> dict[str, Any]:
    """recall@10 of the store's vector search against exact numpy over the same rows."""
    ids: list[str] = []
    rows: list[Any] = []
    for concept in store.concepts(SESSION, vectors=True):
        if concept.vector is not None:
            ids.append(concept.id)
            rows.append(concept.vector)
    matrix = np.stack(rows).astype(np.float32)
    del rows
    queries = mixture(rng, 200, centre_rows)
    found = 0
    times: list[float] = []
    for q in queries:
        exact = np.argpartition(-(matrix @ q), K)[:K]
        t = time.perf_counter()
        got = store.vector_top_k(SESSION, dim, q, K)  # type: ignore[attr-defined]
        times.append(time.perf_counter() - t)
        found += len({ids[i] for i in exact} & {node for node, _ in got})
    return {
        "recall10": found / (K * len(queries)),
        "queries": len(queries),
        "rows": len(ids),
        "top_k_p50_ms": percentile(times, 0.5),
    }


def run_child(kind: str, where: str, n: int, dim: int, reps: int, recall_k: bool) -> dict[str, Any]:
    cmd = [
        sys.executable, str(Path(__file__).with_name("store.py")), "--store", kind,
        "--child", json.dumps([kind, where, n, dim, reps, recall_k]),
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stderr[-4000:], file=sys.stderr)
        raise SystemExit(f"the {kind} {n} measurement failed")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# -- the table ---------------------------------------------------------------------------
def report(rows: list[dict[str, Any]], dim: int, reps: int, info: dict[str, Any]) -> None:
    mb = 1024.0
    print()
    print(
        f"lambo store bench, PostgreSQL beside SQLite: {dim}-d, vectors from a Gaussian "
        f"mixture; {reps} recalls per row, default arguments, excluding the query embedding"
    )
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"cpus {os.cpu_count()}, load average at the end {load}; PostgreSQL {info['pg']}")
    print()
    head = (
        f"{'store':<9}{'concepts':>9}{'edges':>9}{'built by':>10}{'open s':>8}{'RSS MB':>8}"
        f"{'recall p50':>11}{'p95':>8}{'hits':>6}{'1-c w/s':>9}{'p50 ms':>8}"
        f"{'16-c w/s':>9}{'p50 ms':>8}{'1000-c c/s':>11}{'HNSW r@10':>10}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        if "skipped" in r:
            print(f"{r['kind']:<9}{r['n']:>9}  not measured: {r['skipped']}")
            continue
        w1, w16 = r["writes"]["1"], r["writes"]["16"]
        build = r["build"]
        big = (
            f"{BATCH * build['batches'] / build['batch_s']:>11.0f}"
            if "batch_s" in build
            else (f"{'(COPY)':>11}")
        )
        hnsw = f"{r['hnsw']['recall10']:>10.3f}" if "hnsw" in r else f"{'':>10}"
        print(
            f"{r['kind']:<9}{r['concepts']:>9}{r['edges']:>9}{build['how']:>10}"
            f"{r['open_s']:>8.2f}{r['rss_open_kb'] / mb:>8.0f}"
            f"{r['recall'][0]:>11.2f}{r['recall'][1]:>8.2f}{r['hits']:>6.1f}"
            f"{w1['batches_s']:>9.0f}{w1['p50_ms']:>8.2f}{w16['batches_s']:>9.0f}{w16['p50_ms']:>8.2f}"
            f"{big}{hnsw}"
        )
    print()
    print(
        "open s: Session.open as a serve opens it (SessionIndex.open inside); RSS MB: the\n"
        "process's resident set after it (PostgreSQL's memory is the server's); recall in ms;\n"
        "N-c w/s: applied batches of N concepts per second, one writer fenced by a held lease\n"
        "(each with an interaction, N vectors and N Derives edges); 1000-c c/s: concepts per\n"
        "second of the build's 1000-concept batches (store.apply, the HNSW index kept row by row)"
    )
    for r in rows:
        if "skipped" in r:
            continue
        b = r["build"]
        line = f"  {r['kind']} {r['n']}: built {b['built_at']}, {b['db_size']}"
        if b["how"] == "COPY":
            line += (
                f"; bulk COPY load {b['load_s']:.0f} s, then the HNSW index built once in "
                f"{b['index_s']:.0f} s (maintenance_work_mem {b['maintenance_work_mem']}, "
                f"1 parallel worker), index {b['index_size']}"
            )
        else:
            line += f"; store.apply build {b['build_s']:.0f} s"
        line += f"; summaries warm {r['summaries_s']:.1f} s; vectors: {r['vectors_in_ram']}"
        if "hnsw" in r:
            h = r["hnsw"]
            line += (
                f"; HNSW recall@10 {h['recall10']:.3f} over {h['queries']} mixture queries vs "
                f"exact numpy on {h['rows']} rows, vector_top_k p50 {h['top_k_p50_ms']:.2f} ms"
            )
        print(line)
    print(f"  PostgreSQL settings: {info['settings']}; HNSW {info['hnsw']}")


def main(args: Any) -> None:
    if args.child is not None:
        kind, where, n, dim, reps, recall_k = json.loads(args.child)
        print(json.dumps(measure(kind, where, n, dim, reps, recall_k)))
        return
    sizes = [int(s) for s in (args.sizes or "10000,100000,1000000").split(",")]
    dim = args.dim
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    server = start_server()
    info: dict[str, Any] = {}
    with_pg = args.store == "postgres"
    plan: list[tuple[str, int]] = [("sqlite", n) for n in sizes if n <= args.sqlite_max]
    if with_pg:
        plan += [("postgres", n) for n in sizes]
    rows: list[dict[str, Any]] = []
    for kind, n in plan:
        row: dict[str, Any] = {"kind": kind, "n": n}
        if kind == "sqlite":
            path, row["build"] = sqlite_file(n, dim)
            where = str(path)
        else:
            where, row["build"] = pg_database(server, n, dim, args.bulk_above)
        if args.build_only:
            continue
        recall_k = kind == "postgres" and n in args.recall_at
        print(f"measuring {kind} {n} ...", flush=True)
        row.update(run_child(kind, where, n, dim, args.reps, recall_k))
        rows.append(row)
    if args.build_only:
        return
    admin = dsn_of(server)
    info["settings"] = settings(admin)
    import psycopg

    from lambo_core.store.postgres import vectors

    with psycopg.connect(admin, autocommit=True) as conn:
        info["pg"] = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
    info["hnsw"] = (
        f"m=16, ef_construction=64 (pgvector defaults: ensure_vector_index sets none), "
        f"ef_search={vectors.EF_SEARCH} (vectors.EF_SEARCH, SET LOCAL per search)"
    )
    report(rows, dim, args.reps, info)
