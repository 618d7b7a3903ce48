"""SessionGraph: dependents and blast radius, cycles, traversals, lookups, removal."""

from __future__ import annotations

import itertools
import uuid

import numpy as np
import pytest

from lambo_core.index.graph import SessionGraph
from lambo_core.model import Concept, ConceptType, Edge, EdgeType, Status, short_id
from lambo_core.store.base import EDGE_WEIGHT_CAP

S = "s"
DEP = EdgeType.DEPENDENCY
HIER = EdgeType.HIERARCHICAL
CAUSAL_DEP = (EdgeType.PRODUCES, EdgeType.MODIFIES, EdgeType.DEPENDENCY)


def concept(
    node_id: str | None = None,
    content: str = "x",
    key: str | None = None,
    interaction: str | None = None,
) -> Concept:
    return Concept(
        id=node_id or str(uuid.uuid4()),
        session=S,
        content=content,
        canonical_key=key if key is not None else content,
        concept_type=ConceptType.ENTITY,
        created_at=1.0,
        about_time=1.0,
        agent_id="a",
        interaction_id=interaction,
        vector=np.full(4, 0.5, dtype=np.float32),
    )


def edge(src: str, dst: str, edge_type: EdgeType, weight: float = 1.0) -> Edge:
    return Edge(S, src, dst, edge_type, weight, "i-1", "a", 1.0, 1.0)


def graph_with(*names: str) -> SessionGraph:
    g = SessionGraph(S)
    for name in names:
        g.add_concept(concept(name, content=name))
    return g


# -- dependents and blast radius (spec: Dependency edges in + parent_of children) --


def test_dependents_are_dependency_sources_plus_children() -> None:
    g = graph_with("x", "a", "b", "c", "p", "y")
    g.add_edge(edge("a", "x", DEP))  # a depends on x
    g.add_edge(edge("b", "x", DEP))
    g.add_edge(edge("x", "c", HIER))  # x is c's parent
    g.add_edge(edge("p", "x", HIER))  # x's own parent: not a dependent
    g.add_edge(edge("x", "y", DEP))  # what x depends on: not a dependent
    g.add_edge(edge("a", "x", EdgeType.CONTRADICTS))  # adds no blast radius
    g.add_edge(edge("y", "x", EdgeType.PRODUCES))  # provenance: counts toward neither
    g.add_edge(edge("y", "x", EdgeType.SEMANTIC))
    assert g.dependents("x") == ["a", "b", "c"]
    assert g.blast_radius("x") == 3
    assert g.dependent_edges("x") == [("a", DEP), ("b", DEP), ("c", HIER)]
    assert g.blast_radius("y") == 1  # x depends on y
    assert g.blast_radius("missing") == 0


def test_dependents_are_distinct() -> None:
    g = graph_with("x", "a")
    g.add_edge(edge("a", "x", DEP))
    g.add_edge(edge("x", "a", HIER))  # a is both a dependent and a child
    g.add_edge(edge("a", "x", DEP))  # reinforcement
    assert g.dependents("x") == ["a"]
    assert g.blast_radius("x") == 1
    assert g.dependent_edges("x") == [("a", DEP)]


def test_dependents_skip_non_concepts_and_self() -> None:
    g = graph_with("x")
    g.add_edge(edge("ghost", "x", DEP))  # endpoint unknown to the graph
    g.add_edge(edge("x", "x", DEP))
    assert g.blast_radius("x") == 0


# -- cycles ----------------------------------------------------------------------


def test_self_loop_closes_a_cycle() -> None:
    g = graph_with("a")
    assert g.would_close_cycle("a", "a", [HIER])
    assert g.would_close_cycle("new", "new", [HIER])  # even for a node not yet created


def test_two_cycle() -> None:
    g = graph_with("a", "b")
    g.add_edge(edge("a", "b", HIER))
    assert g.would_close_cycle("b", "a", [HIER])
    assert not g.would_close_cycle("a", "b", [HIER])  # reinforcing the same edge is fine


