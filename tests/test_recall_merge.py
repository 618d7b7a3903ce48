"""Merged recall (issue #17): RecallParts, merge_recall's rules, scoped_result.

The rules are tested table-driven over parts built by hand (``part``), so each rule is
seen alone; real sessions check that parts round-trip through JSON, that an unlayered
recall is its parts rendered alone, and a merge of two real sessions end to end.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from lambo_core.context import HitBlock
from lambo_core.model import Status, short_id
from lambo_core.recall import RecallDefaults, recall
from lambo_core.recall.merge import (
    SCOPED_LAYER_WARNING,
    layer_prefix,
    merge_recall,
    scoped_result,
    shown_ids,
)
from lambo_core.recall.parts import (
    BASIS_GRAPH,
    BASIS_KEYWORD,
    BASIS_NONE,
    BASIS_RECENT,
    BASIS_TRAVERSAL,
    BASIS_VECTOR,
    KEPT_COMPANION,
    KEPT_CONTRADICTION,
    KEY_PATH,
    KEY_TEXT,
    DependencyPart,
    PartHit,
    PartsError,
    RecallParts,
)
from lambo_core.recall.pipeline import finish, recall_parts
from tests.test_recall import Mem, assert_mcp_shape, nid

FLOOR = 0.3
FLOORS = {"general": FLOOR, "work": FLOOR}


def part(
    n: int,
    content: str | None = None,
    *,
    relevance: float | None = 0.5,
    basis: str = BASIS_VECTOR,
    kept: str = "",
    keeps_past: bool = False,
    lines: Sequence[str] = (),
    key: tuple[str, ...] | None = None,
    contradicted_by: int | None = None,
    skipped: Sequence[int] = (),
    also: str = "",
    history: str | None = None,
) -> PartHit:
    """A hit as a session's recall_parts would give it."""
    node = nid(n)
    text = content if content is not None else f"fact {n}"
    block = HitBlock(
        node,
        text,
        "Logic",
        False,
        1.0 - n / 1000,
        0,
        lines=(*lines, history) if history else tuple(lines),
        also=also,
        placed="kept past top_k" if kept == KEPT_CONTRADICTION else "",
    )
    hit: dict[str, Any] = {
        "node_id": node,
        "content": text,
        "concept_type": "Logic",
        "score": block.score,
        "is_canonical": False,
        "blast_radius": None,
    }
    if kept == KEPT_COMPANION:
        hit["companion_of"] = []
    if skipped:
        hit["skipped_redundant"] = [{"node_id": nid(s), "signal": "same_content"} for s in skipped]
    by = nid(contradicted_by) if contradicted_by is not None else None
    return PartHit(
        block=block,
        hit=hit,
        warnings=tuple(lines),
        relevance=relevance,
        basis=basis,
        kept=kept,
        keeps_past=keeps_past,
        key=key if key is not None else (KEY_TEXT, text),
        contradicted_by=by,
        contradiction_line=f"⚠ Contradicted by (id {short_id(by)})" if by else None,
    )


def parts(
    session: str,
    *hits: PartHit,
    warnings: Sequence[str] = (),
    dependency: DependencyPart | None = None,
    notice: str | None = None,
) -> RecallParts:
    return RecallParts(
        session, 5, 500, tuple(hits), tuple(warnings), notice=notice, dependency=dependency
    )


def merged(
    own: RecallParts,
    *layers: tuple[str, RecallParts | None],
    top_k: int = 5,
    max_tokens: int = 100_000,
) -> Any:
    result = merge_recall(
        "lambo", own, list(layers), top_k=top_k, max_tokens=max_tokens, floors=FLOORS
    )
    assert_mcp_shape(result)
    return result


def order(result: Any) -> list[tuple[str, str]]:
    return [(hit["session"], hit["content"]) for hit in result.hits]


# ----------------------------------------------------------------------------- order, top_k


