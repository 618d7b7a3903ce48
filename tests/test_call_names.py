"""One text names one concept in one call, whatever the case (#15 review).

parent_of ends and record_action's produces / modifies / depends_on read a text as
references do: as written first, else the one concept in any case, and several in any
case (none written exactly so) are refused with each listed. The call's own concepts are
in view, so a reference and an end in another case name what the call itself writes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from lambo_core.admission import admit_action, admit_derive
from lambo_core.errors import ReferenceRefused
from lambo_core.index.graph import SessionGraph
from lambo_core.model import Concept, ConceptType, EdgeType, new_id, short_id
from lambo_core.receipts import ReceiptState
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import MemoryStore
from lambo_core.text import canonical_key
from lambo_core.writes import WritePipeline

S = "s"


def concept(graph: SessionGraph, content: str, at: float = 1.0) -> Concept:
    c = Concept(
        id=new_id(),
        session=S,
        content=content,
        canonical_key=canonical_key(content),
        concept_type=ConceptType.ENTITY,
        created_at=at,
        about_time=at,
        agent_id="a",
        interaction_id=new_id(),
    )
    graph.add_concept(c)
    return c


def c(content: str, ctype: str = "logic", **kw: Any) -> dict[str, Any]:
    return {"content": content, "concept_type": ctype, **kw}


def derive_call(graph: SessionGraph, *concepts: dict[str, Any], **kw: Any) -> Any:
    args = {"agent_id": "a", "concepts": list(concepts), **kw}
    return admit_derive(args, session=S, graph=graph, embeds=False)


def action_call(graph: SessionGraph, **kw: Any) -> Any:
    return admit_action({"agent_id": "a", "action": "ran it", **kw}, session=S, graph=graph)


def refusal(fn: Any, *args: Any, **kw: Any) -> str:
    with pytest.raises(ReferenceRefused) as info:
        fn(*args, **kw)
    return info.value.render()


@pytest.fixture
def twins() -> tuple[SessionGraph, Concept, Concept]:
    graph = SessionGraph(S)
    return graph, concept(graph, "User Schema"), concept(graph, "USER SCHEMA", at=2.0)


def listing(*cs: Concept) -> str:
    return ", ".join(f'{short_id(x.id)} "{x.content}"' for x in cs)


# --- admission: several in any case, none as written ---------------------------------


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"parent_of": [{"parent": "user schema", "child": "auth"}]}, "parent_of[0].parent"),
        ({"parent_of": [{"parent": "auth", "child": "user schema"}]}, "parent_of[0].child"),
    ],
)
def test_a_parent_of_end_in_several_cases_is_refused_with_both_listed(
    twins: tuple[SessionGraph, Concept, Concept], kw: dict[str, Any], field: str
) -> None:
    graph, upper, shout = twins
    assert refusal(derive_call, graph, c("auth"), **kw) == (
        f'reference refused: {field} "user schema" matches several that differ only in case: '
        f"{listing(upper, shout)}; write it exactly as one is written; nothing was written"
    )


@pytest.mark.parametrize("field", ["produces", "modifies"])
def test_an_action_target_in_several_cases_is_refused(
    twins: tuple[SessionGraph, Concept, Concept], field: str
) -> None:
    graph, upper, shout = twins
    assert refusal(action_call, graph, **{field: ["user schema"]}) == (
        f'reference refused: {field}[0] "user schema" matches several that differ only in '
        f"case: {listing(upper, shout)}; write it exactly as one is written; nothing was written"
    )


def test_an_action_dependency_in_several_cases_is_refused_and_may_name_an_id(
    twins: tuple[SessionGraph, Concept, Concept],
) -> None:
    graph, upper, shout = twins
    assert refusal(action_call, graph, depends_on=["user schema"]) == (
        'reference refused: depends_on[0] "user schema" matches several that differ only in '
        f"case: {listing(upper, shout)}; name one by its id or write it exactly as one is "
        "written; nothing was written"
    )
    # Named by id, or as written, it is that one.
    got = action_call(graph, depends_on=[short_id(shout.id), "User Schema"])
    assert [d["node_id"] for d in got.payload["depends_on"]] == [shout.id, upper.id]


def test_text_as_written_wins_over_its_case_twins(
    twins: tuple[SessionGraph, Concept, Concept],
) -> None:
    graph, upper, _ = twins
    derive_call(graph, c("auth"), parent_of=[{"parent": "USER SCHEMA", "child": "auth"}])
    got = action_call(graph, produces=["User Schema"], depends_on=["User Schema"])
    assert got.payload["depends_on"][0]["node_id"] == upper.id


def test_a_new_concept_of_the_call_is_a_candidate_too() -> None:
    graph = SessionGraph(S)
    upper = concept(graph, "User Schema")
    # The call writes "USER SCHEMA" (another concept: keys keep case); "user schema" names
    # both it and the session's "User Schema".
    text = refusal(
        derive_call,
        graph,
        c("USER SCHEMA", "entity"),
        parent_of=[{"parent": "user schema", "child": "USER SCHEMA"}],
    )
    assert text == (
        'reference refused: parent_of[0].parent "user schema" matches several that differ '
        f'only in case: {listing(upper)}, new in this call "USER SCHEMA"; write it exactly '
        "as one is written; nothing was written"
    )
    text = refusal(derive_call, graph, c("USER SCHEMA"), c("x", depends_on=["user schema"]))
    assert text == (
        'reference refused: concepts[1].depends_on[0] "user schema" matches several that '
        f'differ only in case: {listing(upper)}, new in this call "USER SCHEMA"; name one by '
        "its id or write it exactly as one is written; nothing was written"
    )


def test_a_reference_written_as_a_concept_the_call_creates_names_that_concept() -> None:
    graph = SessionGraph(S)
    concept(graph, "User Schema")
    # "user schema" as written is this call's new concept, which cannot be cited; it does
    # not fall back to the session's "User Schema" while the call creates "user schema".
    text = refusal(derive_call, graph, c("user schema"), c("x", depends_on=["user schema"]))
    assert text == (
        'reference refused: concepts[1].depends_on[0] "user schema" matches nothing in this '
        "session; nothing was written"
    )
    # Alone, the same reference names "User Schema".
    got = derive_call(graph, c("x", depends_on=["user schema"]))
    assert got.payload["concepts"][0]["depends_on"][0]["ref"] == "user schema"


def test_a_concept_citing_itself_in_another_case_is_refused() -> None:
    graph = SessionGraph(S)
    concept(graph, "User Schema")
    text = refusal(derive_call, graph, c("User Schema", depends_on=["user schema"]))
    assert text == (
        'reference refused: concepts[0].depends_on[0] "user schema" names the concept itself; '
        "nothing was written"
    )


def test_an_action_dependency_in_another_case_names_the_calls_target() -> None:
    graph = SessionGraph(S)
    # depends_on "report.md" names the "Report.md" the action produces: one node, so the
    # Causal and Dependency edges go to one target and nothing loops.
    got = action_call(graph, produces=["Report.md"], depends_on=["report.md"])
    assert got.payload["depends_on"] == [
        {"ref": "report.md", "node_id": None, "key": "report.md", "type": "entity"}
    ]


# --- applied: one concept per text, whatever the case ---------------------------------


@pytest.fixture
def pipeline() -> Iterator[WritePipeline]:
    p = WritePipeline(
        Session.open(MemoryStore(), S, EmbedderPlan(lazy=None, contract=None))
    ).start()
    yield p
    p.close()


def submit(p: WritePipeline, tool: str, **args: Any) -> Any:
    return p.submit(tool, {"agent_id": "a", **args})


def settled(p: WritePipeline, ack: Any) -> Any:
    view = p.session.receipts.wait(ack.structured["receipt"], "a", S, 30_000)
    assert view.state is not ReceiptState.PENDING
    return view


def only(p: WritePipeline, content: str) -> str:
    found = p.session.index.graph.concepts_with_key(content)
    assert len(found) == 1, content
    return found[0].id


def contents(p: WritePipeline) -> list[str]:
    return sorted(x.content for x in p.session.index.graph.iter_concepts())


@pytest.mark.parametrize(("stored", "written"), [("User Schema", "user schema"), ("api", "API")])
def test_citation_parent_of_and_action_targets_name_one_concept(
    pipeline: WritePipeline, stored: str, written: str
) -> None:
    settled(pipeline, submit(pipeline, "lambo_derive", concepts=[c(stored, "entity")]))
    view = settled(
        pipeline,
        submit(
            pipeline,
            "lambo_derive",
            concepts=[c("auth reads accounts", depends_on=[written])],
            parent_of=[{"parent": written, "child": "auth reads accounts"}],
        ),
    )
    assert view.detail == (
        "derived 2 concept(s): 1 created (0 embedded), 1 matched existing; 1 citation(s) recorded"
    )
    view = settled(
        pipeline,
        submit(
            pipeline,
            "lambo_record_action",
            action="migrated tables",
            produces=[written],
            modifies=[written.upper()],
            depends_on=[written],
        ),
    )
    assert view.state is ReceiptState.APPLIED
    assert contents(pipeline) == sorted([stored, "auth reads accounts", "migrated tables"])
    graph = pipeline.session.index.graph
    target, auth = only(pipeline, stored), only(pipeline, "auth reads accounts")
    act = view.data["action_node"]
    assert graph.edge(auth, target, EdgeType.DEPENDENCY) is not None
    assert graph.edge(target, auth, EdgeType.HIERARCHICAL) is not None
    for etype in (EdgeType.PRODUCES, EdgeType.MODIFIES, EdgeType.DEPENDENCY):
        assert graph.edge(act, target, etype) is not None
    assert graph.blast_radius(target) == 2  # auth (cites it, is its child) and the action


def test_an_end_in_another_case_names_the_calls_own_concept(pipeline: WritePipeline) -> None:
    view = settled(
        pipeline,
        submit(
            pipeline,
            "lambo_derive",
            concepts=[c("User Schema", "entity")],
            parent_of=[
                {"parent": "user schema", "child": "email column"},
                {"parent": "EMAIL COLUMN", "child": "unique index"},
            ],
        ),
    )
    assert view.data["created_count"] == 3
    assert contents(pipeline) == ["User Schema", "email column", "unique index"]
    graph = pipeline.session.index.graph
    schema, email = only(pipeline, "User Schema"), only(pipeline, "email column")
    assert graph.edge(schema, email, EdgeType.HIERARCHICAL) is not None
    assert graph.edge(email, only(pipeline, "unique index"), EdgeType.HIERARCHICAL) is not None


def test_an_end_made_ambiguous_before_it_is_applied_fails_on_the_receipt(
    pipeline: WritePipeline,
) -> None:
    settled(pipeline, submit(pipeline, "lambo_derive", concepts=[c("User Schema", "entity")]))
    # Both admitted while "User Schema" is the only one in any case; the first then writes
    # "USER SCHEMA", so by the time the second is applied its end names two.
    with pipeline.session.index.lock:
        first = submit(pipeline, "lambo_derive", concepts=[c("USER SCHEMA", "entity")])
        second = submit(
            pipeline,
            "lambo_derive",
            concepts=[c("auth", "entity")],
            parent_of=[{"parent": "user schema", "child": "auth"}],
        )
    assert settled(pipeline, first).state is ReceiptState.APPLIED
    view = settled(pipeline, second)
    assert view.state is ReceiptState.FAILED
    assert 'parent_of[0].parent "user schema" matches several that differ only in case' in (
        view.detail
    )
    assert view.detail.endswith("nothing was written")
    assert contents(pipeline) == ["USER SCHEMA", "User Schema"]
