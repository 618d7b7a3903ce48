"""Keys keep case (#15): who reads a key exactly and who reads it case-blind.

A canonical key keeps case, so texts differing only in case are two concepts. A reference
names the text as written first, else the text in any case (several when two concepts
differ only in case); an inspect focus does the same, and its substring leg ignores case; a
dependency question names a concept "ignoring case after NFC" (spec, Dependency questions).
"""

from __future__ import annotations

import uuid

from lambo_core.index.graph import SessionGraph
from lambo_core.inspect import resolve_focus
from lambo_core.model import Concept, ConceptType, Edge, EdgeType
from lambo_core.recall.dependency import find_dependency_anchor
from lambo_core.references import match_reference
from lambo_core.text import canonical_key, fold_case

S = "s"


def add(graph: SessionGraph, content: str, at: float = 1.0) -> str:
    node_id = str(uuid.uuid4())
    graph.add_concept(
        Concept(node_id, S, content, canonical_key(content), ConceptType.ENTITY, at, at, "a")
    )
    return node_id


def depends(graph: SessionGraph, src: str, dst: str) -> None:
    graph.add_edge(Edge(S, src, dst, EdgeType.DEPENDENCY, 1.0, "i-1", "a", 1.0, 1.0))


def test_the_graph_finds_a_key_exactly_and_case_folded() -> None:
    graph = SessionGraph(S)
    upper, lower = add(graph, "Case Test"), add(graph, "case test", 2.0)
    assert [c.id for c in graph.concepts_with_key("Case Test")] == [upper]
    assert [c.id for c in graph.concepts_with_key("case test")] == [lower]
    assert [c.id for c in graph.concepts_with_folded_key("case test")] == [upper, lower]
    graph.remove_concept(upper)
    assert [c.id for c in graph.concepts_with_folded_key(fold_case("CASE TEST"))] == [lower]


def test_a_reference_prefers_the_text_as_written() -> None:
    graph = SessionGraph(S)
    upper = add(graph, "Case Test")
    assert [c.id for c in match_reference("case  test", graph).concepts] == [upper]
    lower = add(graph, "case test", 2.0)
    assert [c.id for c in match_reference("case test", graph).concepts] == [lower]
    assert [c.id for c in match_reference("Case Test", graph).concepts] == [upper]
    assert [c.id for c in match_reference("CASE TEST", graph).concepts] == [upper, lower]


def test_an_inspect_focus_in_another_case_still_resolves() -> None:
    graph = SessionGraph(S)
    schema = add(graph, "user schema")
    add(graph, "the user schema v2", 2.0)
    found = resolve_focus(graph, "USER SCHEMA")
    assert [c.id for c in found.matches] == [schema] and found.how == "content"
    by_part = resolve_focus(graph, "SCHEMA V2")
    assert by_part.how == "substring" and [c.content for c in by_part.matches] == [
        "the user schema v2"
    ]


def test_a_dependency_question_names_a_concept_in_any_case() -> None:
    graph = SessionGraph(S)
    schema = add(graph, "User Schema")
    depends(graph, add(graph, "auth middleware"), schema)
    found = find_dependency_anchor(graph, "what depends on user schema")
    assert found is not None and found.node_id == schema
    group = add(graph, "SG-Base")
    depends(graph, add(graph, "vpc peering"), group)
    depends(graph, add(graph, "nat rule"), group)
    found = find_dependency_anchor(graph, "what depends on the security group")
    assert found is not None and found.node_id == group  # an sg- id, found case-blind