def test_long_chain_without_recursion_limit() -> None:
    g = SessionGraph(S)
    n = 20_000  # far beyond Python's recursion limit
    names = [f"n{i}" for i in range(n)]
    for name in names:
        g.add_concept(concept(name))
    for a, b in itertools.pairwise(names):
        g.add_edge(edge(a, b, DEP))
    assert g.would_close_cycle(names[-1], names[0], [DEP])
    assert not g.would_close_cycle(names[0], names[-1], [DEP])
    assert len(g.ancestors(names[-1], [DEP])) == n - 1
    assert len(g.descendants(names[0], [DEP])) == n - 1


def test_diamond_is_not_a_cycle() -> None:
    g = graph_with("top", "l", "r", "bottom")
    for a, b in [("top", "l"), ("top", "r"), ("l", "bottom"), ("r", "bottom")]:
        g.add_edge(edge(a, b, HIER))
    assert not g.would_close_cycle("top", "bottom", [HIER])
    assert g.would_close_cycle("bottom", "top", [HIER])
    assert g.ancestors("bottom", [HIER]) == {"top", "l", "r"}
    assert g.ancestors("top", [HIER]) == set()


def test_edge_types_do_not_interfere() -> None:
    g = graph_with("a", "b", "c")
    g.add_edge(edge("a", "b", DEP))
    g.add_edge(edge("b", "c", EdgeType.SEMANTIC))
    g.add_edge(edge("c", "a", EdgeType.COOCCURRENCE))
    assert not g.would_close_cycle("b", "a", [HIER])
    assert g.would_close_cycle("b", "a", [DEP])
    assert not g.would_close_cycle("c", "a", CAUSAL_DEP)  # a->b is DEP but b->c is semantic
    g.add_edge(edge("b", "c", EdgeType.PRODUCES))
    assert g.would_close_cycle("c", "a", CAUSAL_DEP)  # a -dep-> b -produces-> c
    assert not g.would_close_cycle("c", "a", [DEP])


def test_batch_pairs_that_loop_among_themselves() -> None:
    g = graph_with("a", "b", "c", "d")
    assert g.batch_closes_cycle([("a", "b"), ("b", "c"), ("c", "a")], [HIER]) == 2
    assert g.batch_closes_cycle([("a", "b"), ("b", "a")], [HIER]) == 1
    assert g.batch_closes_cycle([("a", "b"), ("a", "b"), ("b", "c")], [HIER]) is None
    assert g.batch_closes_cycle([("x", "y"), ("y", "x")], [HIER]) == 1  # new nodes
    assert g.batch_closes_cycle([("a", "a")], [HIER]) == 0
    assert g.batch_closes_cycle([], [HIER]) is None
    # the batch joins up with the stored graph
    g.add_edge(edge("c", "d", HIER))
    assert g.batch_closes_cycle([("a", "b"), ("d", "a"), ("b", "c")], [HIER]) == 2
    # nothing was added by checking
    assert g.edge("a", "b", HIER) is None
    assert not g.would_close_cycle("b", "a", [HIER])


# -- traversals ---------------------------------------------------------------------


def chain_graph() -> SessionGraph:
    # a -> b -> c -> d (DEP), e -> a (HIER), b -- f (SEMANTIC)
    g = graph_with("a", "b", "c", "d", "e", "f")
    g.add_edge(edge("a", "b", DEP))
    g.add_edge(edge("b", "c", DEP))
    g.add_edge(edge("c", "d", DEP))
    g.add_edge(edge("e", "a", HIER))
    g.add_edge(edge("b", "f", EdgeType.SEMANTIC))
    return g


