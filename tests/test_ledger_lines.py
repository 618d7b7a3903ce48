"""Ledger lines: what a call, a completion and a heartbeat line hold, and what they never do."""

from __future__ import annotations

import json
from typing import Any

from lambo_core.ledger_lines import call_line, completion_line, heartbeat_line, timestamp

AT = 1_780_000_000.25


def recall_answer(**extra: Any) -> dict[str, Any]:
    hits = [
        {"node_id": "n1", "content": "secret text", "score": 0.9, "is_canonical": True},
        {"node_id": "n2", "content": "other", "score": 0.5, "possibly_superseded_by": "n1"},
    ]
    return {
        "content": [{"type": "text", "text": "ctx"}],
        "isError": False,
        "structuredContent": {"hits": hits, "warnings": ["w1", "w2"], **extra},
    }


def test_timestamp_is_utc_to_the_millisecond() -> None:
    assert timestamp(AT) == "2026-05-28T20:26:40.250Z"


def test_a_recall_line_has_its_hits_without_their_text() -> None:
    line = call_line(
        session="s",
        tool="lambo_recall",
        arguments={"agent_id": "a1", "query": "why"},
        answer=recall_answer(),
        ms=3.14159,
        at=AT,
    )
    assert line["kind"] == "call" and line["outcome"] == "ok" and line["ms"] == 3.14
    assert line["agent_id"] == "a1" and line["by"] == "text" and line["query"] == "why"
    assert [h["node_id"] for h in line["hits"]] == ["n1", "n2"]
    assert "secret text" not in json.dumps(line)
    assert line["possibly_superseded"] == 1 and line["warnings"] == 2


def test_a_recall_by_image_or_vector_says_only_by() -> None:
    image = {"agent_id": "a", "image": {"mime": "image/png", "data": "iVBORw0KGgoAAAA"}}
    vector = {"agent_id": "a", "query_vector": {"values": [0.125, 0.5], "contract": {}}}
    for args, by in ((image, "image"), (vector, "vector")):
        line = call_line(
            session="s", tool="lambo_recall", arguments=args, answer=recall_answer(), ms=1, at=AT
        )
        text = json.dumps(line)
        assert line["by"] == by
        assert "iVBORw0KGgo" not in text and "0.125" not in text


def test_a_layered_recall_counts_hits_per_session() -> None:
    answer = recall_answer()
    answer["structuredContent"]["hits"][0]["session"] = "proj"
    answer["structuredContent"]["hits"][1]["session"] = "general"
    line = call_line(
        session="proj",
        tool="lambo_recall",
        arguments={"agent_id": "a", "query": "q", "scope": "general"},
        answer=answer,
        ms=1,
        at=AT,
    )
    assert line["session_hits"] == {"proj": 1, "general": 1}
    assert line["scope"] == "general"


def test_a_refused_call_says_only_that_it_was_an_error() -> None:
    answer = {"content": [{"type": "text", "text": "query must be a string"}], "isError": True}
    line = call_line(
        session="s",
        tool="lambo_recall",
        arguments={"agent_id": "a", "query": "PAYLOAD-XYZ"},
        answer=answer,
        ms=1,
        at=AT,
    )
    assert line["outcome"] == "error"
    assert "PAYLOAD-XYZ" not in json.dumps(line) and "query must" not in json.dumps(line)


def test_an_invalid_agent_id_is_not_repeated() -> None:
    answer = {"content": [], "isError": True}
    line = call_line(
        session="s",
        tool="lambo_stats",
        arguments={"agent_id": "bad id\n\x00"},
        answer=answer,
        ms=1,
        at=AT,
    )
    assert "agent_id" not in line


def test_a_write_line_carries_its_receipt() -> None:
    answer = {
        "isError": False,
        "structuredContent": {
            "summary": "derived",
            "receipt": "r-1",
            "receipt_state": "intent_durable",
            "agent_id": "a",
            "warnings": [],
        },
    }
    line = call_line(
        session="s",
        tool="lambo_derive",
        arguments={"agent_id": "a", "concepts": [{"content": "CONTENT-Q"}]},
        answer=answer,
        ms=1,
        at=AT,
    )
    assert (line["receipt"], line["receipt_state"]) == ("r-1", "intent_durable")
    assert "CONTENT-Q" not in json.dumps(line)


