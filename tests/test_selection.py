"""Duplicate hits, [selection] skip_redundant (spec: "Duplicate hits."), on a real graph."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from lambo_core.config import load_config
from lambo_core.index.graph import SessionGraph
from lambo_core.matching import OPPOSITE_PAIRS
from lambo_core.model import Concept, ConceptType, Edge, EdgeType, Vector
from lambo_core.selection import (
    SIGNAL_COSINE,
    SIGNAL_SAME_CONTENT,
    SIGNAL_SEMANTIC_EDGE,
    Selection,
    SelectionRules,
    Skipped,
    also_label,
    checked_count,
    repeat_forbidden,
    same_text_key,
    select_distinct,
    skipped_structured,
)

S = "s"
OFF = SelectionRules()
ON = SelectionRules(skip_redundant=True)
SIMILAR = SelectionRules(skip_redundant=True, similar_signals=True)
THRESHOLD = 0.9


def nid(n: int) -> str:
    """A node id whose short id is ``n`` as 8 hex digits."""
    return f"{n:08x}-0000-4000-8000-000000000000"


def build(
    contents: Sequence[str], types: Sequence[ConceptType] | None = None
) -> tuple[SessionGraph, list[str]]:
    """A graph holding one concept per text, ids nid(0), nid(1), ... in the given order."""
    graph = SessionGraph(S)
    ids = []
    for i, content in enumerate(contents):
        concept_type = types[i] if types is not None else ConceptType.LOGIC
        node_id = nid(i)
        graph.add_concept(
            Concept(
                id=node_id,
                session=S,
                content=content,
                canonical_key=content.casefold(),
                concept_type=concept_type,
                created_at=1.0,
                about_time=1.0,
                agent_id="a",
            )
        )
        ids.append(node_id)
    return graph, ids


def link(graph: SessionGraph, src: str, dst: str, edge_type: EdgeType, weight: float = 1.0) -> None:
    graph.add_edge(Edge(S, src, dst, edge_type, weight, "i-1", "a", 1.0, 1.0))


def unit(*values: float) -> Vector:
    row = np.array(values, dtype=np.float32)
    return (row / np.linalg.norm(row)).astype(np.float32)


def vectors(rows: dict[str, Vector]) -> Callable[[str], Vector | None]:
    return rows.get


def select(
    graph: SessionGraph,
    ranked: Sequence[str],
    top_k: int,
    rules: SelectionRules = ON,
    *,
    rows: dict[str, Vector] | None = None,
    threshold: float | None = THRESHOLD,
    warned: Sequence[str] = (),
) -> Selection:
    return select_distinct(
        graph,
        ranked,
        top_k,
        rules,
        has_own_warning=lambda node_id: node_id in warned,
        merge_threshold=threshold,
        vector_of=vectors(rows or {}),
    )


# -- off, or nothing repeated: byte-identical ------------------------------------------------------


def test_off_takes_the_first_top_k_even_of_exact_repeats() -> None:
    graph, ids = build(["same text"] * 6)
    for rules in (OFF, SelectionRules(similar_signals=True)):
        result = select(graph, ids, 3, rules)
        assert result == Selection(ids[:3], {})
        assert result.taken == ids[:3] and result.skipped == {}


def test_on_with_nothing_repeated_is_the_plain_first_top_k() -> None:
    graph, ids = build(["lease TTL is 45s", "stdio wire check", "user schema", "gc sweeps", "x"])
    for rules in (ON, SIMILAR):
        taken, skipped = select(graph, ids, 3, rules)
        assert taken == ids[:3] and skipped == {}


def test_fewer_hits_than_top_k_and_empty() -> None:
    graph, ids = build(["a b", "a  b"])
    assert select(graph, ids, 5) == Selection([ids[0]], {ids[0]: [Skipped(ids[1], "same_content")]})
    assert select(graph, [], 5) == Selection([], {})
    assert select(graph, ids, 0) == Selection([], {})


# -- same_content ----------------------------------------------------------------------------------


def test_same_text_with_other_spacing_and_invisibles_is_skipped_and_the_next_takes_its_slot() -> (
    None
):
    graph, ids = build(
        [
            "dogfood store carries no durable embedding",
            "dogfood  store carries\tno durable\nembedding ",
            "dogfood store\u200b carries no dura\u200dble embedding\ufe0f",
            "lease TTL is 45s",
            "user schema",
        ],
        # whatever the two concept types
        [ConceptType.ENTITY, ConceptType.OBSERVATION, ConceptType.LOGIC] + [ConceptType.LOGIC] * 2,
    )
    taken, skipped = select(graph, ids, 3)
    assert taken == [ids[0], ids[3], ids[4]]
    assert skipped == {
        ids[0]: [Skipped(ids[1], SIGNAL_SAME_CONTENT), Skipped(ids[2], SIGNAL_SAME_CONTENT)]
    }


def test_same_text_in_another_case_is_not_a_repeat() -> None:
    graph, ids = build(["Cache is warm after restart", "cache is warm after restart", "x"])
    assert select(graph, ids, 2).taken == ids[:2]


def test_same_text_key_keeps_case_and_drops_spacing_and_invisibles() -> None:
    assert same_text_key("  A\u200b b\u00a0\u00a0c\u200c\n") == "A b c"
    assert same_text_key("A b") != same_text_key("a b")


# -- similar signals -------------------------------------------------------------------------------


def test_without_similar_signals_a_semantic_edge_or_close_vectors_are_not_repeats() -> None:
    graph, ids = build(["the cache is warm", "the warm cache", "queries are fast", "x"])
    link(graph, ids[1], ids[0], EdgeType.SEMANTIC, 0.95)
    rows = {ids[0]: unit(1, 0), ids[2]: unit(1, 0)}
    assert select(graph, ids, 3, ON, rows=rows).taken == ids[:3]


@pytest.mark.parametrize("forward", [True, False])
def test_a_semantic_edge_either_way_is_a_repeat(forward: bool) -> None:
    graph, ids = build(["the cache is warm", "cache is warm", "queries are fast"])
    src, dst = (ids[1], ids[0]) if forward else (ids[0], ids[1])
    link(graph, src, dst, EdgeType.SEMANTIC, 0.5)  # the edge counts, not its weight
    taken, skipped = select(graph, ids, 2, SIMILAR)
    assert taken == [ids[0], ids[2]]
    assert skipped == {ids[0]: [Skipped(ids[1], SIGNAL_SEMANTIC_EDGE)]}


def test_vectors_at_or_above_the_merge_threshold_are_a_repeat() -> None:
    graph, ids = build(["the cache is warm", "cache is warm", "warm cache", "queries are fast"])
    below = unit(THRESHOLD - 0.01, np.sqrt(1 - (THRESHOLD - 0.01) ** 2))
    rows = {ids[0]: unit(1, 0), ids[1]: unit(1, 0.01), ids[2]: below, ids[3]: unit(0, 1)}
    taken, skipped = select(graph, ids, 3, SIMILAR, rows=rows)
    assert taken == [ids[0], ids[2], ids[3]]
    assert skipped == {ids[0]: [Skipped(ids[1], SIGNAL_COSINE)]}


def test_cosine_exactly_at_the_threshold_counts() -> None:
    graph, ids = build(["the cache is warm", "cache is warm", "y"])
    rows = {ids[0]: unit(1, 0), ids[1]: unit(1, 0)}
    exact = float(np.dot(rows[ids[0]], rows[ids[1]]))
    taken, skipped = select(graph, ids, 2, SIMILAR, rows=rows, threshold=exact)
    assert taken == [ids[0], ids[2]] and skipped[ids[0]][0].signal == SIGNAL_COSINE


def test_no_threshold_or_no_vector_gives_no_cosine_signal() -> None:
    graph, ids = build(["the cache is warm", "cache is warm", "y"])
    rows = {ids[0]: unit(1, 0), ids[1]: unit(1, 0)}
    assert select(graph, ids, 2, SIMILAR, rows=rows, threshold=None).taken == ids[:2]
    assert select(graph, ids, 2, SIMILAR, rows={ids[0]: unit(1, 0)}).taken == ids[:2]


def test_same_content_is_the_signal_named_when_several_hold() -> None:
    graph, ids = build(["the cache is warm", "the cache  is warm", "y"])
    link(graph, ids[0], ids[1], EdgeType.SEMANTIC)
    rows = {ids[0]: unit(1, 0), ids[1]: unit(1, 0)}
    skipped = select(graph, ids, 2, SIMILAR, rows=rows).skipped
    assert skipped == {ids[0]: [Skipped(ids[1], SIGNAL_SAME_CONTENT)]}


# -- never a repeat --------------------------------------------------------------------------------


@pytest.mark.parametrize("edge_type", [EdgeType.CONTRADICTS, EdgeType.SUPERSEDES_SUSPECTED])
@pytest.mark.parametrize("forward", [True, False])
def test_a_contradicting_or_suspected_replacement_pair_is_never_a_repeat(
    edge_type: EdgeType, forward: bool
) -> None:
    graph, ids = build(["the cache is warm", "the cache is warm", "cache is warm", "y"])
    for other in (ids[1], ids[2]):
        src, dst = (other, ids[0]) if forward else (ids[0], other)
        link(graph, src, dst, edge_type)
    link(graph, ids[0], ids[2], EdgeType.SEMANTIC)
    assert select(graph, ids, 3, SIMILAR).taken == ids[:3]


def test_a_pair_barred_from_one_taken_hit_can_still_repeat_another() -> None:
    graph, ids = build(["the cache is warm", "queries are fast", "the cache is warm", "y"])
    link(graph, ids[2], ids[0], EdgeType.CONTRADICTS)
    link(graph, ids[2], ids[1], EdgeType.SEMANTIC)
    taken, skipped = select(graph, ids, 3, SIMILAR)
    assert taken == [ids[0], ids[1], ids[3]]
    assert skipped == {ids[1]: [Skipped(ids[2], SIGNAL_SEMANTIC_EDGE)]}


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("retry with backoff_ms set", "retry with backoff_s set"),  # snake_case
        ("ReadTimeout is raised", "WriteTimeout is raised"),  # CamelCase
        ("ReadTimeout is raised", "Readtimeout is raised"),  # identifier case counts
        ("the flag is LAMBO_HOME", "the flag is LAMBO_PATH"),  # all-caps
        ("use HTTP here", "use HTTPS here"),  # all-caps
        ("config lives in /etc/lambo", "config lives in /etc/lambda"),  # path
        ("fixed in v0.22.1", "fixed in v0.22.2"),  # version
        ("regressed at 82c3dcb0a1", "regressed at 1a2b3c4d5e"),  # hash
        ("the embedder listens on port 8080", "the embedder listens on port 8081"),  # number
        ("agent 0 wrote fact 1", "agent 1 wrote fact 0"),  # numbers in order
        ("the cache is warm", "the cache is not warm"),  # negation
        ("the lease can expire", "the lease cannot expire"),  # negation
        ("enable the cache at boot", "disable the cache at boot"),  # opposite (and negation)
        ("allow writes from agents", "deny writes from agents"),  # opposite
        ("writes were allowed", "writes were denied"),  # opposite, inflected
        ("add the index", "remove the index"),
        ("the daemon stopped", "the daemon started"),
        ("open the lease file", "close the lease file"),
        ("dry run is true", "dry run is false"),
        ("tracing is on", "tracing is off"),
        ("increase the budget", "decrease the budget"),
        ("min width applies", "max width applies"),
        ("lint before tests", "lint after tests"),
        ("accept the write", "reject the write"),
        ("include the header", "exclude the header"),
        ("the marker is shown", "the marker is hidden"),
        ("lock the store", "unlock the store"),
        ("grant access", "revoke access"),
        ("keys are upper case", "keys are lower case"),
        ("the first hit wins", "the last hit wins"),
        ("A depends on B", "B depends on A"),  # order of shared words
        ("the cat saw the dog", "the dog saw the cat"),
    ],
)
def test_texts_differing_in_a_fact_are_never_a_repeat(first: str, second: str) -> None:
    assert repeat_forbidden(first, second) is not None
    assert repeat_forbidden(second, first) is not None
    graph, ids = build([first, second, "y"])
    link(graph, ids[1], ids[0], EdgeType.SEMANTIC)
    rows = {ids[0]: unit(1, 0), ids[1]: unit(1, 0)}
    assert select(graph, ids, 2, SIMILAR, rows=rows).taken == ids[:2]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("the cache is warm", "the cache is warm now"),  # a word more
        ("queries are fast", "the queries are fast"),
        ("Cache is warm", "cache is warm"),  # case outside an identifier
        ("enable tracing", "enable tracing and logging"),  # the same side of a pair
        ("the  cache is\u200b warm", "the cache is warm"),
    ],
)
def test_near_texts_stating_the_same_fact_may_repeat(first: str, second: str) -> None:
    assert repeat_forbidden(first, second) is None
    graph, ids = build([first, second, "y"])
    link(graph, ids[1], ids[0], EdgeType.SEMANTIC)
    assert select(graph, ids, 2, SIMILAR).taken == [ids[0], ids[2]]


def test_the_opposite_pairs_are_the_spec_examples_and_more() -> None:
    pairs = set(OPPOSITE_PAIRS)
    for pair in [
        ("enable", "disable"),
        ("allow", "deny"),
        ("add", "remove"),
        ("start", "stop"),
        ("open", "close"),
        ("true", "false"),
        ("on", "off"),
        ("increase", "decrease"),
        ("min", "max"),
        ("before", "after"),
        ("accept", "reject"),
        ("include", "exclude"),
        ("show", "hide"),
        ("lock", "unlock"),
        ("grant", "revoke"),
        ("upper", "lower"),
        ("first", "last"),
    ]:
        assert pair in pairs
        assert repeat_forbidden(f"we {pair[0]} it", f"we {pair[1]} it") is not None


# -- never skipped ---------------------------------------------------------------------------------


def test_a_hit_with_its_own_warning_is_never_skipped() -> None:
    graph, ids = build(["the cache is warm"] * 3 + ["y"])
    taken, skipped = select(graph, ids, 3, warned=[ids[1]])
    assert taken == [ids[0], ids[1], ids[3]]
    # the warned hit is taken, and a later copy repeats the first taken hit, not it
    assert skipped == {ids[0]: [Skipped(ids[2], SIGNAL_SAME_CONTENT)]}


def test_a_warned_hit_is_a_taken_hit_later_copies_can_repeat() -> None:
    graph, ids = build(["other", "the cache is warm", "the cache is warm", "y"])
    taken, skipped = select(graph, ids, 3, warned=[ids[1]])
    assert taken == [ids[0], ids[1], ids[3]]
    assert skipped == {ids[1]: [Skipped(ids[2], SIGNAL_SAME_CONTENT)]}


# -- bounded ---------------------------------------------------------------------------------------


def test_checked_count_is_min_20_and_4_top_k() -> None:
    assert [checked_count(k) for k in (1, 2, 5, 6, 50)] == [4, 8, 20, 20, 20]


def test_only_the_first_4_top_k_hits_are_checked() -> None:
    # top_k 2 checks 8 hits: the first hit, six repeats of it, then two more repeats
    graph, ids = build(["dup"] + ["dup"] * 6 + ["dup", "dup", "z"])
    taken, skipped = select(graph, ids, 2)
    assert taken == [ids[0], ids[8]]  # rank 8 is past the bound: taken unchecked
    assert [s.node_id for s in skipped[ids[0]]] == ids[1:8]


def test_only_the_first_20_hits_are_checked_for_a_large_top_k() -> None:
    graph, ids = build(["dup"] * 25 + [f"distinct {i}" for i in range(10)])
    taken, skipped = select(graph, ids, 10)
    assert taken == [ids[0], *ids[20:29]]
    assert len(skipped[ids[0]]) == 19


def test_checking_stops_once_top_k_hits_are_taken() -> None:
    graph, ids = build(["a one", "b two", "a one", "b two"])
    # the repeats rank after the slots are full: nothing is skipped, nothing named
    assert select(graph, ids, 2) == Selection(ids[:2], {})


# -- attribution -----------------------------------------------------------------------------------


def test_a_repeat_of_several_taken_hits_is_named_after_the_highest_ranked() -> None:
    graph, ids = build(["the cache is warm", "the cache is warm now", "cache is warm", "y"])
    link(graph, ids[1], ids[0], EdgeType.CONTRADICTS)  # both stay
    link(graph, ids[2], ids[1], EdgeType.SEMANTIC)
    link(graph, ids[2], ids[0], EdgeType.SEMANTIC)
    taken, skipped = select(graph, ids, 3, SIMILAR)
    assert taken == [ids[0], ids[1], ids[3]]
    assert skipped == {ids[0]: [Skipped(ids[2], SIGNAL_SEMANTIC_EDGE)]}


def test_a_skipped_hit_is_not_a_hit_later_ones_repeat() -> None:
    graph, ids = build(["the cache is warm", "the cache is warm", "cache is warm", "y"])
    link(graph, ids[2], ids[1], EdgeType.SEMANTIC)  # only to the skipped copy
    taken, skipped = select(graph, ids, 3, SIMILAR)
    assert taken == [ids[0], ids[2], ids[3]]
    assert skipped == {ids[0]: [Skipped(ids[1], SIGNAL_SAME_CONTENT)]}


def test_each_kept_hit_lists_its_own_skips_in_skip_order() -> None:
    graph, ids = build(["a one", "b two", "b two", "a one", "a  one", "c three"])
    taken, skipped = select(graph, ids, 3)
    assert taken == [ids[0], ids[1], ids[5]]
    assert skipped == {
        ids[0]: [Skipped(ids[3], SIGNAL_SAME_CONTENT), Skipped(ids[4], SIGNAL_SAME_CONTENT)],
        ids[1]: [Skipped(ids[2], SIGNAL_SAME_CONTENT)],
    }
    assert list(skipped) == [ids[1], ids[0]]  # first skip first


def test_an_id_not_in_the_graph_is_taken_and_never_repeated() -> None:
    graph, ids = build(["the cache is warm", "the cache is warm"])
    ghost, other = nid(98), nid(99)
    taken, skipped = select(graph, [ids[0], ghost, ids[1], other], 3)
    assert taken == [ids[0], ghost, other]
    assert skipped == {ids[0]: [Skipped(ids[1], SIGNAL_SAME_CONTENT)]}


# -- the label and the structured form -------------------------------------------------------------


def test_also_label_names_three_then_more() -> None:
    skips = [Skipped(nid(0x82C3DCB0 + i), SIGNAL_SAME_CONTENT) for i in range(5)]
    assert also_label([]) == ""
    assert also_label(skips[:1]) == "also 82c3dcb0"
    assert also_label(skips[:3]) == "also 82c3dcb0, 82c3dcb1, 82c3dcb2"
    assert also_label(skips[:4]) == "also 82c3dcb0, 82c3dcb1, 82c3dcb2, +1 more"
    assert also_label(skips) == "also 82c3dcb0, 82c3dcb1, 82c3dcb2, +2 more"


def test_skipped_structured_is_node_id_and_signal() -> None:
    skips = [Skipped(nid(1), SIGNAL_SAME_CONTENT), Skipped(nid(2), SIGNAL_COSINE)]
    assert skipped_structured(skips) == [
        {"node_id": nid(1), "signal": "same_content"},
        {"node_id": nid(2), "signal": "cosine"},
    ]
    assert skipped_structured([]) == []


# -- configuration ---------------------------------------------------------------------------------


def test_rules_from_config_default_off(tmp_path: Path) -> None:
    config = load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path)
    assert SelectionRules.from_config(config) == SelectionRules(False, False)


def test_rules_from_config_file(tmp_path: Path) -> None:
    path = tmp_path / "lambo.toml"
    path.write_text("[selection]\nskip_redundant = true\nsimilar_signals = true\n")
    config = load_config(config_path=str(path), env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path)
    assert SelectionRules.from_config(config) == SIMILAR
