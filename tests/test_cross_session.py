"""Cross-session references: a write's reference that names a concept only another session
holds is refused with the spec's texts and nothing is written; the asymmetry of
record_action depends_on text (refused only on a write into a layer, when it names the
project's concept); and the two halves the layered serve asks the other sessions with
(``references_of``, ``resolve_refs``).

One real SQLite store holds the project ("lambo") and its layer ("general"); ``write``
does what the layered serve does: ask the other session, then submit with ``foreign``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lambo_core.errors import ReferenceRefused
from lambo_core.model import short_id
from lambo_core.receipts import ReceiptState
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import SqliteStore
from lambo_core.writes import WritePipeline
from lambo_core.writes.cross_session import references_of, resolve_refs

PLAN = EmbedderPlan(lazy=None, contract=None)
WAIT_MS = 30_000
PROJECT_FACT = "the build uses make"
PREFERENCE = "prefers tabs"


@dataclass
class Layered:
    project: WritePipeline
    general: WritePipeline

    def of(self, name: str) -> WritePipeline:
        return self.project if name == "lambo" else self.general

    def foreign_for(self, target: str, tool: str, args: Any) -> dict[str, str]:
        """What the layered serve computes: each reference the other session resolves."""
        refs = references_of(tool, args)
        other = "general" if target == "lambo" else "lambo"
        session = self.of(other).session
        with session.index.lock:
            return {ref: other for ref in resolve_refs(session.index.graph, refs)}

    def write(self, target: str, tool: str, args: Any) -> Any:
        via = "lambo" if target == "general" else None
        foreign = self.foreign_for(target, tool, args)
        return self.of(target).submit(tool, args, via=via, foreign=foreign)

    def node(self, name: str, content: str) -> str:
        (concept,) = self.of(name).session.index.graph.concepts_with_key(content)
        return concept.id


def seed(p: WritePipeline, content: str) -> None:
    ack = p.submit(
        "lambo_derive",
        {"agent_id": "seed", "concepts": [{"content": content, "concept_type": "logic"}]},
    )
    view = p.session.receipts.wait(ack.structured["receipt"], "seed", p.session.name, WAIT_MS)
    assert view.state is ReceiptState.APPLIED, view


@pytest.fixture
def layered(tmp_path: Path) -> Iterator[Layered]:
    store = SqliteStore(tmp_path / "x.db")
    project = WritePipeline(Session.open(store, "lambo", PLAN)).start()
    general = WritePipeline(Session.open(store, "general", PLAN)).start()
    general.session.mark_shared_layer()
    seed(project, PROJECT_FACT)
    seed(general, PREFERENCE)
    yield Layered(project, general)
    project.close()
    general.close()
    store.close()


def derive(content: str, **refs: list[str]) -> dict[str, Any]:
    concept: dict[str, Any] = {"content": content, "concept_type": "logic", **refs}
    return {"agent_id": "agent-a", "concepts": [concept]}


def action(**fields: Any) -> dict[str, Any]:
    return {"agent_id": "agent-a", "action": "ran the release", **fields}


def refused(layered: Layered, target: str, tool: str, args: Any) -> str:
    intents_before = _intents(layered)
    with pytest.raises(ReferenceRefused) as info:
        layered.write(target, tool, args)
    assert _intents(layered) == intents_before  # nothing was written, not even an intent
    return info.value.render()


def _intents(layered: Layered) -> int:
    store = layered.project.session.store
    return len(store.pending_intents("lambo")) + len(store.pending_intents("general"))


def citation(field: str, ref: str, scope: str) -> str:
    return (
        f'reference refused: {field} "{ref}" is in scope "{scope}"; cross-session citations '
        "are not recorded; nothing was written"
    )


def contradiction(field: str, ref: str, scope: str) -> str:
    return (
        f'reference refused: {field} "{ref}" is in scope "{scope}"; cross-session '
        "contradictions are not recorded; nothing was written"
    )


# --- derive depends_on / against -------------------------------------------------------


def test_a_write_into_the_layer_citing_a_project_concept_is_refused(layered: Layered) -> None:
    text = refused(
        layered, "general", "lambo_derive", derive("tabs in make", depends_on=[PROJECT_FACT])
    )
    assert text == citation("concepts[0].depends_on[0]", PROJECT_FACT, "lambo")


def test_an_unscoped_write_citing_a_layer_concept_is_refused(layered: Layered) -> None:
    text = refused(layered, "lambo", "lambo_derive", derive("indent rule", depends_on=[PREFERENCE]))
    assert text == citation("concepts[0].depends_on[0]", PREFERENCE, "general")


@pytest.mark.parametrize("form", ["node_id", "short_id", "upper_node_id"])
def test_every_form_of_a_reference_is_cross_session(layered: Layered, form: str) -> None:
    node = layered.node("general", PREFERENCE)
    ref = {"node_id": node, "short_id": short_id(node), "upper_node_id": node.upper()}[form]
    text = refused(layered, "lambo", "lambo_derive", derive("indent rule", depends_on=[ref]))
    assert text == citation("concepts[0].depends_on[0]", ref, "general")


def test_against_another_sessions_concept_is_a_cross_session_contradiction(
    layered: Layered,
) -> None:
    text = refused(
        layered,
        "lambo",
        "lambo_derive",
        derive("spaces after all", depends_on=[PROJECT_FACT], against=[PREFERENCE]),
    )
    assert text == contradiction("concepts[0].against[0]", PREFERENCE, "general")
    text = refused(
        layered, "general", "lambo_derive", derive("make is slow", against=[PROJECT_FACT])
    )
    assert text == contradiction("concepts[0].against[0]", PROJECT_FACT, "lambo")


def test_a_reference_this_session_holds_too_resolves_here(layered: Layered) -> None:
    seed(layered.project, PREFERENCE)  # the project has its own copy
    ack = layered.write("lambo", "lambo_derive", derive("indent rule", depends_on=[PREFERENCE]))
    view = layered.project.session.receipts.wait(
        ack.structured["receipt"], "agent-a", "lambo", WAIT_MS
    )
    assert view.state is ReceiptState.APPLIED
    assert "1 citation(s) recorded" in view.detail


def test_a_reference_nobody_holds_matches_nothing_as_before(layered: Layered) -> None:
    text = refused(layered, "general", "lambo_derive", derive("x", depends_on=["no such thing"]))
    assert text == (
        'reference refused: concepts[0].depends_on[0] "no such thing" matches nothing in '
        "this session; nothing was written"
    )


def test_the_later_reference_of_a_call_is_named_with_its_field(layered: Layered) -> None:
    seed(layered.general, "prefers dark mode")
    args = {
        "agent_id": "agent-a",
        "concepts": [
            {"content": "a", "concept_type": "logic", "depends_on": ["prefers dark mode"]},
            {"content": "b", "concept_type": "logic", "depends_on": [PREFERENCE, PROJECT_FACT]},
        ],
    }
    text = refused(layered, "general", "lambo_derive", args)
    assert text == citation("concepts[1].depends_on[1]", PROJECT_FACT, "lambo")


# --- record_action against and depends_on ----------------------------------------------


def test_an_actions_against_is_a_cross_session_contradiction(layered: Layered) -> None:
    text = refused(layered, "general", "lambo_record_action", action(against=[PROJECT_FACT]))
    assert text == contradiction("against[0]", PROJECT_FACT, "lambo")


@pytest.mark.parametrize(("target", "holder"), [("lambo", "general"), ("general", "lambo")])
@pytest.mark.parametrize("form", ["node_id", "short_id"])
def test_an_id_only_another_session_holds_is_refused_in_depends_on(
    layered: Layered, target: str, holder: str, form: str
) -> None:
    content = PREFERENCE if holder == "general" else PROJECT_FACT
    node = layered.node(holder, content)
    ref = node if form == "node_id" else short_id(node)
    text = refused(layered, target, "lambo_record_action", action(depends_on=[ref]))
    assert text == citation("depends_on[0]", ref, holder)


def test_text_naming_a_project_concept_is_refused_on_a_write_into_the_layer(
    layered: Layered,
) -> None:
    text = refused(
        layered, "general", "lambo_record_action", action(depends_on=["x", PROJECT_FACT])
    )
    assert text == citation("depends_on[1]", PROJECT_FACT, "lambo")


def test_text_naming_only_a_layer_concept_is_created_in_the_project(layered: Layered) -> None:
    # Q16: the unscoped direction creates it in the project, as before 0.6.0.
    ack = layered.write("lambo", "lambo_record_action", action(depends_on=[PREFERENCE]))
    view = layered.project.session.receipts.wait(
        ack.structured["receipt"], "agent-a", "lambo", WAIT_MS
    )
    assert view.state is ReceiptState.APPLIED, view
    assert len(layered.project.session.index.graph.concepts_with_key(PREFERENCE)) == 1
    assert len(layered.general.session.index.graph.concepts_with_key(PREFERENCE)) == 1


def test_text_another_layer_holds_is_created_in_this_layer(layered: Layered) -> None:
    # Only the session the write came through is "the caller's own session" (L416).
    args = action(depends_on=["team convention"])
    ack = layered.general.submit(
        "lambo_record_action", args, via="lambo", foreign={"team convention": "team"}
    )
    assert ack.structured["receipt_state"] == "pending"


def test_an_id_of_another_layer_is_refused_naming_that_layer(layered: Layered) -> None:
    ref = "0123abcd-0000-4000-8000-000000000000"
    with pytest.raises(ReferenceRefused) as info:
        layered.general.submit(
            "lambo_record_action", action(depends_on=[ref]), via="lambo", foreign={ref: "team"}
        )
    assert info.value.render() == citation("depends_on[0]", ref, "team")


def test_produces_and_modifies_are_not_references(layered: Layered) -> None:
    ack = layered.write(
        "general", "lambo_record_action", action(produces=[PROJECT_FACT], modifies=["b"])
    )
    assert ack.structured["receipt_state"] == "pending"


def test_a_depends_on_entry_the_call_itself_places_is_not_cross_session(
    layered: Layered,
) -> None:
    args = action(produces=[PROJECT_FACT], depends_on=[PROJECT_FACT])
    ack = layered.general.submit(
        "lambo_record_action", args, via="lambo", foreign={PROJECT_FACT: "lambo"}
    )
    assert ack.structured["receipt_state"] == "pending"


def test_foreign_keys_are_read_as_admission_reads_references(layered: Layered) -> None:
    decomposed = unicodedata.normalize("NFD", "café rule")
    composed = unicodedata.normalize("NFC", "café rule")
    assert decomposed != composed
    with pytest.raises(ReferenceRefused) as info:
        layered.general.submit(
            "lambo_derive", derive("x", depends_on=[composed]), foreign={decomposed: "lambo"}
        )
    assert info.value.render() == citation("concepts[0].depends_on[0]", composed, "lambo")


def test_malformed_foreign_entries_are_ignored(layered: Layered) -> None:
    foreign: Any = {"": "lambo", 7: "lambo", "no such thing": 3}
    with pytest.raises(ReferenceRefused) as info:
        layered.general.submit(
            "lambo_derive", derive("x", depends_on=["no such thing"]), foreign=foreign
        )
    assert "matches nothing in this session" in info.value.render()


# --- references_of -----------------------------------------------------------------------


def test_references_of_a_derive_lists_each_once_in_call_order() -> None:
    args = {
        "concepts": [
            {"content": "a", "depends_on": ["x", "y"], "against": ["z"]},
            {"content": "b", "depends_on": ["x", "w"]},
        ]
    }
    assert references_of("lambo_derive", args) == [
        {"ref": "x", "kind": "reference"},
        {"ref": "y", "kind": "reference"},
        {"ref": "w", "kind": "reference"},
        {"ref": "z", "kind": "reference"},
    ]


def test_references_of_an_action_tells_ids_from_text() -> None:
    node = "0123abcd-0000-4000-8000-000000000000"
    args = {"depends_on": [node, "0123abcd", "make", "0123abcd9"], "against": ["old rule"]}
    assert references_of("lambo_record_action", args) == [
        {"ref": node, "kind": "id"},
        {"ref": "0123abcd", "kind": "id"},
        {"ref": "make", "kind": "text"},
        {"ref": "0123abcd9", "kind": "text"},  # 9 hex characters are text (L416)
        {"ref": "old rule", "kind": "reference"},
    ]


@pytest.mark.parametrize(
    "args",
    [
        None,
        "text",
        [],
        {"concepts": "x"},
        {"concepts": [None, 3, "c", {"depends_on": "x"}, {"depends_on": [None, 4, "", " "]}]},
        {"concepts": [{"depends_on": ["bad\u0000ref"]}]},
        {"concepts": [{"depends_on": ["x" * (16 * 1024 + 1)]}]},
    ],
)
def test_references_of_malformed_arguments_is_empty_and_never_raises(args: Any) -> None:
    assert references_of("lambo_derive", args) == []
    assert references_of("lambo_record_action", args) == []


def test_references_of_other_tools_is_empty() -> None:
    assert references_of("lambo_recall", {"query": "x", "depends_on": ["x"]}) == []


def test_references_of_stops_at_the_per_call_limits() -> None:
    # Admission refuses a call past them before it resolves any reference.
    many = [f"r{i}" for i in range(9)]
    assert len(references_of("lambo_derive", {"concepts": [{"depends_on": many}]})) == 8
    five = [{"depends_on": [f"c{j}r{i}" for i in range(8)]} for j in range(5)]
    assert len(references_of("lambo_derive", {"concepts": five})) == 32
    deps = [f"d{i}" for i in range(70)]
    against = [f"a{i}" for i in range(10)]
    got = references_of("lambo_record_action", {"depends_on": deps, "against": against})
    assert len(got) == 64 + 8


def test_references_of_normalizes_as_admission_does() -> None:
    decomposed = unicodedata.normalize("NFD", "café")
    (got,) = references_of("lambo_derive", {"concepts": [{"depends_on": [decomposed]}]})
    assert got["ref"] == unicodedata.normalize("NFC", "café")


# --- resolve_refs --------------------------------------------------------------------------


def test_resolve_refs_answers_what_names_exactly_one_concept(layered: Layered) -> None:
    seed(layered.general, "Prefers Dark")
    seed(layered.general, "prefers dark")  # two that differ only in case
    graph = layered.general.session.index.graph
    node = layered.node("general", PREFERENCE)
    refs = [
        {"ref": PREFERENCE, "kind": "reference"},
        {"ref": node, "kind": "id"},
        {"ref": short_id(node), "kind": "id"},
        {"ref": "PREFERS TABS", "kind": "text"},  # one concept in any case
        {"ref": "PREFERS DARK", "kind": "text"},  # several in any case: not exactly one
        {"ref": "nothing", "kind": "text"},
        {"ref": PROJECT_FACT, "kind": "reference"},  # the project's, not the layer's
    ]
    with layered.general.session.index.lock:
        found = resolve_refs(graph, refs)
    assert found == [PREFERENCE, node, short_id(node), "PREFERS TABS"]


def test_resolve_refs_skips_malformed_entries(layered: Layered) -> None:
    graph = layered.general.session.index.graph
    refs: Any = [
        None,
        "prefers tabs",
        {"ref": PREFERENCE},
        {"ref": PREFERENCE, "kind": "other"},
        {"ref": 5, "kind": "text"},
        {"ref": PREFERENCE, "kind": "text"},
        {"ref": PREFERENCE, "kind": "reference"},  # once
    ]
    assert resolve_refs(graph, refs) == [PREFERENCE]
    assert resolve_refs(graph, "x") == []
    assert resolve_refs(graph, None) == []


def test_an_interactions_id_is_not_found(layered: Layered) -> None:
    graph = layered.general.session.index.graph
    concept = graph.concepts_with_key(PREFERENCE)[0]
    assert concept.interaction_id is not None
    assert resolve_refs(graph, [{"ref": concept.interaction_id, "kind": "id"}]) == []