@pytest.mark.parametrize(
    ("own", "general", "work", "top_k", "expected"),
    [
        # interleaved by each session's own rank, the session first, one merged top_k
        ([1, 2, 3], [11, 12, 13], None, 4, ["l1", "g11", "l2", "g12"]),
        ([1, 2, 3], [11, 12, 13], [21, 22], 5, ["l1", "g11", "w21", "l2", "g12"]),
        # a session with fewer hits leaves its turns to the others
        ([1], [11, 12, 13], None, 3, ["l1", "g11", "g12"]),
        ([], [11, 12], [21], 5, ["g11", "w21", "g12"]),
        ([1, 2, 3, 4, 5, 6], [], None, 5, ["l1", "l2", "l3", "l4", "l5"]),
    ],
)
def test_merged_order_interleaves_ranks(
    own: list[int], general: list[int], work: list[int] | None, top_k: int, expected: list[str]
) -> None:
    layers: list[tuple[str, RecallParts | None]] = [
        ("general", parts("general", *(part(n) for n in general)))
    ]
    if work is not None:
        layers.append(("work", parts("work", *(part(n) for n in work))))
    result = merged(parts("lambo", *(part(n) for n in own)), *layers, top_k=top_k)
    tag = {"lambo": "l", "general": "g", "work": "w"}
    assert [f"{tag[s]}{c.removeprefix('fact ')}" for s, c in order(result)] == expected


# ----------------------------------------------------------------------------------- floors


@pytest.mark.parametrize(
    ("hit", "passes"),
    [
        (part(11, relevance=FLOOR), True),  # at the floor
        (part(11, relevance=FLOOR + 0.2), True),
        (part(11, relevance=FLOOR - 0.01), False),
        (part(11, relevance=0.9, basis=BASIS_KEYWORD), True),
        (part(11, relevance=None, basis=BASIS_GRAPH), False),  # graph expansion alone
        (part(11, relevance=None, basis=BASIS_RECENT), False),  # the recent leg alone
        (part(11, relevance=None, basis=BASIS_NONE), False),
    ],
)
def test_a_layer_hit_needs_its_own_relevance_to_pass_the_floor(hit: PartHit, passes: bool) -> None:
    result = merged(parts("lambo", part(1)), ("general", parts("general", hit)))
    assert (
        ("general", "fact 11") in order(result)
        if passes
        else order(result) == [("lambo", "fact 1")]
    )


def test_the_sessions_own_hits_have_no_floor() -> None:
    own = parts("lambo", part(1, relevance=None, basis=BASIS_GRAPH), part(2, relevance=0.0))
    assert order(merged(own, ("general", parts("general")))) == [
        ("lambo", "fact 1"),
        ("lambo", "fact 2"),
    ]


def test_each_layer_has_its_own_floor() -> None:
    own = parts("lambo")
    layers = [
        ("general", parts("general", part(11, relevance=0.5))),
        ("work", parts("work", part(21, relevance=0.5))),
    ]
    result = merge_recall(
        "lambo", own, layers, top_k=5, max_tokens=500, floors={"general": 0.6, "work": 0.4}
    )
    assert order(result) == [("work", "fact 21")]
    with pytest.raises(ValueError, match="no relevance floor for layer work"):
        merge_recall("lambo", own, layers, top_k=5, max_tokens=500, floors={"general": 0.1})


def _dep(key: str, header: str = "Answered by graph traversal: 1 concept depends on") -> Any:
    return DependencyPart(nid(99), key, key, f'{header} "{key}".')


@pytest.mark.parametrize(
    ("own_dep", "layer_dep", "layer_in"),
    [
        ("db", "db", True),  # the same anchor (folded keys equal)
        ("db", "cache", False),  # another anchor
        ("db", None, False),  # the caller answers by traversal, the layer ordinarily
        (None, "db", True),  # the caller resolves none: a layer answers its own anchor
        (None, None, True),
    ],
)
def test_dependency_answers_pass_by_anchor(
    own_dep: str | None, layer_dep: str | None, layer_in: bool
) -> None:
    def hit(n: int, dep: str | None) -> PartHit:
        if dep is None:
            return part(n)
        return part(n, relevance=None, basis=BASIS_TRAVERSAL)

    own = parts("lambo", hit(1, own_dep), dependency=_dep(own_dep) if own_dep else None)
    layer = parts("general", hit(11, layer_dep), dependency=_dep(layer_dep) if layer_dep else None)
    result = merged(own, ("general", layer))
    assert (("general", "fact 11") in order(result)) is layer_in
    head = result.context.split("\n\n")[0]
    if own_dep:
        assert head.startswith(f'Answered by graph traversal: 1 concept depends on "{own_dep}"')
    if layer_dep and layer_in:
        assert f'[general] Answered by graph traversal: 1 concept depends on "{layer_dep}".' in head


