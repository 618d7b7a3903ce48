"""Annotations and fusion on recall hits: which line of a hit is which kind, and how the
legs ranked it (spec: lambo_recall, the annotation kinds; "With --ledger ... fusion").

Neither enters structuredContent; ``RecallResult.annotated_hits`` carries both, for the
portal's /api/recall and the --ledger recall line, and a layer's parts carry them over JSON.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from lambo_core.canon.history import SupersededLine
from lambo_core.recall import RecallDefaults, recall
from lambo_core.recall.merge import merge_recall
from lambo_core.recall.parts import PartsError, RecallParts
from lambo_core.recall.pipeline import finish, recall_parts
from tests.test_recall import (
    REPLACED,
    SCHEMA,
    SPEC_RANKING,
    T0,
    T_AGAINST,
    Mem,
    contradicted_schema,
    nid,
)
from tests.test_recall_lines import LINE_ON, SUPERSEDED, ask, port_pair
from tests.test_recall_merge import _session_with_contradiction

CONTRADICTED = (
    '⚠ Contradicted at 2026-08-10T10:28:00Z by agent-c: "accounts replaced the users '
    'table" (id 8c41d0e2)'
)
CONTRADICTS = '⚠ Contradicts "user schema" (id f0000000)'


def kinds(result: Any) -> list[list[str]]:
    return [[a["kind"] for a in hit["annotations"]] for hit in result.annotated_hits()]


def test_contradiction_and_contradicts_name_their_lines_and_concepts() -> None:
    session = contradicted_schema().session(at=T_AGAINST + 3600)
    result = ask(session, "user schema", top_k=1, traversal_depth=0)
    hits = result.annotated_hits()
    assert hits[0]["annotations"] == [
        {"kind": "contradiction", "line": CONTRADICTED, "by": REPLACED}
    ]
    assert hits[1]["annotations"] == [
        {"kind": "contradicts", "line": CONTRADICTS, "target": SCHEMA}
    ]
    # every annotation's line is one the client saw in warnings
    assert all(a["line"] in result.warnings for h in hits for a in h["annotations"])
    # structuredContent is unchanged: no annotations, no fusion
    for hit in result.structured()["hits"]:
        assert "annotations" not in hit and "fusion" not in hit
    assert {k: v for k, v in hits[0].items() if k not in ("annotations", "fusion")} == (
        result.hits[0]
    )


def test_a_hit_without_lines_has_an_empty_annotation_list() -> None:
    session = contradicted_schema().session(at=T_AGAINST + 3600)
    result = ask(session, "zz later note", top_k=3, traversal_depth=0)
    assert kinds(result) == [[], [], []]


def rests_on_world() -> Any:
    mem = Mem()
    memo = "82c3dcb0-0000-4000-8000-000000000000"
    fix = "e31def21-0000-4000-8000-000000000000"
    hit = "4bf3835a-0000-4000-8000-000000000000"
    mem.write([(memo, "GET /api/v1/memo (list all)", "entity")], at=T0)
    mem.write([(hit, "list-all returns every memo", "logic")], deps=[(hit, memo)], at=T0 + 1)
    mem.write(
        [(fix, "list-all removed in v0.22; the replacement pages at 10", "observation")],
        against=[(fix, memo)],
        at=T0 + 10,
        agent="agent-c",
    )
    return mem.session(at=T0 + 30), memo, fix


def test_rests_on_contradicted_names_the_cited_concept_and_its_contradiction() -> None:
    session, memo, fix = rests_on_world()
    result = ask(session, "list-all returns every memo", top_k=1, traversal_depth=0)
    (hit,) = result.annotated_hits()
    assert hit["annotations"] == [
        {"kind": "rests_on_contradicted", "line": result.warnings[0], "cited": memo, "by": fix}
    ]


def test_possibly_superseded_names_the_newer_concept_only_where_the_line_shows() -> None:
    session = port_pair().session()
    shown = ask(session, "embedder port 8080", defaults=LINE_ON)
    assert shown.annotated_hits()[0]["annotations"] == [
        {"kind": "possibly_superseded", "line": SUPERSEDED, "by": nid(2)}
    ]
    hidden = ask(session, "embedder port 8080", defaults=RecallDefaults(supersession_line="off"))
    assert kinds(hidden) == [[], []]  # the field stays in structuredContent, no line: no kind
    assert hidden.hits[0]["possibly_superseded_by"] == nid(2)


class _History:
    """A demotion history that says one concept was superseded (the real one is
    test_canon's: its superseding world checks the kind end to end)."""

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id

    def superseded(self, node_id: str) -> Any:
        if node_id != self.node_id:
            return None
        return SupersededLine(node_id, 0.0, nid(2), "x")


def test_superseded_history_is_annotated_though_it_is_no_warning() -> None:
    session = port_pair().session()
    line = '⤓ Superseded at 1970-01-01T00:00:00Z by "x" (id 00000002)'
    result = recall(
        session,
        {"agent_id": "a", "query": "embedder port 8080", "traversal_depth": 0},
        defaults=RecallDefaults(supersession_line="off"),
        canon_history=_History(nid(1)),  # type: ignore[arg-type]
    )
    assert line not in result.warnings and line in result.context.split("\n")
    assert result.annotated_hits()[0]["annotations"] == [
        {"kind": "superseded", "line": line, "by": nid(2)}
    ]


def test_fusion_gives_leg_ranks_and_both_fused_values_whatever_ranked() -> None:
    session = contradicted_schema().session(at=T_AGAINST + 3600)
    for method in ("max", "rrf", "sum"):
        ranking = type(SPEC_RANKING)(method=method, standing=SPEC_RANKING.standing)
        result = ask(session, "user schema", top_k=1, traversal_depth=0, ranking=ranking)
        schema, companion = result.annotated_hits()
        fusion = schema["fusion"]
        assert fusion["bm25_rank"] == 1 and "vector_rank" not in fusion
        assert set(fusion) <= {"bm25_rank", "recent_rank", "vector_rank", "max", "rrf"}
        assert fusion["rrf"] == pytest.approx(1.0)  # rank 1 of the one leg that found it
        assert fusion["max"] > 0
        assert "fusion" not in companion  # pulled in beside it, found by no leg


def test_parts_carry_annotations_and_fusion_through_json() -> None:
    session = _session_with_contradiction()
    args = {"agent_id": "a", "query": "deploy script migrations"}
    found = recall_parts(session, args, defaults=RecallDefaults())
    assert any(h.annotations for h in found.hits) and any(h.fusion for h in found.hits)
    again = RecallParts.from_json(json.loads(json.dumps(found.to_json())))
    assert again == found
    result = finish(session, again)
    assert kinds(result) == [[a["kind"] for a in h.annotations] for h in found.hits]
    assert [h.get("fusion") for h in result.annotated_hits()] == [h.fusion for h in found.hits]


@pytest.mark.parametrize(
    "broken",
    [
        {"annotations": [{"kind": "contradiction"}]},
        {"annotations": [{"kind": "contradiction", "line": 3}]},
        {"annotations": "contradiction"},
        {"fusion": {"bm25_rank": "1"}},
        {"fusion": {"max": float("inf")}},
        {"fusion": {"rrf": True}},
    ],
)
def test_parts_json_refuses_malformed_annotations_or_fusion(broken: dict[str, Any]) -> None:
    session = _session_with_contradiction()
    args = {"agent_id": "a", "query": "deploy script migrations"}
    data = recall_parts(session, args, defaults=RecallDefaults()).to_json()
    data["hits"][0].update(broken)
    with pytest.raises(PartsError):
        RecallParts.from_json(data)


def test_a_merged_recall_carries_a_layers_annotations_prefixed_like_its_warnings() -> None:
    layer = _session_with_contradiction()
    own = Mem()
    own.write([(nid(60), "the changelog lists every release", "logic")])
    args = {"agent_id": "a", "query": "deploy script migrations"}
    layer_parts = recall_parts(layer, args, defaults=RecallDefaults())
    shipped = RecallParts.from_json(json.loads(json.dumps(layer_parts.to_json())))
    result = merge_recall(
        "lambo",
        recall_parts(own.session(), args, defaults=RecallDefaults()),
        [("general", shipped)],
        top_k=5,
        max_tokens=500,
        floors={"general": 0.3},
    )
    notes = [a for h in result.annotated_hits() for a in h["annotations"]]
    assert {a["kind"] for a in notes} == {"contradiction", "contradicts"}
    assert all(a["line"].startswith("[general] ⚠") for a in notes)
    assert all(a["line"] in result.warnings for a in notes)
    contradicted = next(h for h in result.annotated_hits() if h["node_id"] == nid(1))
    assert contradicted["annotations"][0]["by"] == nid(2)
    assert contradicted["session"] == "general" and contradicted["fusion"]["bm25_rank"] == 1
