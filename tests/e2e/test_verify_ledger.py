"""`lambo session verify --ledger`: the annotation kinds a real `lambo serve --ledger` wrote
on the demo session's recall lines, beside the kinds the store gives (spec: lambo_recall,
"lambo session verify reports it by that kind")."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from tests.e2e.conftest import body, run_lambo, stdio_params

SESSION = "dm"
#: what the demo's second agent asks (lambo_core.demo's step 9)
QUERY = "user schema"
RECALL_ARGS = {"top_k": 3, "max_tokens": 400, "traversal_depth": 1}
#: the kinds the demo's story produces: a contradiction, the concept beside it, and the
#: facts that cite the contradicted schema (nothing superseded, nothing flagged)
DEMO_KINDS = {"contradiction", "contradicts", "rests_on_contradicted"}


def test_verify_reports_the_kinds_on_the_demos_ledger_lines(served_home: Path) -> None:
    db = served_home / "demo.db"
    ledger = served_home / "calls.jsonl"
    demo = run_lambo(served_home, "demo", "--store", str(db), "--session", SESSION, timeout=300)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    # a line of another session, and a malformed one, are in the file before the serve's
    ledger.write_text(
        json.dumps(
            {
                "kind": "call",
                "tool": "lambo_recall",
                "session": "other",
                "outcome": "ok",
                "hits": [{"node_id": "x", "annotations": [{"kind": "superseded", "line": "l"}]}],
            }
        )
        + "\n{not json SECRET-BYTES\n"
    )

    async def recall() -> None:
        params = stdio_params(served_home, SESSION, "--store", str(db), "--ledger", str(ledger))
        async with Client(params) as client:
            body(
                await client.call_tool(
                    "lambo_recall", {"agent_id": "agent-auth", "query": QUERY, **RECALL_ARGS}
                )
            )

    anyio.run(recall)  # the serve writes its ledger as it stops at the end of its stdin
    verify = run_lambo(
        served_home,
        "session",
        "verify",
        "--session",
        SESSION,
        "--store",
        str(db),
        "--ledger",
        str(ledger),
        "--json",
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    report: dict[str, Any] = json.loads(verify.stdout)
    store_kinds = {k for k, v in report["annotation_kinds"].items() if v["count"]}
    ledger_report = report["ledger"]
    seen = {k for k, v in ledger_report["annotation_kinds"].items() if v["count"]}
    assert store_kinds == DEMO_KINDS
    assert seen == DEMO_KINDS  # "other"'s superseded line is not this session's
    assert ledger_report["recall_lines"] == 1 and ledger_report["malformed_lines"] == 1
    kinds = ledger_report["annotation_kinds"]
    for kind in ("contradiction", "contradicts"):  # one each: the schema and the new fact
        assert kinds[kind]["examples"] == report["annotation_kinds"][kind]["examples"]
    assert kinds["contradiction"]["count"] == kinds["contradicts"]["count"] == 1
    assert 1 <= len(kinds["rests_on_contradicted"]["examples"]) <= 3
    text = run_lambo(
        served_home,
        "session",
        "verify",
        "--session",
        SESSION,
        "--store",
        str(db),
        "--ledger",
        str(ledger),
    )
    assert text.returncode == 0, text.stderr
    assert "1 malformed line(s) skipped" in text.stdout and "SECRET" not in text.stdout
    assert "  contradiction: 1 (e.g. " in text.stdout.split("ledger's recall lines")[1]


def test_verify_refuses_a_missing_ledger_naming_the_flag(served_home: Path) -> None:
    missing = served_home / "no-such.jsonl"
    result = run_lambo(
        served_home, "session", "verify", "--session", SESSION, "--ledger", str(missing)
    )
    assert result.returncode == 2
    assert "--ledger" in result.stderr
    folder = run_lambo(
        served_home, "session", "verify", "--session", SESSION, "--ledger", str(served_home)
    )
    assert folder.returncode == 2 and "--ledger" in folder.stderr


def test_verify_refuses_a_fifo_ledger_without_waiting_for_a_writer(served_home: Path) -> None:
    fifo = served_home / "calls.fifo"
    os.mkfifo(fifo)  # nobody writes it: a plain open would block forever
    result = run_lambo(
        served_home, "session", "verify", "--session", SESSION, "--ledger", str(fifo)
    )
    assert result.returncode == 2
    assert "--ledger" in result.stderr and "must be a regular file" in result.stderr