@pytest.mark.parametrize("layer_dep", ["README.md", None])
def test_a_subject_ambiguous_across_the_callers_repositories_takes_no_layer_answer(
    layer_dep: str | None,
) -> None:
    """Spec L363: such a question answers for none of them, with no hits and its warning;
    a layer's traversal of its own README.md, or its ordinary hits, do not fill in."""
    warning = 'recall: "README.md" names 2 concepts in different repositories: …'
    own = RecallParts("lambo", 5, 500, (), (warning,), ambiguous_subject=True)
    hit = part(11) if layer_dep is None else part(11, relevance=None, basis=BASIS_TRAVERSAL)
    layer = parts("general", hit, dependency=_dep(layer_dep) if layer_dep else None)
    result = merged(own, ("general", layer))
    assert result.hits == []
    assert result.warnings == [warning]
    assert RecallParts.from_json(json.loads(json.dumps(own.to_json()))) == own


# ----------------------------------------------------------------------------------- dedupe


def test_a_memory_in_both_keeps_the_sessions_copy_and_names_the_other() -> None:
    own = parts("lambo", part(1, "release notes before the tag"), part(2))
    layer = parts("general", part(11, "release notes before the tag"), part(12))
    result = merged(own, ("general", layer))
    # the layer's first turn went to its copy, shown as the session's
    assert order(result) == [
        ("lambo", "release notes before the tag"),
        ("lambo", "fact 2"),
        ("general", "fact 12"),
    ]
    label = result.context.split("\n\n")[0]
    assert label.endswith(
        f"(score 1.00, id {short_id(nid(1))}, also {short_id(nid(11))} in general)"
    )
    assert "also_skipped_redundant" not in result.hits[0]  # the layer skipped nothing for it


def test_the_sessions_copy_takes_the_place_of_an_earlier_layer_copy() -> None:
    own = parts("lambo", part(1), part(2), part(3, "shared"))
    layer = parts("general", part(11, "shared"))
    result = merged(own, ("general", layer), top_k=3)
    assert order(result) == [("lambo", "fact 1"), ("lambo", "shared"), ("lambo", "fact 2")]


def test_what_the_layer_skipped_for_its_merged_copy_follows_it() -> None:
    own = parts("lambo", part(1, "shared", skipped=[5], also=f"also {short_id(nid(5))}"))
    layer = parts("general", part(11, "shared", skipped=[15, 16]))
    result = merged(own, ("general", layer))
    ids = [short_id(nid(n)) for n in (5, 11, 15, 16)]
    assert result.context.endswith(
        f"id {short_id(nid(1))}, also {ids[0]}, also {ids[1]}, {ids[2]}, {ids[3]} in general)"
    )
    assert result.hits[0]["skipped_redundant"] == [{"node_id": nid(5), "signal": "same_content"}]
    assert result.hits[0]["also_skipped_redundant"] == [
        {"session": "general", "node_id": nid(15), "signal": "same_content"},
        {"session": "general", "node_id": nid(16), "signal": "same_content"},
    ]


@pytest.mark.parametrize(
    ("own_key", "layer_key", "joined"),
    [
        (
            (KEY_PATH, "github.com/acme/widgets", "README.md"),
            (KEY_PATH, "github.com/acme/widgets", "README.md"),
            True,
        ),
        (
            (KEY_PATH, "github.com/acme/widgets", "README.md"),
            (KEY_PATH, "github.com/acme/gadgets", "README.md"),
            False,
        ),
        ((KEY_PATH, "github.com/acme/widgets", "README.md"), (KEY_TEXT, "README.md"), False),
        ((KEY_TEXT, "README.md"), (KEY_TEXT, "README.md"), True),
        ((KEY_TEXT, "Case Test"), (KEY_TEXT, "case test"), False),  # case counts
    ],
)
def test_dedupe_joins_scoped_paths_only_on_the_same_repository_and_path(
    own_key: tuple[str, ...], layer_key: tuple[str, ...], joined: bool
) -> None:
    own = parts("lambo", part(1, "README.md", key=own_key))
    layer = parts("general", part(11, "README.md", key=layer_key))
    assert len(merged(own, ("general", layer)).hits) == (1 if joined else 2)