def test_expand_respects_depth_and_types() -> None:
    g = chain_graph()
    both = [DEP, HIER, EdgeType.SEMANTIC]
    assert g.expand(["a"], 0, both) == {"a": 0}
    assert g.expand(["a"], 1, both) == {"a": 0, "b": 1, "e": 1}
    assert g.expand(["a"], 2, both) == {"a": 0, "b": 1, "e": 1, "c": 2, "f": 2}
    assert g.expand(["a"], 2, [DEP]) == {"a": 0, "b": 1, "c": 2}
    assert g.expand(["c"], 1, [DEP]) == {"c": 0, "b": 1, "d": 1}  # both directions
    assert g.expand(["c"], 5, [DEP], direction="out") == {"c": 0, "d": 1}
    assert g.expand(["c"], 5, [DEP], direction="in") == {"c": 0, "b": 1, "a": 2}
    assert g.expand(["a", "d"], 1, [DEP]) == {"a": 0, "d": 0, "b": 1, "c": 1}
    assert g.expand(["missing"], 3, both) == {}
    assert len(g.expand(["a"], 5, both, limit=3)) == 3


def test_expand_does_not_step_onto_interactions() -> None:
    g = graph_with("a", "b")
    g.add_edge(Edge(S, "inter", "a", EdgeType.DERIVES, 1.0, "inter", "x", 1.0, 1.0))
    g.add_edge(Edge(S, "inter", "b", EdgeType.DERIVES, 1.0, "inter", "x", 1.0, 1.0))
    assert g.expand(["a"], 3, list(EdgeType)) == {"a": 0}
    assert g.is_interaction("inter")


def test_neighbours_both_ways_with_limit() -> None:
    g = chain_graph()
    hood = g.neighbours("b", 1, 10)
    assert hood.hops == {"c": 1, "f": 1, "a": 1}
    assert {(e.src, e.dst) for e in hood.edges} == {("a", "b"), ("b", "c"), ("b", "f")}
    assert not hood.truncated
    hood = g.neighbours("b", 2, 10)
    assert hood.hops == {"c": 1, "f": 1, "a": 1, "d": 2, "e": 2}
    assert len(hood.edges) == 5
    hood = g.neighbours("b", 2, 2)
    assert len(hood.hops) == 2 and hood.truncated
    assert all(e.src in {"b", *hood.hops} and e.dst in {"b", *hood.hops} for e in hood.edges)
    assert g.neighbours("missing", 2, 10).hops == {}
    assert g.neighbours("b", 0, 10).hops == {}


# -- lookups the reference resolver uses ----------------------------------------------


def test_prefix_and_key_lookups() -> None:
    g = SessionGraph(S)
    one = concept("3f9c2a10-1111-4111-8111-111111111111", "user schema", key="schema user")
    two = concept("3f9c2a10-2222-4222-8222-222222222222", "User schema", key="schema user")
    three = concept("abcdef01-3333-4333-8333-333333333333", "other")
    for c in (one, two, three):
        g.add_concept(c)
    assert [c.id for c in g.concepts_with_prefix("3f9c2a10")] == [one.id, two.id]
    assert [c.id for c in g.concepts_with_prefix("ABCDEF01")] == [three.id]
    assert g.concepts_with_prefix("3f9c2a1") == []  # not 8 hex
    assert g.concepts_with_prefix("3f9c2a1g") == []
    assert g.concepts_with_prefix("00000000") == []
    assert [c.id for c in g.concepts_with_key("schema user")] == [one.id, two.id]
    assert g.concepts_with_key("nothing") == []
    assert g.concept(three.id) is not None and g.concept("nope") is None
    assert short_id(one.id) == "3f9c2a10"
    g.remove_concept(one.id)
    assert [c.id for c in g.concepts_with_prefix("3f9c2a10")] == [two.id]
    assert [c.id for c in g.concepts_with_key("schema user")] == [two.id]
    g.remove_concept(two.id)
    assert g.concepts_with_prefix("3f9c2a10") == [] and g.concepts_with_key("schema user") == []


def test_replacing_a_concept_reindexes_its_key() -> None:
    g = SessionGraph(S)
    c = concept("abcdef01-3333-4333-8333-333333333333", "a", key="old")
    g.add_concept(c)
    g.add_concept(concept(c.id, "a", key="new"))
    assert g.concepts_with_key("old") == []
    assert [x.id for x in g.concepts_with_key("new")] == [c.id]
    assert len(g) == 1