def test_a_completion_line_has_counts_and_cosines_never_ids_or_text() -> None:
    receipt = {
        "receipt": "r-1",
        "state": "applied",
        "detail": "applied: text here",
        "created_count": 2,
        "matched_count": 1,
        "semantic_merged": 0,
        "reinforced": 1,
        "edges": 3,
        "embedded": 2,
        "replacement_candidates": {
            "total": 3,
            "candidates": [
                {
                    "id": "abcd1234",
                    "node_id": "n9",
                    "excerpt": "old text",
                    "cosine": 0.91,
                    "new_id": "ffff0000",
                    "merged": True,
                },
                {"id": "abcd1235", "node_id": "n8", "excerpt": "older", "cosine": 0.88},
            ],
        },
    }
    line = completion_line(session="s", tool="lambo_derive", agent_id="a", receipt=receipt, at=AT)
    assert line["state"] == "applied" and line["created_count"] == 2 and line["edges"] == 3
    assert line["replacement_candidates"] == 3
    assert line["replacement_cosines"] == [0.91, 0.88]
    assert line["replacement_merged"] == [True, False]
    assert "replacement_newer" not in line
    text = json.dumps(line)
    for leaked in ("abcd1234", "n9", "old text", "ffff0000", "text here"):
        assert leaked not in text


def test_a_heartbeat_line_is_the_stats_payload_with_the_role() -> None:
    stats = {
        "session": "s",
        "promotion_policy": "Swarm",
        "concept_count": 4,
        "receipt": {"receipt": "r"},
        "ledger_written_lines": 7,
    }
    line = heartbeat_line(session="s", role="hub", stats=stats, at=AT)
    assert line["kind"] == "heartbeat" and line["role"] == "hub"
    assert line["promotion_policy"] == "Swarm" and line["ledger_written_lines"] == 7
    assert "receipt" not in line


def _ledger_part(**n1: Any) -> dict[str, Any]:
    contradiction = {"kind": "contradiction", "line": "⚠ Contradicted at ... (id n3)", "by": "n3"}
    return {
        "hits": [
            {
                "node_id": "n1",
                "annotations": [contradiction],
                "fusion": {"bm25_rank": 1, "max": 0.9, "rrf": 1.0},
                **n1,
            },
            {"node_id": "n2", "annotations": []},
        ]
    }


def recall_line(private: object) -> dict[str, Any]:
    return call_line(
        session="s",
        tool="lambo_recall",
        arguments={"agent_id": "a", "query": "q"},
        answer=recall_answer(),
        ms=1,
        at=AT,
        private=private,
    )


def test_a_recall_line_carries_annotations_fusion_and_the_contradiction_warning() -> None:
    line = recall_line(_ledger_part())
    first, second = line["hits"]
    assert first["annotations"] == [
        {"kind": "contradiction", "line": "⚠ Contradicted at ... (id n3)", "by": "n3"}
    ]
    assert first["fusion"] == {"bm25_rank": 1, "max": 0.9, "rrf": 1.0}
    assert second["annotations"] == [] and "fusion" not in second
    assert line["contradiction_warning"] is True
    assert "secret text" not in json.dumps(line)


def test_no_contradiction_annotation_no_contradiction_warning() -> None:
    part = _ledger_part(annotations=[{"kind": "rests_on_contradicted", "line": "⚠ Rests on"}])
    line = recall_line(part)
    assert [a["kind"] for a in line["hits"][0]["annotations"]] == ["rests_on_contradicted"]
    assert "contradiction_warning" not in line
    # without the ledger's part (an answer from another path): the line is as before
    plain = recall_line(None)
    assert "contradiction_warning" not in plain
    assert all("annotations" not in h and "fusion" not in h for h in plain["hits"])


def test_a_malformed_ledger_part_is_left_out_never_copied() -> None:
    for private in ("junk", {"hits": "junk"}, {"hits": [["n1"]]}):
        line = recall_line(private)
        assert all("annotations" not in h for h in line["hits"])
    # a row for another hit is not pinned on this one; odd values inside are dropped
    line = recall_line(
        {
            "hits": [
                {"node_id": "n9", "annotations": [{"kind": "contradiction", "line": "x"}]},
                {
                    "node_id": "n2",
                    "annotations": [{"kind": "superseded", "line": "h", "raw": b"\x00"}, 7],
                    "fusion": {"max": 0.5, "rrf": True, "secret": 1.0},
                },
            ]
        }
    )
    first, second = line["hits"]
    assert "annotations" not in first and "contradiction_warning" not in line
    assert second["annotations"] == [{"kind": "superseded", "line": "h"}]
    assert second["fusion"] == {"max": 0.5}