def test_among_layers_the_first_configured_keeps_its_copy() -> None:
    layers = [
        ("general", parts("general", part(11, "shared"))),
        ("work", parts("work", part(21, "shared"))),
    ]
    result = merged(parts("lambo"), *layers)
    assert order(result) == [("general", "shared")]
    assert f"from general, also {short_id(nid(21))} in work)" in result.context


# ----------------------------------------------------------------------------------- labels


def test_a_layer_hit_names_its_session_and_every_hit_carries_session() -> None:
    own = parts("lambo", part(1))
    layer = parts("general", part(11, "worktree branches are rebased", skipped=[12], also="also x"))
    result = merged(own, ("general", layer))
    assert [hit["session"] for hit in result.hits] == ["lambo", "general"]
    blocks = result.context.split("\n\n")
    assert blocks[0] == f"fact 1 [Logic] (score 1.00, id {short_id(nid(1))})"
    assert blocks[1] == (
        f"worktree branches are rebased [Logic] (score 0.99, id {short_id(nid(11))}, "
        "from general, also x)"
    )
    assert shown_ids(result, "general") == [nid(11)]
    assert shown_ids(result, "lambo") == [nid(1)]


def test_a_layers_lines_and_warnings_start_with_its_name() -> None:
    own = parts("lambo", part(1, lines=["⚑ own line"]), warnings=["recall: own warning"])
    layer = parts(
        "general",
        part(11, lines=["⚠ a conflict"], history="⤓ Superseded at 2026"),
        warnings=["recall: the vector leg was skipped"],
    )
    result = merged(own, ("general", layer))
    assert result.warnings == [
        "recall: own warning",
        "[general] recall: the vector leg was skipped",
        "⚑ own line",
        "[general] ⚠ a conflict",
    ]
    block = result.context.split("\n\n")[1].split("\n")
    assert block[1:] == ["[general] ⚠ a conflict", "⤓ Superseded at 2026"]  # history: no prefix
    assert layer_prefix("general") == "[general] "


def test_a_layers_notice_leads_when_the_session_has_none() -> None:
    own = parts("lambo", part(1))
    layer = parts("general", part(11), notice="Keyword-only recall: x.")
    assert merged(own, ("general", layer)).context.startswith("[general] Keyword-only recall: x.")
    own = replace(own, notice="Keyword-only recall: own.")
    assert merged(own, ("general", layer)).context.startswith("Keyword-only recall: own.\n\n")


# --------------------------------------------------------------------------- contradictions


def test_contradicted_established_layer_hit_and_its_companion_are_kept_past_top_k() -> None:
    own = parts("lambo", part(1), part(2))
    layer = parts(
        "general",
        part(11),
        part(12, lines=["⚠ Contradicted (id 13)"], kept=KEPT_CONTRADICTION, contradicted_by=13),
        part(13, kept=KEPT_COMPANION, lines=["⚠ Contradicts (id 12)"]),
    )
    result = merged(own, ("general", layer), top_k=2)
    assert order(result) == [
        ("lambo", "fact 1"),
        ("general", "fact 11"),
        ("general", "fact 12"),
        ("general", "fact 13"),
    ]
    assert "from general; kept past top_k)" in result.context


def test_a_floored_companion_is_not_added_but_still_named() -> None:
    layer = parts(
        "general",
        part(12, lines=["⚠ Contradicted (id 13)"], kept=KEPT_CONTRADICTION, contradicted_by=13),
        part(13, kept=KEPT_COMPANION, relevance=None, basis=BASIS_NONE),
    )
    result = merged(parts("lambo"), ("general", layer))
    assert order(result) == [("general", "fact 12")]
    assert result.warnings == ["[general] ⚠ Contradicted (id 13)"]


def test_another_contradicted_hit_needs_a_merged_slot() -> None:
    def layer() -> RecallParts:
        return parts(
            "general",
            part(11, lines=["⚠ Contradicted (id 13)"], contradicted_by=13),
            part(13, kept=KEPT_COMPANION),
        )

    own = parts("lambo", part(1), part(2))
    assert order(merged(own, ("general", layer()), top_k=1)) == [("lambo", "fact 1")]
    assert order(merged(own, ("general", layer()), top_k=2)) == [
        ("lambo", "fact 1"),
        ("general", "fact 11"),
        ("general", "fact 13"),  # added past top_k beside it
    ]


