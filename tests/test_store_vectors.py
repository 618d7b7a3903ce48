"""StoreVectors: the session index's vectors left in a store that searches them itself.

``SearchingStore`` is a real SQLite store that also answers the vector calls
PostgreSQL's store answers (``vector_top_k`` / ``vector_of`` / ``vector_count``) by exact
numpy over its own rows, and counts them: the index side is proven here on its own,
the pgvector side in test_pg_vectors.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from lambo_core.embed.onnx import OnnxEmbedder
from lambo_core.index.session_index import SessionIndex
from lambo_core.index.store_vectors import StoreVectors
from lambo_core.index.vectors import VectorMatrix
from lambo_core.model import Concept, Vector, WriteBatch
from lambo_core.recall import RecallDefaults, recall
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import SqliteStore
from lambo_core.supersession import suspected_pairs
from lambo_core.writes import WritePipeline
from tests.test_session_index import DIM, T0, S, make_concept, unit, write_call


class SearchingStore(SqliteStore):
    """SQLite plus the vector calls of a store with ``vector_in_store`` (exact numpy)."""

    vector_in_store = True

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.calls: Counter[str] = Counter()
        self.scans: list[bool] = []  # the ``vectors`` flag of each concepts() scan

    def concepts(self, session: str, *, vectors: bool = True) -> Iterator[Concept]:
        self.scans.append(vectors)
        for concept in SqliteStore.concepts(self, session):
            yield concept if vectors else replace(concept, vector=None)

    def _rows(self, session: str, dim: int) -> tuple[list[str], npt.NDArray[np.float32]]:
        pairs = [
            (c.id, c.vector)
            for c in SqliteStore.concepts(self, session)
            if c.vector is not None and c.vector.shape == (dim,)
        ]
        matrix = np.stack([v for _, v in pairs]) if pairs else np.empty((0, dim), np.float32)
        return [i for i, _ in pairs], matrix

    def vector_top_k(
        self,
        session: str,
        dim: int,
        query: Vector,
        k: int,
        exclude_statuses: Sequence[str] = (),
    ) -> list[tuple[str, float]]:
        self.calls["vector_top_k"] += 1
        ids, matrix = self._rows(session, dim)
        scores = matrix @ query
        ranked = sorted(zip(ids, scores.tolist(), strict=True), key=lambda p: (-p[1], p[0]))
        return ranked[:k]

    def vector_of(self, session: str, ids: Iterable[str]) -> dict[str, Vector]:
        self.calls["vector_of"] += 1
        wanted = set(ids)
        return {
            c.id: c.vector
            for c in SqliteStore.concepts(self, session)
            if c.id in wanted and c.vector is not None
        }

    def vector_count(self, session: str, dim: int, at_most: int | None = None) -> int:
        self.calls["vector_count"] += 1
        found = len(self._rows(session, dim)[0])
        return found if at_most is None else min(found, at_most)


@pytest.fixture
def searching(tmp_path: Path) -> Iterator[SearchingStore]:
    store = SearchingStore(tmp_path / "db" / "lambo.db")
    store.ensure_session(S, T0)
    store.stamp_contract(S, {"dim": DIM, "model": "test"})
    yield store
    store.close()


def row(concept: Concept) -> Vector:
    assert concept.vector is not None
    return concept.vector


def fill(store: SqliteStore, n: int = 40) -> list[Concept]:
    rng = np.random.default_rng(11)
    made: list[Concept] = []
    for start in range(0, n, 10):
        made += write_call(store, rng, [f"fact {i}" for i in range(start, start + 10)])[1]
    return made


def test_the_open_reads_no_vector_and_searches_through_the_store(
    searching: SearchingStore,
) -> None:
    made = fill(searching)
    index = SessionIndex.open(searching, S)
    assert searching.scans == [False]  # one scan of concepts, without their vectors
    assert isinstance(index.vectors, StoreVectors) and index.vectors.dim == DIM
    assert len(index.graph) == len(made)
    # the same answers as the matrix a plain open builds in RAM
    in_ram = SessionIndex.open(SqliteStore(searching.path), S).vectors
    assert isinstance(in_ram, VectorMatrix)
    rng = np.random.default_rng(12)
    for _ in range(5):
        q = unit(rng)
        got, want = index.vectors.top_k(q, 7), in_ram.top_k(q, 7)
        assert [n for n, _ in got] == [n for n, _ in want]
        assert [s for _, s in got] == pytest.approx([s for _, s in want])
    assert searching.calls["vector_top_k"] == 5
    assert len(index.vectors) == len(in_ram) == len(made)
    for concept in made[:3]:
        np.testing.assert_array_equal(index.vectors.get(concept.id), concept.vector)
    assert index.vectors.get("no-such-id") is None
    assert index.vectors.top_k(row(made[0]), 3, exclude={made[0].id})[0][0] != made[0].id


def test_writes_and_removals_follow_without_copying_rows(searching: SearchingStore) -> None:
    made = fill(searching, 10)
    index = SessionIndex.open(searching, S)
    vectors = index.vectors
    assert vectors is not None and bool(vectors)  # one count ...
    assert bool(vectors) and searching.calls["vector_count"] == 1  # ... then remembered
    rng = np.random.default_rng(13)
    _, fresh, batch = write_call(searching, rng, ["a new fact"])
    index.apply(batch)
    assert vectors.top_k(row(fresh[0]), 1)[0][0] == fresh[0].id
    before = searching.calls["vector_of"]
    np.testing.assert_array_equal(vectors.get(fresh[0].id), fresh[0].vector)
    assert searching.calls["vector_of"] == before  # just written: served from the cache
    assert bool(vectors) and len(vectors) == 11
    searching.delete_concepts(S, [fresh[0].id])
    index.remove_concepts([fresh[0].id])
    assert vectors.get(fresh[0].id) is None
    assert fresh[0].id not in {n for n, _ in vectors.top_k(row(fresh[0]), 20)}
    assert len(vectors) == 10 and made[0].id in vectors


def test_a_prefetch_is_one_store_call_and_later_gets_none(searching: SearchingStore) -> None:
    made = fill(searching, 20)
    index = SessionIndex.open(searching, S)
    assert index.vectors is not None
    index.vectors.prefetch(c.id for c in made[:12])
    index.vectors.prefetch(c.id for c in made[:12])  # all cached: no call
    assert searching.calls["vector_of"] == 1
    for concept in made[:12]:
        np.testing.assert_array_equal(index.vectors.get(concept.id), concept.vector)
    assert searching.calls["vector_of"] == 1


def test_a_small_cache_stays_small_and_still_answers(searching: SearchingStore) -> None:
    made = fill(searching, 20)
    vectors = StoreVectors(searching, S, DIM, cache_rows=3)
    vectors.prefetch(c.id for c in made)
    assert len(vectors._cache) == 3
    for concept in made:
        np.testing.assert_array_equal(vectors.get(concept.id), concept.vector)


def test_a_fetch_older_than_a_write_is_not_cached(searching: SearchingStore) -> None:
    made = fill(searching, 5)
    vectors = StoreVectors(searching, S, DIM)
    newer = unit(np.random.default_rng(14))
    real = searching.vector_of

    def slow_vector_of(session: str, ids: Iterable[str]) -> dict[str, Vector]:
        rows = real(session, ids)  # read before the write below lands
        vectors.add_many([made[0].id], newer[None, :])
        return rows

    searching.vector_of = slow_vector_of  # type: ignore[method-assign]
    vectors.prefetch([made[0].id])
    searching.vector_of = real  # type: ignore[method-assign]
    np.testing.assert_array_equal(vectors.get(made[0].id), newer)


def test_rows_of_another_width_are_not_this_width_s(searching: SearchingStore) -> None:
    odd = make_concept("odd width", np.ones(DIM + 1, dtype=np.float32) / np.sqrt(DIM + 1))
    searching.apply(WriteBatch(S, concepts=[odd]))
    vectors = StoreVectors(searching, S, DIM)
    assert vectors.get(odd.id) is None and not vectors and len(vectors) == 0
    with pytest.raises(ValueError, match=r"vector must have shape \(8,\)"):
        vectors.top_k(np.ones(DIM + 1, dtype=np.float32), 3)
    with pytest.raises(ValueError, match="query vector must be finite and non-zero"):
        vectors.top_k(np.zeros(DIM, dtype=np.float32), 3)
    with pytest.raises(ValueError, match=r"matrix must have shape \(1, 8\)"):
        vectors.add_many(["x"], np.ones((1, DIM + 1), dtype=np.float32))


def test_in_ram_copies_every_row_for_the_pairs_tool(searching: SearchingStore) -> None:
    made = fill(searching, 30)
    index = SessionIndex.open(searching, S)
    assert index.vectors is not None
    matrix = index.vectors.in_ram()
    assert sorted(matrix.ids()) == sorted(c.id for c in made)
    plain = SessionIndex.open(SqliteStore(searching.path), S)
    assert suspected_pairs(index.graph, matrix, 0.5) == suspected_pairs(
        plain.graph, plain.vectors.in_ram() if plain.vectors else None, 0.5
    )


FACTS = [
    "deploys to production happen on tuesday afternoons",
    "the staging database runs postgres 15",
    "API tokens expire after one hour",
    "the frontend is built with vite",
    "invoices are generated by a nightly cron job",
]


def write_facts(session: Session) -> WritePipeline:
    pipeline = WritePipeline(session).start()
    for text in FACTS:
        ack = pipeline.submit(
            "lambo_derive",
            {"agent_id": "agent-a", "concepts": [{"content": text, "concept_type": "logic"}]},
        )
        pipeline.session.receipts.wait(ack.structured["receipt"], "agent-a", "s", 30_000)
    return pipeline


def test_recall_end_to_end_with_the_vectors_in_the_store(
    tmp_path: Path, minilm: OnnxEmbedder
) -> None:
    """The real write pipeline and recall over MiniLM: the same hits as SQLite's own
    matrix, one vector search and at most two fetches of rows a recall."""
    plain = write_facts(
        Session.open(SqliteStore(tmp_path / "p.db"), "s", EmbedderPlan.ready(minilm))
    )
    store = SearchingStore(tmp_path / "v.db")
    held = write_facts(Session.open(store, "s", EmbedderPlan.ready(minilm)))
    try:
        assert isinstance(held.session.index.vectors, StoreVectors)
        reopened = Session.open(store, "s", EmbedderPlan.ready(minilm))
        assert store.scans[-1] is False and isinstance(reopened.index.vectors, StoreVectors)
        for question in ("when do we ship a release?", "how long do API tokens live", "vite"):
            args = {"agent_id": "a", "query": question, "traversal_depth": 0}
            want = recall(plain.session, args, defaults=RecallDefaults())
            store.calls.clear()
            got = recall(reopened, args, defaults=RecallDefaults())
            assert [h["content"] for h in got.hits] == [h["content"] for h in want.hits]
            assert [h["score"] for h in got.hits] == pytest.approx([h["score"] for h in want.hits])
            assert store.calls["vector_top_k"] == 1 and store.calls["vector_of"] <= 2
        shipped = recall(
            reopened,
            {"agent_id": "a", "query": "when do we ship a release?", "traversal_depth": 0},
            defaults=RecallDefaults(),
            legs={"vector"},
        )
        assert shipped.hits[0]["content"] == FACTS[0]
    finally:
        held.close()
        plain.close()