def test_interactions_seen_on_concepts_edges_and_added() -> None:
    g = SessionGraph(S)
    g.add_concept(concept("a", interaction="int-1"))
    g.add_edge(Edge(S, "a", "b", DEP, 1.0, "int-2", "x", 1.0, 1.0))
    g.add_interaction("int-3")
    assert all(g.is_interaction(i) for i in ("int-1", "int-2", "int-3"))
    assert not g.is_interaction("a")


def test_graph_keeps_no_vectors_and_does_not_touch_caller_objects() -> None:
    g = SessionGraph(S)
    c = concept("a")
    g.add_concept(c)
    assert c.vector is not None  # the caller's object is untouched
    held = g.concept("a")
    assert held is not None and held.vector is None
    owned = concept("b")
    g.adopt_concept(owned)
    assert owned.vector is None and g.concept("b") is owned


# -- mutation -------------------------------------------------------------------------


def test_reinforcement_does_not_duplicate_adjacency() -> None:
    g = graph_with("a", "b")
    first = g.add_edge(edge("a", "b", DEP, weight=1.0))
    for _ in range(15):
        again = g.add_edge(Edge(S, "a", "b", DEP, 1.0, "i-other", "other-agent", 9.0, 9.0))
        assert again is first
    assert g.edge_count == 1
    assert len(g.edges_out("a")) == 1 and len(g.edges_in("b")) == 1
    assert g.dependents("b") == ["a"]
    assert first.weight == EDGE_WEIGHT_CAP  # +1 each time, capped
    assert first.interaction_id == "i-1" and first.agent_id == "a" and first.created_at == 1.0
    g.add_edge(edge("a", "b", HIER))  # another type is another edge
    assert g.edge_count == 2


def test_add_edge_copies_the_callers_edge() -> None:
    g = graph_with("a", "b")
    mine = edge("a", "b", DEP)
    g.add_edge(mine)
    g.add_edge(edge("a", "b", DEP))
    assert mine.weight == 1.0


def test_new_edge_weight_is_capped_like_the_store() -> None:
    g = graph_with("a", "b")
    assert g.add_edge(edge("a", "b", EdgeType.SEMANTIC, weight=0.91)).weight == 0.91
    assert g.add_edge(edge("a", "b", EdgeType.SEMANTIC)).weight == pytest.approx(1.91)
    assert g.add_edge(edge("b", "a", DEP, weight=50.0)).weight == EDGE_WEIGHT_CAP


def test_remove_concept_removes_its_edges_both_ways() -> None:
    g = chain_graph()
    before = g.version
    removed = g.remove_concept("b")
    assert removed is not None and removed.id == "b"
    assert g.version > before
    assert "b" not in g and g.concept("b") is None
    assert g.edge_count == 2  # c -> d and e -> a remain
    assert g.edges_out("a") == [] and g.edges_in("c") == []
    assert g.edges_in("f") == []
    assert g.blast_radius("c") == 0 and g.dependents("b") == []
    assert all("b" not in (e.src, e.dst) for e in g.iter_edges())
    assert not g.would_close_cycle("c", "a", [DEP])
    assert g.expand(["a"], 5, list(EdgeType)) == {"a": 0, "e": 1}
    assert g.remove_concept("b") is None


def test_remove_edge_removes_one_edge_both_ways() -> None:
    g = chain_graph()
    g.add_edge(edge("b", "f", DEP))  # same ends as the Semantic edge, another type
    g.add_edge(edge("f", "b", EdgeType.SEMANTIC))  # the other way
    count, before = g.edge_count, g.version
    removed = g.remove_edge("b", "f", EdgeType.SEMANTIC)
    assert removed is not None and (removed.src, removed.dst) == ("b", "f")
    assert removed.edge_type is EdgeType.SEMANTIC
    assert g.edge_count == count - 1 == sum(1 for _ in g.iter_edges())
    assert g.version > before
    assert g.edge("b", "f", EdgeType.SEMANTIC) is None
    assert g.edges_out("b", [EdgeType.SEMANTIC]) == []
    assert [e.src for e in g.edges_in("f", [EdgeType.SEMANTIC])] == []
    # the others stay, and both ends are still concepts
    assert g.edge("b", "f", DEP) is not None and g.edge("f", "b", EdgeType.SEMANTIC) is not None
    assert "b" in g and "f" in g
    assert [e.dst for e in g.edges_out("b")] == ["c", "f"]
    # no empty inner dicts left behind
    assert "b" not in g.adjacency_out(EdgeType.SEMANTIC)
    assert "f" not in g.adjacency_in(EdgeType.SEMANTIC)
    # gone already, or never there: nothing changes
    version = g.version
    assert g.remove_edge("b", "f", EdgeType.SEMANTIC) is None
    assert g.remove_edge("a", "d", DEP) is None
    assert g.remove_edge("missing", "b", DEP) is None
    assert (g.edge_count, g.version) == (count - 1, version)