def test_a_ranked_companion_without_a_slot_is_added_beside_its_hit() -> None:
    layer = parts(
        "general", part(11, lines=["⚠ Contradicted (id 12)"], contradicted_by=12), part(12)
    )
    result = merged(parts("lambo", part(1)), ("general", layer), top_k=2)
    assert order(result)[-1] == ("general", "fact 12")
    assert result.hits[-1]["companion_of"] == [nid(11)]


def test_a_ranked_hit_kept_for_a_warning_stays_past_the_merged_top_k() -> None:
    layer = parts("general", part(11), part(12, keeps_past=True, lines=["⚠ Contradicted"]))
    result = merged(parts("lambo", part(1), part(2)), ("general", layer), top_k=2)
    assert order(result) == [("lambo", "fact 1"), ("general", "fact 11"), ("general", "fact 12")]
    assert result.context.endswith("from general; kept past top_k)\n[general] ⚠ Contradicted")


def test_a_contradicted_layer_copy_merged_into_the_sessions_leaves_its_line_in_warnings() -> None:
    own = parts("lambo", part(1, "shared"))
    layer = parts(
        "general",
        part(11, "shared", lines=["⚠ Contradicted (id 13)"], contradicted_by=13),
        part(13, kept=KEPT_COMPANION),
    )
    result = merged(own, ("general", layer))
    assert order(result) == [("lambo", "shared")]  # the session's copy; no companion
    assert result.warnings == [f"[general] ⚠ Contradicted by (id {short_id(nid(13))})"]
    assert "Contradicted" not in result.context


# ---------------------------------------------------------------------- budget, unavailable


def test_one_budget_and_a_cut_layer_block_names_its_scope() -> None:
    long = "worktree branches are always rebased onto origin main first " * 20
    result = merged(parts("lambo"), ("general", parts("general", part(11, long))), max_tokens=60)
    assert result.hits[0]["truncated_in_context"] is True
    assert result.context.endswith(
        f"lambo_inspect {short_id(nid(11))} (scope general) for the full concept]"
    )
    two = merged(
        parts("lambo", part(1)), ("general", parts("general", part(11, long))), max_tokens=60
    )
    assert order(two) == [("lambo", "fact 1"), ("general", long)]
    assert "truncated_in_context" not in two.hits[1]  # whole blocks in order: it does not fit
    assert str(nid(11))[:8] not in two.context


@pytest.mark.parametrize(
    ("layers", "expected"),
    [
        (
            [("general", None)],
            ["recall: layer general is unavailable; results are from lambo only"],
        ),
        (
            [("general", None), ("work", "up")],
            ["recall: layer general is unavailable; results are from lambo and work only"],
        ),
        (
            [("general", None), ("work", None)],
            [
                "recall: layer general is unavailable; results are from lambo only",
                "recall: layer work is unavailable; results are from lambo only",
            ],
        ),
    ],
)
def test_an_unavailable_layer_leaves_one_warning(
    layers: list[tuple[str, str | None]], expected: list[str]
) -> None:
    given = [(n, parts(n) if up else None) for n, up in layers]
    result = merged(parts("lambo", part(1)), *given)
    assert result.warnings == expected
    assert order(result) == [("lambo", "fact 1")]


def test_scoped_result_carries_session_and_the_layer_warning() -> None:
    plain = finish_parts_only(parts("general", part(11)))
    layer = scoped_result(plain, "general", layer=True)
    assert layer.warnings[0] == (
        "recall: these hits are from layer general, and their ids belong to it; "
        'pass scope = "general" to lambo_inspect to inspect one'
    )
    assert layer.warnings[0] == SCOPED_LAYER_WARNING.format(layer="general")
    assert layer.context == plain.context  # its own plain recall: no "from general"
    assert [h["session"] for h in layer.hits] == ["general"]
    own = scoped_result(plain, "lambo", layer=False)
    assert own.warnings == plain.warnings and own.hits[0]["session"] == "lambo"
    assert "session" not in plain.hits[0]


def finish_parts_only(p: RecallParts) -> Any:
    result = merge_recall(p.session, p, [], top_k=p.top_k, max_tokens=p.max_tokens, floors={})
    for hit in result.hits:
        del hit["session"]
    return result


# ------------------------------------------------------------------------- real sessions


