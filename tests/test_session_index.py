"""SessionIndex: rebuilt from both real stores, and kept equal to a fresh rebuild by apply."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from lambo_core.index import session_index as session_index_module
from lambo_core.index.session_index import SessionIndex
from lambo_core.model import (
    Concept,
    ConceptType,
    Edge,
    EdgeType,
    Interaction,
    InteractionKind,
    WriteBatch,
    new_id,
)
from lambo_core.store import MemoryStore, SqliteStore, Store

S = "sess"
T0 = 1_700_000_000.0
DIM = 8


@pytest.fixture(params=["sqlite", "memory", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    opened: Store
    if request.param == "postgres":  # vectors stay in the database (StoreVectors)
        from lambo_core.store.postgres.store import PostgresStore

        opened = PostgresStore(request.getfixturevalue("pg_dsn"))
    elif request.param == "sqlite":
        opened = SqliteStore(tmp_path / "db" / "lambo.db")
    else:
        opened = MemoryStore()
    opened.ensure_session(S, T0)
    yield opened
    opened.close()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    opened = SqliteStore(tmp_path / "db" / "lambo.db")
    opened.ensure_session(S, T0)
    yield opened
    opened.close()


def unit(rng: np.random.Generator, dim: int = DIM) -> npt.NDArray[np.float32]:
    v = rng.standard_normal(dim).astype(np.float32)
    return v / np.linalg.norm(v)


def make_concept(
    content: str, vector: npt.NDArray[np.float32] | None, interaction: str | None = None
) -> Concept:
    return Concept(
        id=new_id(),
        session=S,
        content=content,
        canonical_key=content.lower(),
        concept_type=ConceptType.ENTITY,
        created_at=T0,
        about_time=T0,
        agent_id="agent-a",
        interaction_id=interaction,
        vector=vector,
    )


def make_edge(src: str, dst: str, edge_type: EdgeType, interaction: str | None) -> Edge:
    return Edge(S, src, dst, edge_type, 1.0, interaction, "agent-a", T0, T0)


def write_call(
    store: Store, rng: np.random.Generator, contents: list[str], *, with_vectors: bool = True
) -> tuple[Interaction, list[Concept], WriteBatch]:
    """One derive-like batch: an interaction, its concepts, DERIVES edges to each."""
    inter = Interaction(
        new_id(), S, "agent-a", InteractionKind.DERIVE, T0, T0, " / ".join(contents)
    )
    concepts = [
        make_concept(text, unit(rng) if with_vectors else None, inter.id) for text in contents
    ]
    edges = [make_edge(inter.id, c.id, EdgeType.DERIVES, inter.id) for c in concepts]
    batch = WriteBatch(S, interaction=inter, concepts=concepts, edges=edges)
    store.apply(batch)
    return inter, concepts, batch


def snapshot(index: SessionIndex) -> dict[str, object]:
    """Everything observable about an index, in a comparable form."""
    g = index.graph
    edges = sorted((e.src, e.dst, e.edge_type.value, e.weight) for e in g.iter_edges())
    vectors = None
    if index.vectors is not None:
        matrix = index.vectors.in_ram()
        vectors = {node: np.asarray(matrix.get(node)).tolist() for node in sorted(matrix.ids())}
    return {
        "concepts": sorted(g.concept_ids()),
        "edges": edges,
        "radius": {node: g.blast_radius(node) for node in g.concept_ids()},
        "vectors": vectors,
    }


def test_open_empty_session(store: Store) -> None:
    index = SessionIndex.open(store, S)
    assert len(index.graph) == 0 and index.graph.edge_count == 0
    assert index.vectors is None  # no contract stamped, no vectors stored
    assert index.keywords.search("anything", 5) == []
    with index.lock, index.lock:  # re-entrant
        pass


def test_contract_gives_an_empty_matrix_of_its_width(store: Store) -> None:
    store.stamp_contract(S, {"kind": "onnx", "model": "m", "dim": DIM})
    index = SessionIndex.open(store, S)
    if store.has_vector_search:
        assert index.vectors is not None and index.vectors.dim == DIM and len(index.vectors) == 0
    else:
        assert index.vectors is None
        with pytest.raises(ValueError):
            index.ensure_vectors(DIM)


def test_open_rebuilds_graph_vectors_and_keywords(store: Store) -> None:
    rng = np.random.default_rng(1)
    store.stamp_contract(S, {"kind": "onnx", "model": "m", "dim": DIM})
    inter, (schema, account, table), _ = write_call(
        store, rng, ["user schema", "account table", "session table"]
    )
    _, (decision,), _ = write_call(store, rng, ["decision rests on the user schema"])
    store.apply(
        WriteBatch(
            S,
            edges=[
                make_edge(decision.id, schema.id, EdgeType.DEPENDENCY, inter.id),
                make_edge(schema.id, account.id, EdgeType.HIERARCHICAL, inter.id),
                make_edge(schema.id, table.id, EdgeType.HIERARCHICAL, inter.id),
            ],
        )
    )
    index = SessionIndex.open(store, S)
    g = index.graph
    assert len(g) == 4
    assert g.edge_count == 4 + 3  # DERIVES from the interactions + the three above
    assert g.blast_radius(schema.id) == 3
    assert sorted(g.dependents(schema.id)) == sorted([decision.id, account.id, table.id])
    assert g.is_interaction(inter.id) and not g.is_interaction(schema.id)
    assert [c.id for c in g.concepts_with_key("user schema")] == [schema.id]
    assert [c.id for c in g.concepts_with_prefix(schema.id[:8])] == [schema.id]
    assert all(c.vector is None for c in g.iter_concepts())  # vectors live in the matrix only
    assert g.would_close_cycle(account.id, schema.id, [EdgeType.HIERARCHICAL])
    hits = index.keywords.search("schema", 5)
    assert {node for node, _ in hits} == {schema.id, decision.id}
    if store.has_vector_search:
        assert index.vectors is not None and len(index.vectors) == 4
        stored = store.get_concept(S, account.id)
        assert stored is not None and stored.vector is not None
        top = index.vectors.top_k(stored.vector, 1)
        assert top[0][0] == account.id and top[0][1] == pytest.approx(1.0, abs=1e-5)
    else:
        assert index.vectors is None


def test_dim_from_first_vector_without_contract(sqlite_store: Store) -> None:
    rng = np.random.default_rng(2)
    write_call(sqlite_store, rng, ["a", "b"])
    index = SessionIndex.open(sqlite_store, S)
    assert index.vectors is not None and index.vectors.dim == DIM and len(index.vectors) == 2


def test_vectors_of_another_width_are_left_out(sqlite_store: Store) -> None:
    rng = np.random.default_rng(3)
    sqlite_store.stamp_contract(S, {"kind": "onnx", "model": "m", "dim": DIM})
    write_call(sqlite_store, rng, ["good one", "good two"])
    odd = make_concept("odd width", unit(rng, DIM * 2))
    sqlite_store.apply(WriteBatch(S, concepts=[odd]))
    index = SessionIndex.open(sqlite_store, S)
    assert index.skipped_vectors == 1
    assert index.vectors is not None and len(index.vectors) == 2 and odd.id not in index.vectors
    assert odd.id in index.graph  # still in the graph, found by keyword
    assert index.keywords.search("odd", 3)[0][0] == odd.id


def test_open_and_apply_keep_where_each_vector_came_from(store: Store) -> None:
    rng = np.random.default_rng(9)
    store.stamp_contract(S, {"kind": "onnx", "model": "m", "dim": DIM})
    sources = {"plain text": None, "a chart [image:r17]": "image/png",
               "a sent vector [image:v1]": "client"}  # fmt: skip
    first = [make_concept(text, unit(rng)) for text in sources]
    for c in first:
        c.vector_source = sources[c.content]
    store.apply(WriteBatch(S, concepts=first))
    live = SessionIndex.open(store, S)
    later = make_concept("a photo [image:p2]", unit(rng))
    later.vector_source = "image/webp"
    batch = WriteBatch(S, concepts=[later])
    store.apply(batch)
    live.apply(batch)
    expected = {c.id: c.vector_source for c in [*first, later]}
    for index in (live, SessionIndex.open(store, S)):
        assert {c.id: c.vector_source for c in index.graph.iter_concepts()} == expected
        held = index.graph.concept(later.id)
        assert held is not None and held.is_image and held.vector is None
        plain = index.graph.concept(first[0].id)
        assert plain is not None and not plain.is_image
        if store.has_vector_search:
            assert index.vectors is not None and len(index.vectors) == 4


def test_keyword_only_concepts(store: Store) -> None:
    rng = np.random.default_rng(4)
    write_call(store, rng, ["no vector here"], with_vectors=False)
    index = SessionIndex.open(store, S)
    assert len(index.graph) == 1 and index.vectors is None


def test_many_rows_across_chunk_boundaries(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session_index_module, "_CHUNK_ROWS", 16)
    rng = np.random.default_rng(5)
    written: list[Concept] = []
    for call in range(7):
        _, concepts, _ = write_call(sqlite_store, rng, [f"c{call}-{i}" for i in range(10)])
        written.extend(concepts)
    index = SessionIndex.open(sqlite_store, S)
    assert index.vectors is not None and len(index.vectors) == 70
    assert index.vectors.in_ram().capacity >= 70
    for c in written:
        assert c.vector is not None
        np.testing.assert_array_equal(index.vectors.get(c.id), c.vector)


def test_apply_keeps_the_index_equal_to_a_fresh_open(store: Store) -> None:
    rng = np.random.default_rng(6)
    store.stamp_contract(S, {"kind": "onnx", "model": "m", "dim": DIM})
    write_call(store, rng, ["base one", "base two"])
    live = SessionIndex.open(store, S)
    _, (a, b), batch = write_call(store, rng, ["new one", "new two"])
    live.apply(batch)
    # a reinforcement, repeated inside one batch too, and a fresh dependency
    again = WriteBatch(
        S,
        edges=[
            make_edge(a.id, b.id, EdgeType.DEPENDENCY, None),
            make_edge(a.id, b.id, EdgeType.DEPENDENCY, None),
            make_edge(b.id, a.id, EdgeType.SEMANTIC, None),
        ],
    )
    store.apply(again)
    live.apply(again)
    store.apply(again)
    live.apply(again)
    assert snapshot(live) == snapshot(SessionIndex.open(store, S))
    reloaded = SessionIndex.open(store, S).graph.edge(a.id, b.id, EdgeType.DEPENDENCY)
    assert reloaded is not None and reloaded.weight == 4.0
    assert live.graph.blast_radius(b.id) == 1


def test_first_vector_creates_the_matrix_on_apply(sqlite_store: Store) -> None:
    rng = np.random.default_rng(7)
    live = SessionIndex.open(sqlite_store, S)
    assert live.vectors is None
    _, (c,), batch = write_call(sqlite_store, rng, ["first"])
    live.apply(batch)
    assert live.vectors is not None and live.vectors.dim == DIM and c.id in live.vectors
    assert batch.concepts[0].vector is not None  # the caller's batch is not stripped
    assert snapshot(live) == snapshot(SessionIndex.open(sqlite_store, S))


def test_apply_refuses_a_wrong_width_before_changing_anything(sqlite_store: Store) -> None:
    rng = np.random.default_rng(8)
    sqlite_store.stamp_contract(S, {"kind": "onnx", "model": "m", "dim": DIM})
    live = SessionIndex.open(sqlite_store, S)
    bad = WriteBatch(S, concepts=[make_concept("ok", unit(rng)), make_concept("bad", unit(rng, 3))])
    before = snapshot(live)
    with pytest.raises(ValueError, match="width"):
        live.apply(bad)
    assert snapshot(live) == before
    with pytest.raises(ValueError):
        live.ensure_vectors(DIM + 1)


def test_remove_concepts_mirrors_the_store(store: Store) -> None:
    rng = np.random.default_rng(9)
    store.stamp_contract(S, {"kind": "onnx", "model": "m", "dim": DIM})
    inter, (a, b, c), _ = write_call(store, rng, ["a one", "b two", "c three"])
    store.apply(
        WriteBatch(
            S,
            edges=[
                make_edge(a.id, b.id, EdgeType.DEPENDENCY, inter.id),
                make_edge(b.id, c.id, EdgeType.DEPENDENCY, inter.id),
            ],
        )
    )
    live = SessionIndex.open(store, S)
    store.delete_concepts(S, [b.id])
    live.remove_concepts([b.id])
    assert snapshot(live) == snapshot(SessionIndex.open(store, S))
    assert live.graph.blast_radius(c.id) == 0
    assert live.graph.is_interaction(inter.id)


def test_open_restores_numpy_hugepage_advice(store: Store) -> None:
    switch = session_index_module._madvise_switch()
    if switch is None:
        pytest.skip("this numpy has no madvise switch")
    before = switch(True)
    try:
        SessionIndex.open(store, S)
        assert switch(True) is True  # open switched it off and back on
    finally:
        switch(before)
