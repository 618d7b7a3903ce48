"""Admission of lambo_derive and lambo_record_action: every write limit and refusal."""

from __future__ import annotations

from typing import Any

import pytest

from lambo_core.admission import admit_action, admit_derive
from lambo_core.errors import LamboError, ParameterError, ReferenceRefused, StoreError
from lambo_core.index.graph import SessionGraph
from lambo_core.model import Concept, ConceptType, Edge, EdgeType, new_id
from lambo_core.text import canonical_key

S = "s"


def concept(graph: SessionGraph, content: str, ctype: ConceptType = ConceptType.ENTITY) -> Concept:
    c = Concept(
        id=new_id(),
        session=S,
        content=content,
        canonical_key=canonical_key(content),
        concept_type=ctype,
        created_at=1.0,
        about_time=1.0,
        agent_id="a",
        interaction_id=new_id(),
    )
    graph.add_concept(c)
    return c


def edge(graph: SessionGraph, src: Concept, dst: Concept, etype: EdgeType) -> None:
    graph.add_edge(Edge(S, src.id, dst.id, etype, 1.0, None, "a", 1.0, 1.0))


def derive(graph: SessionGraph, embeds: bool = True, **args: Any) -> Any:
    call = {"agent_id": "agent-a", **args}
    return admit_derive(call, session=S, graph=graph, embeds=embeds)


