"""The graph's highest degree stays exact through every add and remove (index/degrees.py)."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from lambo_core.index.degrees import DegreeCount
from lambo_core.index.graph import SessionGraph
from lambo_core.model import Concept, ConceptType, Edge, EdgeType

S = "s"
NODES = ["a", "b", "c", "d", "i-1", "i-2"]  # i-*: interactions, never concepts
TYPES = [EdgeType.DEPENDENCY, EdgeType.SEMANTIC, EdgeType.DERIVES]


def concept(node_id: str) -> Concept:
    return Concept(node_id, S, node_id, node_id, ConceptType.ENTITY, 1.0, 1.0, "a")


def edge(src: str, dst: str, edge_type: EdgeType) -> Edge:
    return Edge(S, src, dst, edge_type, 1.0, None, "a", 1.0, 1.0)


def recounted(graph: SessionGraph) -> int:
    """The highest edge count of any concept, counted from the adjacency."""
    degree: Counter[str] = Counter()
    for edge_type in EdgeType:
        for by_node in (graph.adjacency_out(edge_type), graph.adjacency_in(edge_type)):
            for node, peers in by_node.items():
                degree[node] += len(peers)
    return max((n for node, n in degree.items() if node in graph), default=0)


node = st.sampled_from(NODES)
concept_node = st.sampled_from(NODES[:4])
operation = st.one_of(
    st.tuples(st.just("concept"), concept_node),
    st.tuples(st.just("edge"), node, node, st.sampled_from(TYPES)),
    st.tuples(st.just("drop_edge"), node, node, st.sampled_from(TYPES)),
    st.tuples(st.just("drop_concept"), concept_node),
    st.tuples(st.just("load"), node, node, st.sampled_from(TYPES)),
)


def apply(graph: SessionGraph, op: tuple[object, ...]) -> None:
    kind = op[0]
    if kind == "concept":
        graph.add_concept(concept(str(op[1])))
    elif kind == "drop_concept":
        graph.remove_concept(str(op[1]))
    else:
        src, dst, edge_type = str(op[1]), str(op[2]), op[3]
        assert isinstance(edge_type, EdgeType)
        if kind == "edge":
            graph.add_edge(edge(src, dst, edge_type))
        elif kind == "drop_edge":
            graph.remove_edge(src, dst, edge_type)
        else:
            graph.load_edges([edge(src, dst, edge_type)])


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(operation, max_size=40))
def test_the_highest_degree_matches_a_recount_after_every_change(
    ops: list[tuple[object, ...]],
) -> None:
    graph = SessionGraph(S)
    for op in ops:
        apply(graph, op)
        assert graph.max_degree == recounted(graph), op


def test_an_interaction_with_many_edges_is_never_the_highest() -> None:
    graph = SessionGraph(S)
    for name in "abc":
        graph.add_concept(concept(name))
        graph.add_edge(edge("i-1", name, EdgeType.DERIVES))
    assert graph.max_degree == 1  # i-1 has three edges, but it is not a concept


def test_edges_written_before_their_concept_count_once_it_exists() -> None:
    graph = SessionGraph(S)
    graph.add_edge(edge("a", "b", EdgeType.DEPENDENCY))
    graph.add_edge(edge("a", "c", EdgeType.DEPENDENCY))
    assert graph.max_degree == 0  # no concepts yet
    graph.add_concept(concept("a"))
    assert graph.max_degree == 2
    graph.add_concept(concept("a"))  # replacing it counts it once still
    assert graph.max_degree == 2


def test_the_highest_steps_down_past_counts_no_concept_holds() -> None:
    counts = DegreeCount()
    for name, edges in (("a", 5), ("b", 2)):
        counts.admit(name)
        counts.bump(name, edges, concept=True)
    assert counts.highest == 5
    counts.retire("a")
    assert counts.highest == 2
    counts.bump("b", -2, concept=True)
    assert counts.highest == 0 and counts.of("b") == 0
