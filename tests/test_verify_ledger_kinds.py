"""session verify's reading of a --ledger file: the kinds on one session's recall lines;
other sessions' and other kinds of line passed over, malformed lines counted, never shown."""

from __future__ import annotations

import json
from typing import Any

from lambo_core.session_verify import KINDS, LedgerKinds, VerifyReport, ledger_kinds, render_verify


def recall(session: str, *hits: dict[str, Any], outcome: str = "ok") -> bytes:
    line = {"kind": "call", "tool": "lambo_recall", "session": session, "outcome": outcome}
    return json.dumps({**line, "hits": list(hits)}).encode()


def hit(node_id: str, *kinds: str) -> dict[str, Any]:
    """A hit row whose annotations name a concept each, as ``describe`` writes them."""
    return {
        "node_id": node_id,
        "annotations": [{"kind": k, "line": "⚠", "cited": "c0", "by": "b0"} for k in kinds],
    }


def test_kinds_are_counted_per_annotation_with_the_hits_as_examples() -> None:
    lines = [
        recall("s", hit("a1", "contradiction"), hit("b1", "contradicts")),
        recall("s", hit("a1", "contradiction", "rests_on_contradicted"), hit("c1")),
        recall("other", hit("z9", "superseded")),  # another session's
        recall("s", hit("y1", "superseded"), outcome="error"),  # (never written so, still)
        json.dumps({"kind": "heartbeat", "session": "s"}).encode(),
        b"",
    ]
    found = ledger_kinds("f", lines, "s")
    assert found.recall_lines == 2 and found.malformed_lines == 0
    assert found.counts == {
        "contradiction": 2,
        "contradicts": 1,
        "rests_on_contradicted": 1,
        "possibly_superseded": 0,
        "superseded": 0,
    }
    assert found.as_dict()["annotation_kinds"]["contradiction"] == {"count": 2, "examples": ["a1"]}


def test_a_flagged_hit_counts_as_possibly_superseded_whether_or_not_its_line_showed() -> None:
    shown = {**hit("old1", "possibly_superseded"), "possibly_superseded_by": "new1"}
    unshown = {**hit("old2"), "possibly_superseded_by": "new2"}  # the line was turned off
    found = ledger_kinds("f", [recall("s", shown, unshown, hit("new1"))], "s")
    assert found.counts["possibly_superseded"] == 2  # the shown one is not counted twice
    assert found.hits["possibly_superseded"] == {"old1", "old2"}


def test_the_rests_on_summary_line_is_not_one_more_contradicted_concept() -> None:
    cited = {"kind": "rests_on_contradicted", "line": "⚠ Rests on", "cited": "c1", "by": "b1"}
    summary = {"kind": "rests_on_contradicted", "line": "⚠ Rests on 2 more contradicted"}
    row = {"node_id": "a1", "annotations": [cited, summary]}
    assert ledger_kinds("f", [recall("s", row)], "s").counts["rests_on_contradicted"] == 1


def test_malformed_lines_are_skipped_and_counted_never_echoed() -> None:
    lines = [
        b"{not json SECRET",
        b"\xff\xfe SECRET",
        b"[1, 2]",
        json.dumps(
            {
                "kind": "call",
                "tool": "lambo_recall",
                "session": "s",
                "outcome": "ok",
                "hits": "SECRET",
            }
        ).encode(),
        recall("s", hit("a1", "possibly_superseded")),
        recall("s", {"node_id": "q", "annotations": ["SECRET", {"kind": "SECRET"}]}),
    ]
    found = ledger_kinds("f", lines, "s")
    assert found.malformed_lines == 4 and found.recall_lines == 2
    assert found.counts["possibly_superseded"] == 1 and sum(found.counts.values()) == 1
    report = VerifyReport("s", 0, 0, ledger=found)
    text = render_verify(report)
    assert "SECRET" not in text and "SECRET" not in json.dumps(report.as_dict())
    assert "(2 line(s) of this session, 4 malformed line(s) skipped)" in text
    assert set(report.as_dict()["ledger"]["annotation_kinds"]) == set(KINDS)


def test_no_ledger_no_ledger_section() -> None:
    report = VerifyReport("s", 0, 0)
    assert "ledger" not in report.as_dict() and "ledger" not in render_verify(report)
    assert LedgerKinds("f").as_dict()["recall_lines"] == 0