def refused(kind: type[LamboError], fn: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(kind) as info:
        fn(*args, **kwargs)
    return info.value.render()


def one(content: str = "user schema", ctype: str = "entity", **extra: Any) -> list[dict[str, Any]]:
    return [{"content": content, "concept_type": ctype, **extra}]


@pytest.fixture
def graph() -> SessionGraph:
    return SessionGraph(S)


def test_plain_derive_is_admitted(graph: SessionGraph) -> None:
    got = derive(graph, concepts=one(), event_time="2024-06-12T14:30:00Z")
    assert got.summary == (
        "accepted 1 concept(s) for background write; validated and ordered, not yet applied"
    )
    assert got.agent_id == "agent-a"
    assert got.payload["concepts"][0]["type"] == "entity"
    assert got.payload["event_time"] == 1718202600.0


def test_missing_and_unknown_arguments(graph: SessionGraph) -> None:
    assert (
        refused(
            ParameterError, admit_derive, {"concepts": one()}, session=S, graph=graph, embeds=True
        )
        == "agent_id is required"
    )
    assert refused(ParameterError, derive, graph) == "concepts is required"
    text = refused(ParameterError, derive, graph, concepts=one(), concpets=[])
    assert text.startswith("concpets is not an argument of lambo_derive")
    text = refused(ParameterError, derive, graph, concepts=one(kind="x"))
    assert text.startswith("concepts[0].kind is not an argument")
    text = refused(ParameterError, derive, graph, concepts=one(), created_at="2024-01-01T00:00:00Z")
    assert text.startswith("created_at is refused")
    assert refused(ParameterError, derive, graph, concepts=[]) == (
        "concepts must hold at least one concept"
    )


def test_concept_type_is_lower_case_on_the_wire(graph: SessionGraph) -> None:
    text = refused(ParameterError, derive, graph, concepts=one(ctype="Entity"))
    assert text.endswith(
        "unknown variant Entity, expected one of entity, logic, constraint, resource, observation"
    )
    assert text.startswith("concepts[0].concept_type")


def test_concepts_limit_at_and_past_bound(graph: SessionGraph) -> None:
    ok = [{"content": f"fact {i}", "concept_type": "logic"} for i in range(64)]
    assert len(derive(graph, embeds=False, concepts=ok).payload["concepts"]) == 64
    text = refused(ParameterError, derive, graph, embeds=False, concepts=[*ok, ok[0]])
    assert text == "concepts has 65 concepts; at most 64 are accepted"


def test_parent_of_limits(graph: SessionGraph) -> None:
    pairs = [{"parent": f"p{i}", "child": f"c{i}"} for i in range(256)]
    assert len(derive(graph, concepts=one(), parent_of=pairs).payload["parent_of"]) == 256
    text = refused(ParameterError, derive, graph, concepts=one(), parent_of=[*pairs, pairs[0]])
    assert text == "parent_of has 257 pairs; at most 256 are accepted"
    many = [{"content": f"fact {i}", "concept_type": "logic"} for i in range(64)]
    # 64 concepts + 256 pairs = 320 <= 512: the combined bound is not reached by these caps.
    assert derive(graph, embeds=False, concepts=many, parent_of=pairs)
    assert (
        refused(ParameterError, derive, graph, concepts=one(), parent_of=[{"parent": "x"}])
        == "parent_of[0].child is required"
    )


def test_depends_on_limits(graph: SessionGraph) -> None:
    targets = [concept(graph, f"ruling {i}") for i in range(40)]
    refs8 = [t.content for t in targets[:8]]
    got = derive(graph, concepts=one(depends_on=refs8))
    assert len(got.payload["concepts"][0]["depends_on"]) == 8
    text = refused(ParameterError, derive, graph, concepts=one(depends_on=[*refs8, "ruling 9"]))
    assert text == "concepts[0].depends_on has 9 references; at most 8 are accepted"
    per_call = [
        {"content": f"fact {i}", "concept_type": "logic", "depends_on": refs8} for i in range(4)
    ]
    assert derive(graph, concepts=per_call)
    text = refused(
        ParameterError,
        derive,
        graph,
        concepts=[*per_call, {"content": "x", "concept_type": "logic", "depends_on": ["ruling 0"]}],
    )
    assert "depends_on holds 33 references across the call" in text
    against = [
        {"content": f"fact {i}", "concept_type": "logic", "against": refs8} for i in range(4)
    ]
    assert derive(graph, concepts=against)
    text = refused(
        ParameterError,
        derive,
        graph,
        concepts=[*against, {"content": "x", "concept_type": "logic", "against": ["ruling 0"]}],
    )
    assert "against holds 33 references across the call" in text


def test_references_resolve_and_refuse(graph: SessionGraph) -> None:
    ruling = concept(graph, "flush retries keep the lease")
    got = derive(graph, concepts=one("x", depends_on=[ruling.id[:8]]))
    assert got.payload["concepts"][0]["depends_on"] == [
        {"ref": ruling.id[:8], "node_id": ruling.id}
    ]
    got = derive(graph, concepts=one("x", depends_on=[ruling.id]))
    assert got.payload["concepts"][0]["depends_on"][0]["node_id"] == ruling.id
    got = derive(graph, concepts=one("x", against=["Flush retries keep the lease"]))
    assert got.payload["concepts"][0]["against"][0]["node_id"] == ruling.id

    text = refused(ReferenceRefused, derive, graph, concepts=one(depends_on=["no such thing"]))
    assert text == (
        'reference refused: concepts[0].depends_on[0] "no such thing" matches nothing in this '
        "session; nothing was written"
    )
    interaction = ruling.interaction_id
    assert interaction
    text = refused(ReferenceRefused, derive, graph, concepts=one(depends_on=[interaction]))
    assert "is an interaction's id" in text
    text = refused(
        ReferenceRefused, derive, graph, concepts=one(ruling.content, depends_on=[ruling.id])
    )
    assert "names the concept itself" in text
    text = refused(
        ReferenceRefused,
        derive,
        graph,
        concepts=one("y", depends_on=[ruling.id], against=[ruling.id[:8]]),
    )
    assert "is both cited and contradicted by one concept of the call" in text


def test_short_id_shared_by_several_is_refused_listing_them(graph: SessionGraph) -> None:
    a = concept(graph, "alpha")
    b = Concept(
        **{
            **a.__dict__,
            "id": a.id[:9] + "ffff" + a.id[13:],
            "content": "beta",
            "canonical_key": "beta",
        }
    )
    graph.add_concept(b)
    text = refused(ReferenceRefused, derive, graph, concepts=one(depends_on=[a.id[:8]]))
    assert "matches several" in text and a.id in text and b.id in text


def test_dependency_loop_is_refused(graph: SessionGraph) -> None:
    a = concept(graph, "a")
    b = concept(graph, "b")
    edge(graph, b, a, EdgeType.DEPENDENCY)  # b depends on a
    text = refused(ReferenceRefused, derive, graph, concepts=one("a", "entity", depends_on=["b"]))
    assert "would close a dependency loop" in text


def test_hierarchy_cycle_is_a_store_error(graph: SessionGraph) -> None:
    p = concept(graph, "parent")
    c = concept(graph, "child")
    edge(graph, p, c, EdgeType.HIERARCHICAL)
    text = refused(
        StoreError,
        derive,
        graph,
        concepts=one(),
        parent_of=[{"parent": "child", "child": "parent"}],
    )
    assert text == (
        "store error: parent_of would close a Hierarchical cycle (the hierarchy must stay "
        "acyclic); nothing was written"
    )
    own_loop = [{"parent": "x", "child": "y"}, {"parent": "y", "child": "x"}]
    assert "Hierarchical cycle" in refused(
        StoreError, derive, graph, concepts=one(), parent_of=own_loop
    )
    # An end in another case names the one concept this call placed in any case ("Y" is the
    # call's "y"), as it would in two calls: a loop.
    case_loop = [{"parent": "x", "child": "y"}, {"parent": "Y", "child": "x"}]
    assert "Hierarchical cycle" in refused(
        StoreError, derive, graph, concepts=one(), parent_of=case_loop
    )
    # Keys keep case: with "y" and "Y" both in the session, "Y" is not "y": a chain.
    concept(graph, "y")
    concept(graph, "Y")
    derive(graph, concepts=one(), parent_of=case_loop)


def test_embedding_text_limit(graph: SessionGraph) -> None:
    at_limit = "a" * 8189
    assert derive(graph, concepts=one(at_limit))
    text = refused(ParameterError, derive, graph, concepts=one(at_limit + "a"))
    assert text.startswith("concepts[0].content framed with the call's text is 16385 bytes")
    # A store without vector search embeds nothing: up to the 16 KB string cap.
    assert derive(graph, embeds=False, concepts=one("a" * 16384))
    two = [{"content": "b" * 8000, "concept_type": "logic"}] * 3
    text = refused(ParameterError, derive, graph, concepts=two)
    assert text.startswith("the whole call's text")
    pair = [{"parent": "p" * 16370, "child": "c"}]
    text = refused(ParameterError, derive, graph, concepts=one(), parent_of=pair)
    assert text.startswith("parent_of[0].parent framed with the call's text")


def test_image_suffix_and_scope(graph: SessionGraph) -> None:
    text = refused(ParameterError, derive, graph, concepts=one("see [IMAGE:R17]"))
    assert text.startswith("concepts[0].content may not contain an image suffix")
    assert derive(graph, concepts=one("see [image: diagram]"))
    assert derive(graph, concepts=one(), scope=S)
    text = refused(ParameterError, derive, graph, concepts=one(), scope="general")
    assert text == "scope must name this session or one of its layers: s"
    # repo_scope is accepted now; its own refusals are in tests/test_repo_scope_writes.py
    scoped = derive(graph, concepts=one(), repo_scope=" github.com/a/b ")
    assert scoped.payload["kind"] == "repo_scoped"
    assert scoped.payload["repo_scope"] == "github.com/a/b"
    text = refused(ParameterError, derive, graph, concepts=one(), repo_scope=" ")
    assert text == "repo_scope must not be empty or whitespace; nothing was written"


def test_string_rules_apply_to_every_field(graph: SessionGraph) -> None:
    text = refused(ParameterError, derive, graph, concepts=one("evil\u202e"))
    assert "U+202E" in text and "\u202e" not in text
    text = refused(ParameterError, derive, graph, concepts=one(depends_on=["x\x1b[31m"]))
    assert text.startswith("concepts[0].depends_on[0] contains a disallowed control character")
    text = refused(ParameterError, derive, graph, concepts=one("a" * 16385), embeds=False)
    assert text == "concepts[0].content is 16385 bytes; the cap is 16384 bytes"
    text = refused(ParameterError, derive, graph, concepts=one(), event_time="yesterday")
    assert text == "event_time must be an RFC3339 timestamp such as 2024-06-12T14:30:00Z"
    text = refused(
        ParameterError,
        admit_derive,
        {"agent_id": "a\nb", "concepts": one()},
        session=S,
        graph=graph,
        embeds=True,
    )
    assert text.startswith("agent_id must be one line")


# --- record_action ------------------------------------------------------------


def action(graph: SessionGraph, **args: Any) -> Any:
    return admit_action({"agent_id": "agent-a", **args}, session=S, graph=graph)


def test_action_is_admitted(graph: SessionGraph) -> None:
    schema = concept(graph, "user schema")
    got = action(
        graph,
        action="created migrations/003.sql",
        produces=["migrations/003.sql"],
        depends_on=["user schema", "brand new thing"],
    )
    assert got.summary == (
        "accepted action 'created migrations/003.sql' for background write; validated and "
        "ordered, not yet applied"
    )
    deps = got.payload["depends_on"]
    assert deps[0]["node_id"] == schema.id
    assert deps[1]["node_id"] is None and deps[1]["type"] == "entity"


def test_action_targets_limit(graph: SessionGraph) -> None:
    ok = {"produces": [f"p{i}" for i in range(30)], "modifies": [f"m{i}" for i in range(34)]}
    assert action(graph, action="x", **ok)
    text = refused(ParameterError, action, graph, action="x", depends_on=["d"], **ok)
    assert "at most 64 are accepted" in text
    against = [concept(graph, f"belief {i}").content for i in range(9)]
    assert action(graph, action="x", against=against[:8])
    text = refused(ParameterError, action, graph, action="x", against=against)
    assert text == "against has 9 references; at most 8 are accepted"


def test_action_references(graph: SessionGraph) -> None:
    belief = concept(graph, "brand y chargers are fine")
    got = action(graph, action="refunded: the charger overheated", against=[belief.id[:8]])
    assert got.payload["against"][0]["node_id"] == belief.id
    text = refused(ReferenceRefused, action, graph, action="x", against=["unknown"])
    assert "matches nothing" in text
    text = refused(
        ReferenceRefused, action, graph, action="x", depends_on=[belief.id], against=[belief.id]
    )
    assert "is both cited and contradicted by the action" in text
    assert belief.interaction_id
    text = refused(ReferenceRefused, action, graph, action="x", depends_on=[belief.interaction_id])
    assert "is an interaction's id" in text
    unknown_uuid = new_id()
    got = action(graph, action="x", depends_on=[unknown_uuid])
    assert got.payload["depends_on"][0]["node_id"] is None  # text, created if new


def test_action_cycle_is_a_store_error(graph: SessionGraph) -> None:
    act = concept(graph, "deployed", ConceptType.RESOURCE)
    out = concept(graph, "build.log", ConceptType.RESOURCE)
    edge(graph, out, act, EdgeType.PRODUCES)
    text = refused(StoreError, action, graph, action="deployed", depends_on=["build.log"])
    assert text == (
        "store error: record_action would close a Causal or Dependency cycle (produces, "
        "modifies and depends_on must stay acyclic); nothing was written"
    )