def test_remove_edge_keeps_the_rest_of_a_nodes_adjacency() -> None:
    g = graph_with("x", "a", "b")
    g.add_edge(edge("a", "x", DEP))
    g.add_edge(edge("b", "x", DEP))
    g.add_edge(edge("x", "a", HIER))
    assert g.remove_edge("a", "x", DEP) is not None
    assert g.dependents("x") == ["b", "a"]  # b cites x, a is still its child
    assert g.adjacency_in(DEP)["x"] == {"b": g.edge("b", "x", DEP)}
    assert g.remove_edge("b", "x", DEP) is not None
    assert "x" not in g.adjacency_in(DEP) and "a" not in g.adjacency_out(DEP)
    assert g.dependents("x") == ["a"]
    assert g.remove_edge("x", "a", HIER) is not None
    assert g.edge_count == 0 and list(g.iter_edges()) == []
    assert g.dependents("x") == [] and g.expand(["x"], 3, list(EdgeType)) == {"x": 0}
    # the same edge can be written again, as new
    g.add_edge(edge("a", "x", DEP, weight=0.4))
    assert g.edge_count == 1 and g.edge("a", "x", DEP) is not None
    assert g.dependents("x") == ["a"]


def test_remove_edge_keeps_a_derives_interaction_known() -> None:
    g = graph_with("a")
    g.add_edge(Edge(S, "call-1", "a", EdgeType.DERIVES, 1.0, "call-1", "a", 1.0, 1.0))
    assert g.remove_edge("call-1", "a", EdgeType.DERIVES) is not None
    assert g.is_interaction("call-1") and g.edge_count == 0


def test_set_status_and_version() -> None:
    g = graph_with("a")
    v = g.version
    g.set_status("a", Status.CANONICAL)
    held = g.concept("a")
    assert held is not None and held.status is Status.CANONICAL
    assert g.version == v + 1


class _FakeStore:
    """Just enough of the Store protocol for SessionGraph.load."""

    def __init__(self, concepts: list[Concept], edges: list[Edge]) -> None:
        self._concepts = concepts
        self._edges = edges

    def concepts(self, session: str) -> list[Concept]:
        return [c for c in self._concepts if c.session == session]

    def edges(self, session: str) -> list[Edge]:
        return [e for e in self._edges if e.session == session]

    def interactions(self, session: str) -> list[object]:
        class _I:
            id = "int-only"

        return [_I()]


def test_load_from_store() -> None:
    cs = [concept(n, interaction="int-1") for n in ("a", "b", "c")]
    es = [edge("a", "b", DEP, 3.0), edge("b", "c", HIER)]
    other = Edge("t", "c", "a", DEP, 1.0, None, "x", 1.0, 1.0)
    g = SessionGraph.load(_FakeStore(cs, [*es, other]), S)  # type: ignore[arg-type]
    assert len(g) == 3 and g.edge_count == 2
    b = g.edge("a", "b", DEP)
    assert b is not None and b.weight == 3.0  # stored weight kept as is
    assert g.blast_radius("b") == 2  # a depends on b, c is b's child
    assert g.is_interaction("int-1") and g.is_interaction("int-only")
    assert all(c.vector is None for c in g.iter_concepts())