def _session_with_contradiction() -> Any:
    mem = Mem()
    mem.write(
        [(nid(1), "the deploy script runs migrations first", "logic")], status=Status.CANONICAL
    )
    mem.write(
        [(nid(2), "the deploy script must not run migrations", "logic")],
        against=[(nid(2), nid(1))],
        at=1_760_000_000.0 + 60,
    )
    mem.write(
        [
            (nid(3), "deploy notes for the release", "logic"),
            (nid(4), "release tag format", "entity"),
        ],
        deps=[(nid(3), nid(4))],
    )
    return mem.session(at=1_760_000_000.0 + 30 * 86400)


@pytest.mark.parametrize(
    "query", ["deploy script migrations", "release", "what depends on release tag format", "zzz"]
)
def test_parts_round_trip_through_json_and_render_as_recall(query: str) -> None:
    args = {"agent_id": "a", "query": query}
    expected = recall(_session_with_contradiction(), args, defaults=RecallDefaults())
    session = _session_with_contradiction()  # the same memory, no access counted yet
    found = recall_parts(session, args, defaults=RecallDefaults())
    again = RecallParts.from_json(json.loads(json.dumps(found.to_json())))
    assert again == found
    assert finish(session, again).structured() == expected.structured()
    assert session.access_counts.pending(nid(1)) == (nid(1) in found.hit_ids())


def test_parts_mark_dependency_answers_and_relevance() -> None:
    session = _session_with_contradiction()
    dep = recall_parts(
        session,
        {"agent_id": "a", "query": "what depends on release tag format"},
        defaults=RecallDefaults(),
    )
    assert dep.dependency is not None and dep.dependency.anchor_key == "release tag format"
    assert [h.basis for h in dep.hits] == [BASIS_TRAVERSAL]
    plain = recall_parts(
        session, {"agent_id": "a", "query": "deploy script migrations"}, defaults=RecallDefaults()
    )
    by = {h.node_id: h for h in plain.hits}
    assert by[nid(1)].contradicted_by == nid(2)
    assert by[nid(1)].basis == BASIS_KEYWORD and by[nid(1)].relevance == 1.0  # every word
    assert by[nid(1)].contradiction_line is not None
    assert by[nid(1)].contradiction_line in by[nid(1)].warnings


@pytest.mark.parametrize(
    "broken",
    [
        {"version": 2},
        {"hits": [{"basis": "psychic"}]},
        {"top_k": True},
        {"warnings": [1]},
        {"hits": [{"block": {"lines": []}}]},
        {"hits": [{"relevance": float("nan")}]},
        {"hits": [{"warnings": ["not in the block"]}]},
    ],
)
def test_parts_json_refuses_what_to_json_never_writes(broken: dict[str, Any]) -> None:
    good = parts("general", part(11, lines=["⚠ x"])).to_json()
    data = {**good, **{k: v for k, v in broken.items() if k != "hits"}}
    if "hits" in broken:
        data["hits"] = [{**good["hits"][0], **broken["hits"][0]}]
    with pytest.raises(PartsError):
        RecallParts.from_json(data)


def test_two_real_sessions_merge() -> None:
    own = _session_with_contradiction()
    layer_mem = Mem()
    layer_mem.write(
        [
            (nid(50), "deploy notes for the release", "logic"),
            (nid(51), "always sign the release tag", "logic"),
        ]
    )
    layer = layer_mem.session()
    args = {"agent_id": "a", "query": "release"}
    result = merge_recall(
        "lambo",
        recall_parts(own, args, defaults=RecallDefaults()),
        [("general", recall_parts(layer, args, defaults=RecallDefaults()))],
        top_k=5,
        max_tokens=500,
        floors={"general": 0.5},
    )
    assert_mcp_shape(result)
    sessions = [(h["session"], h["content"]) for h in result.hits]
    assert ("general", "always sign the release tag") in sessions
    assert ("general", "deploy notes for the release") not in sessions  # the session's copy
    assert f"also {short_id(nid(50))} in general" in result.context


def test_the_layer_floor_default_is_the_measured_config_default() -> None:
    from lambo_core.config_schema import KEYS

    (key,) = [k for k in KEYS if k.dotted == "recall.layer_relevance_floor"]
    assert RecallDefaults().layer_relevance_floor == key.default == 0.375  # layer_floor.py
    assert (key.minimum, key.maximum) == (0.0, 1.0)
