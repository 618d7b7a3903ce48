"""The corpus of ``tests/bench/store.py --store postgres`` and its builders.

The same session shape as tests/bench/recall.py (its vocabulary, Zipf texts, five
concepts per interaction with a DERIVES edge each and CoOccurrence between them, a
Dependency edge from about half the concepts to an earlier one), but with vectors drawn
from a Gaussian mixture, as tests/bench/pg_vectors.py draws them: real embeddings
cluster, and on uniform random 1024-d vectors every neighbour is equally far, which
makes an approximate index's recall@10 meaningless. The draws depend on (n, dim) only,
so the SQLite and PostgreSQL stores of one size hold the same rows.

Two ways in:
- ``apply_build``: through ``store.apply`` in batches of BATCH concepts (each block's
  interactions first, as interaction-only batches, since a batch carries one interaction
  and the session keeps five concepts per interaction); the big batches are timed.
- ``copy_build`` (PostgreSQL, for 1M): binary COPY into the store's own tables, the
  keyword ``tsv`` filled by a temporary trigger with the store's own expression, then the
  width's HNSW index built once after the load, timed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from lambo_core.embed.base import make_contract
from lambo_core.index.keywords import tokenize
from lambo_core.model import (
    Concept,
    Edge,
    EdgeType,
    Interaction,
    InteractionKind,
    WriteBatch,
)
from lambo_core.store.base import Store
from lambo_core.text import canonical_key
from tests.bench.recall import PER_INTERACTION, SESSION, T0, TYPES, uuid_from, vocabulary, zipf

BATCH = 1000  # concepts per applied build batch
WORDS_PER_DOC = 8
NOISE = 0.03  # per coordinate: a row's cosine to its centre is about 0.7 at 1024-d


def centres(n: int, dim: int) -> npt.NDArray[np.float32]:
    """The mixture's centres for a session of ``n``: one per 200 rows (at least 50)."""
    rng = np.random.default_rng([n, dim, 1])
    c = rng.standard_normal((max(50, n // 200), dim)).astype(np.float32)
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    return c


def mixture(
    rng: np.random.Generator, count: int, centre_rows: npt.NDArray[np.float32]
) -> npt.NDArray[np.float32]:
    """Unit rows, each a random centre plus noise (pg_vectors.py's draw)."""
    dim = centre_rows.shape[1]
    picks = rng.integers(0, len(centre_rows), count)
    rows = centre_rows[picks] + NOISE * rng.standard_normal((count, dim)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows.astype(np.float32)


@dataclass
class Block:
    """Up to BATCH concepts and everything they come with."""

    interactions: list[Interaction]
    concepts: list[Concept]
    edges: list[Edge]


def _edge(session: str, src: str, dst: str, kind: EdgeType, inter: str, t: float) -> Edge:
    weight = 0.5 if kind is EdgeType.COOCCURRENCE else 1.0
    return Edge(session, src, dst, kind, weight, inter, "bench", t, t)


def blocks(n: int, dim: int, session: str = SESSION) -> Iterator[Block]:
    """The session's rows, BATCH concepts at a time, the same for every store."""
    rng = np.random.default_rng([n, dim, 2])
    words = vocabulary(np.random.default_rng(20240611))
    centre_rows = centres(n, dim)
    ids: list[str] = []
    for start in range(0, n, BATCH):
        count = min(BATCH, n - start)
        vecs = mixture(rng, count, centre_rows)
        ranks = zipf(rng, count * WORDS_PER_DOC).reshape(count, WORDS_PER_DOC)
        block = Block([], [], [])
        for first in range(0, count, PER_INTERACTION):
            now = T0 + start + first
            inter = Interaction(
                uuid_from(rng), session, "bench", InteractionKind.DERIVE, now, now, "bench"
            )
            block.interactions.append(inter)
            group: list[str] = []
            for i in range(first, min(first + PER_INTERACTION, count)):
                text = " ".join(words[r] for r in ranks[i]) + f" item{start + i}"
                node = uuid_from(rng)
                block.concepts.append(
                    Concept(
                        id=node,
                        session=session,
                        content=text,
                        canonical_key=canonical_key(text),
                        concept_type=TYPES[int(rng.integers(len(TYPES)))],
                        created_at=now,
                        about_time=now,
                        agent_id="bench",
                        interaction_id=inter.id,
                        vector=vecs[i],
                    )
                )
                block.edges.append(_edge(session, inter.id, node, EdgeType.DERIVES, inter.id, now))
                block.edges.extend(
                    _edge(session, c, node, EdgeType.COOCCURRENCE, inter.id, now) for c in group
                )
                if ids and rng.random() < 0.5:  # depends on an earlier concept: acyclic
                    dst = ids[int(rng.integers(len(ids)))]
                    block.edges.append(
                        _edge(session, node, dst, EdgeType.DEPENDENCY, inter.id, now)
                    )
                group.append(node)
                ids.append(node)
        yield block


def contract(dim: int) -> dict[str, Any]:
    return dict(make_contract("random", "bench", dim))


def apply_build(store: Store, n: int, dim: int) -> dict[str, float]:
    """Write the session through ``store.apply``; the big batches' rate (concepts/s)."""
    store.ensure_session(SESSION, T0)
    store.stamp_contract(SESSION, contract(dim))
    big = 0.0
    t0 = time.perf_counter()
    for k, block in enumerate(blocks(n, dim)):
        for inter in block.interactions:
            store.apply(WriteBatch(SESSION, interaction=inter))
        batch = WriteBatch(SESSION, concepts=block.concepts, edges=block.edges)
        t = time.perf_counter()
        store.apply(batch)
        big += time.perf_counter() - t
        if k % 20 == 0:
            done = k * BATCH + len(block.concepts)
            print(f"  applied {done:>8} / {n}  ({time.perf_counter() - t0:.1f} s)", flush=True)
    return {"build_s": time.perf_counter() - t0, "batch_s": big, "batches": -(-n // BATCH)}


# -- PostgreSQL bulk load -------------------------------------------------------------

_TSV_TRIGGER = """
CREATE OR REPLACE FUNCTION bench_concepts_tsv() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN NEW.tsv := {tsv}; RETURN NEW; END $$;
CREATE TRIGGER bench_concepts_tsv BEFORE INSERT ON concepts
FOR EACH ROW EXECUTE FUNCTION bench_concepts_tsv();
"""
_DROP_TRIGGER = (
    "DROP TRIGGER IF EXISTS bench_concepts_tsv ON concepts; "
    "DROP FUNCTION IF EXISTS bench_concepts_tsv()"
)


def copy_build(conn: Any, store: Store, n: int, dim: int, maintenance_mem: str) -> dict[str, Any]:
    """Bulk-load the session with COPY, then build the HNSW index once. ``conn``: an
    autocommit psycopg connection to the store's database."""
    from psycopg.types import TypeInfo

    from lambo_core.store.postgres.connection import register_vector
    from lambo_core.store.postgres.keywords import TSV_SQL
    from lambo_core.store.postgres.vectors import ensure_vector_index, index_name

    store.ensure_session(SESSION, T0)  # the session row, before the stamp makes the index
    register_vector(conn, binary=True)
    info = TypeInfo.fetch(conn, "vector")
    assert info is not None
    info.register(conn)  # COPY's set_types names it
    # The store writes tsv = to_tsvector('simple', <tokens of content>); for these texts
    # (ASCII words and itemN) the tokens are the content itself, checked on each row.
    conn.execute(_DROP_TRIGGER)
    conn.execute(_TSV_TRIGGER.format(tsv=TSV_SQL.replace("%s", "NEW.content")))
    counts = {"concepts": 0, "edges": 0, "interactions": 0}
    t0 = time.perf_counter()
    try:
        for k, block in enumerate(blocks(n, dim)):
            with conn.transaction():
                _copy_block(conn, block, dim)
            counts["concepts"] += len(block.concepts)
            counts["edges"] += len(block.edges)
            counts["interactions"] += len(block.interactions)
            if k % 50 == 0:
                print(
                    f"  copied {counts['concepts']:>8} / {n}  ({time.perf_counter() - t0:.1f} s)",
                    flush=True,
                )
    finally:
        conn.execute(_DROP_TRIGGER)
    conn.execute(
        "UPDATE sessions SET mutation_count = %s WHERE name = %s",
        (counts["concepts"] + counts["edges"], SESSION),
    )
    # the keyword leg's bm25 statistics, which store.apply keeps and COPY does not (each
    # text's tokens are its words, checked above, so its positions count its tokens)
    conn.execute(
        "UPDATE concepts SET kw_length = (SELECT COALESCE(sum(array_length(positions, 1)), 0) "
        "FROM unnest(tsv)) WHERE session = %s",
        (SESSION,),
    )
    conn.execute(
        "UPDATE sessions SET kw_docs = (SELECT count(*) FROM concepts WHERE session = %(s)s), "
        "kw_length = (SELECT COALESCE(sum(kw_length), 0) FROM concepts WHERE session = %(s)s) "
        "WHERE name = %(s)s",
        {"s": SESSION},
    )
    load_s = time.perf_counter() - t0
    conn.execute("VACUUM ANALYZE concepts")
    conn.execute("VACUUM ANALYZE edges")
    conn.execute("VACUUM ANALYZE interactions")
    conn.execute(f"SET maintenance_work_mem = '{maintenance_mem}'")
    conn.execute("SET max_parallel_maintenance_workers = 1")  # 2 cores: leader + 1
    t = time.perf_counter()
    ensure_vector_index(conn, dim)
    index_s = time.perf_counter() - t
    store.stamp_contract(SESSION, contract(dim))  # the index exists: no second build
    size = conn.execute(
        "SELECT pg_size_pretty(pg_relation_size(%s))", (index_name(dim),)
    ).fetchone()
    return {
        "load_s": load_s,
        "index_s": index_s,
        "index_size": size[0] if size else "?",
        "maintenance_work_mem": maintenance_mem,
        **counts,
    }


def _copy_block(conn: Any, block: Block, dim: int) -> None:
    with conn.cursor() as cur:
        with cur.copy(
            "COPY interactions (session, id, agent_id, kind, created_at, about_time, summary) "
            "FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["text", "text", "text", "text", "float8", "float8", "text"])
            for i in block.interactions:
                copy.write_row(
                    (i.session, i.id, i.agent_id, i.kind.value, i.created_at, i.about_time,
                     i.summary)
                )  # fmt: skip
        with cur.copy(
            "COPY concepts (session, id, content, canonical_key, concept_type, created_at, "
            "about_time, agent_id, interaction_id, vector_dim, embedding) "
            "FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(
                ["text", "text", "text", "text", "text", "float8", "float8", "text", "text",
                 "int4", "vector"]
            )  # fmt: skip
            for c in block.concepts:
                if tokenize(c.content) != c.content.split(" "):
                    raise AssertionError("a bench text whose tokens are not its words")
                copy.write_row(
                    (c.session, c.id, c.content, c.canonical_key, c.concept_type.value,
                     c.created_at, c.about_time, c.agent_id, c.interaction_id, dim, c.vector)
                )  # fmt: skip
        with cur.copy(
            "COPY edges (session, src, dst, edge_type, weight, interaction_id, agent_id, "
            "created_at, about_time) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(
                ["text", "text", "text", "text", "float8", "text", "text", "float8", "float8"]
            )
            for e in block.edges:
                copy.write_row(
                    (e.session, e.src, e.dst, e.edge_type.value, e.weight, e.interaction_id,
                     e.agent_id, e.created_at, e.about_time)
                )  # fmt: skip