@pytest.mark.parametrize("n", [1, 50])
def test_iter_edges_counts(n: int) -> None:
    g = graph_with(*[f"n{i}" for i in range(n + 1)])
    for i in range(n):
        g.add_edge(edge(f"n{i}", f"n{i + 1}", DEP))
    assert len(list(g.iter_edges())) == n == g.edge_count


def test_status_counts_follow_adds_changes_and_removals() -> None:
    from lambo_core.model import Concept, ConceptType, Status

    graph = SessionGraph("s")

    def concept(node: str) -> Concept:
        return Concept(node, "s", node, node, ConceptType.ENTITY, 1.0, 1.0, "a")

    for node in ("a", "b", "c"):
        graph.add_concept(concept(node))
    assert graph.status_count(Status.NONE) == 3
    graph.set_status("a", Status.CANONICAL)
    graph.set_status("b", Status.CANONICAL)
    assert graph.status_count(Status.CANONICAL) == 2
    graph.add_concept(concept("a"))  # replaced: back to its own status
    assert graph.status_count(Status.CANONICAL) == 1
    graph.remove_concept("b")
    assert graph.status_count(Status.CANONICAL) == 0
    assert graph.status_count(Status.NONE) == 2


# -- edge stamps (scoring keeps a concept's edge summary until its stamp moves) --


def test_edge_stamp_moves_for_both_ends_of_a_new_edge_only() -> None:
    g = graph_with("a", "b", "c")
    before = {n: g.edge_stamp(n) for n in "abc"}
    g.add_edge(edge("a", "b", DEP))
    after = {n: g.edge_stamp(n) for n in "abc"}
    assert after["a"] != before["a"] and after["b"] != before["b"]
    assert after["c"] == before["c"]
    g.add_edge(edge("a", "b", DEP))  # a repeat reinforces the weight: the summary holds
    assert {n: g.edge_stamp(n) for n in "abc"} == after


def test_edge_stamp_moves_for_the_peers_of_a_removed_concept_and_on_a_reload() -> None:
    g = graph_with("a", "b", "c")
    g.add_edge(edge("a", "b", DEP))
    b, c = g.edge_stamp("b"), g.edge_stamp("c")
    g.remove_concept("a")
    assert g.edge_stamp("b") != b and g.edge_stamp("c") == c
    g.load_edges([edge("c", "b", HIER)])
    assert g.edge_stamp("c") != c  # a bulk load may touch any concept


def test_edge_stamp_moves_for_both_ends_of_a_removed_edge_only() -> None:
    g = graph_with("a", "b", "c")
    g.add_edge(edge("a", "b", EdgeType.SEMANTIC))
    g.add_edge(edge("b", "c", DEP))
    before = {n: g.edge_stamp(n) for n in "abc"}
    g.remove_edge("a", "b", EdgeType.SEMANTIC)
    after = {n: g.edge_stamp(n) for n in "abc"}
    assert after["a"] != before["a"] and after["b"] != before["b"]
    assert after["c"] == before["c"]
    g.remove_edge("a", "b", EdgeType.SEMANTIC)  # nothing removed: nothing moves
    assert {n: g.edge_stamp(n) for n in "abc"} == after


def test_a_cached_edge_summary_follows_a_removed_edge() -> None:
    from lambo_core.scoring import EdgeView

    g = graph_with("a", "b", "c")
    g.add_edge(edge("a", "b", EdgeType.SEMANTIC))
    g.add_edge(edge("c", "b", DEP))
    view = EdgeView(g)
    assert view.summary("a")[0] == 1 and view.summary("b")[0] == 2  # both summaries cached
    had = view.summary("b")
    g.remove_edge("a", "b", EdgeType.SEMANTIC)
    assert view.summary("a") == EdgeView(g).summary("a")
    assert view.summary("a")[0] == 0  # edgeless now
    assert view.summary("b") == EdgeView(g).summary("b") != had


def test_edge_stamp_moves_when_a_concept_is_replaced() -> None:
    g = graph_with("a")
    before = g.edge_stamp("a")
    g.add_concept(concept("a", content="a", interaction="i-2"))  # its own interaction changed
    assert g.edge_stamp("a") != before
