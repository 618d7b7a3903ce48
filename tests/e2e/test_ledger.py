"""serve --ledger through a real `lambo serve` over stdio: a line per call, counts that
match the file, and a reader-less FIFO that parks the writer, never a call."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from tests.e2e.conftest import body, run_lambo, stdio_params

SESSION = "ledger"
SEED = "the seed concept every inspect looks at"
CALLS = 1000


def mixed_call(i: int) -> tuple[str, dict[str, Any]]:
    """The i-th of a mix of every tool, a refused call among every ten."""
    agent = f"agent-{i % 4}"
    kind = i % 10
    if kind in (0, 1, 2):
        return "lambo_derive", {
            "agent_id": agent,
            "concepts": [
                {"content": f"fact number {i} about module {i % 37}", "concept_type": "logic"}
            ],
        }
    if kind in (3, 4):
        return "lambo_recall", {"agent_id": agent, "query": f"module {i % 37}"}
    if kind == 5:
        return "lambo_record_action", {
            "agent_id": agent,
            "action": f"edit module {i % 37}",
            "modifies": [f"module {i % 37} file"],
        }
    if kind == 6:
        return "lambo_inspect", {"agent_id": agent, "focus": SEED}
    if kind == 7:
        return "lambo_stats", {"agent_id": agent}
    if kind == 8:
        return "lambo_saints", {"agent_id": agent}
    return "lambo_recall", {"agent_id": agent, "query": "x", "top_k": 10_000}  # refused


async def seed(client: Client) -> None:
    """The concept inspect looks at, applied before the mix starts."""
    ack = body(
        await client.call_tool(
            "lambo_derive",
            {"agent_id": "seeder", "concepts": [{"content": SEED, "concept_type": "entity"}]},
        )
    )
    stats = body(
        await client.call_tool(
            "lambo_stats", {"agent_id": "seeder", "receipt": ack["receipt"], "wait_ms": 30_000}
        )
    )
    assert stats["receipt"]["state"] == "applied"


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_thousand_mixed_calls_one_line_each_no_drops(served_home: Path) -> None:
    ledger = served_home / "calls.jsonl"
    sent: list[str] = []
    probes: list[dict[str, Any]] = []

    async def scenario() -> None:
        params = stdio_params(served_home, SESSION, "--ledger", str(ledger))
        async with Client(params) as client:
            await seed(client)
            sent.extend(["lambo_derive", "lambo_stats"])
            for i in range(CALLS - 2):
                tool, args = mixed_call(i)
                result = await client.call_tool(tool, args)
                assert result.is_error == (i % 10 == 9), (tool, result.content)
                sent.append(tool)
            # probe until the writer has caught up: then written is the file's length
            for n in range(200):
                stats = body(await client.call_tool("lambo_stats", {"agent_id": f"probe-{n}"}))
                probes.append(stats)
                if stats["ledger_queued_lines"] == 0:
                    break
                await anyio.sleep(0.05)

    anyio.run(scenario)
    last = probes[-1]
    assert last["ledger_queued_lines"] == 0
    assert last["ledger_dropped_lines"] == 0
    assert last["ledger_dropped_channel_full"] == 0
    assert last["ledger_dropped_write_failed"] == 0
    assert last["ledger_path"] == str(ledger)
    lines = lines_of(ledger)
    calls = [line for line in lines if line["kind"] == "call"]
    assert [c["tool"] for c in calls[:CALLS]] == sent
    assert len(calls) == CALLS + len(probes)
    assert {c["session"] for c in lines} == {SESSION}
    # the last probe's own line comes after the lines it counted
    probe_at = next(
        i for i, line in enumerate(lines) if line.get("agent_id") == f"probe-{len(probes) - 1}"
    )
    assert probe_at == last["ledger_written_lines"]
    refused = [c for c in calls[:CALLS] if c["outcome"] == "error"]
    assert len(refused) == sum(1 for i in range(CALLS - 2) if i % 10 == 9)
    assert all("query" not in c and "hits" not in c for c in refused)
    recalls = [c for c in calls if c["tool"] == "lambo_recall" and c["outcome"] == "ok"]
    assert recalls and all(c["by"] == "text" and "hits" in c for c in recalls)
    writes = [c for c in calls if c["tool"] == "lambo_derive"]
    assert all(c["receipt"] and c["receipt_state"] for c in writes)
    beats = [line for line in lines if line["kind"] == "heartbeat"]
    assert beats and all(b["session"] == SESSION and "role" in b for b in beats)
    assert any(b.get("promotion_policy") == "Swarm" for b in beats if b["role"] == "hub")


def test_a_reader_less_fifo_parks_the_writer_not_the_calls(served_home: Path) -> None:
    fifo = served_home / "ledger.fifo"
    os.mkfifo(fifo)
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        async with Client(stdio_params(served_home, SESSION, "--ledger", str(fifo))) as client:
            await seed(client)
            for i in range(50):
                tool, args = mixed_call(i)
                await client.call_tool(tool, args)
            seen.update(body(await client.call_tool("lambo_stats", {"agent_id": "probe"})))

    anyio.run(scenario)
    assert seen["ledger_written_lines"] == 0
    assert seen["ledger_dropped_lines"] == 0
    # the 50 calls at least, and the heartbeat at start: all accepted, none on disk
    assert seen["ledger_queued_lines"] >= 50


def test_a_ledger_in_a_missing_folder_is_refused_naming_the_flag(served_home: Path) -> None:
    done = run_lambo(
        served_home, "serve", "--session", SESSION, "--ledger", str(served_home / "no" / "x")
    )
    assert done.returncode == 2
    assert "--ledger" in done.stderr and "does not exist" in done.stderr


def test_a_contradicted_recall_writes_annotations_the_client_never_gets(
    served_home: Path,
) -> None:
    ledger = served_home / "annotated.jsonl"

    anyio.run(write_contradiction, served_home)  # a fresh serve lists it at start
    # the reader speaks raw JSON-RPC: what the serve wrote on stdout, before any client model
    params = stdio_params(served_home, SESSION, "--ledger", str(ledger))
    with subprocess.Popen(
        [params.command, *params.args],
        env=params.env,
        cwd=params.cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as serve:
        rpc = _Rpc(serve)
        rpc.ask(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        )
        rpc.notify("notifications/initialized")
        raw = rpc.ask(
            "tools/call",
            {"name": "lambo_recall", "arguments": {"agent_id": "agent-b", "query": "user schema"}},
        )
        assert serve.stdin is not None
        serve.stdin.close()  # the serve stops at the end of its stdin, writing its ledger
        assert serve.wait(timeout=60) == 0
    answer = raw["result"]
    assert "_lambo_ledger" not in json.dumps(raw) and "bm25_rank" not in json.dumps(raw)
    assert all(
        "annotations" not in h and "fusion" not in h for h in answer["structuredContent"]["hits"]
    )
    (line,) = [c for c in lines_of(ledger) if c.get("tool") == "lambo_recall"]
    assert line["contradiction_warning"] is True
    by_kind = {a["kind"]: (hit, a) for hit in line["hits"] for a in hit["annotations"]}
    hit, contradiction = by_kind["contradiction"]
    beside, contradicts = by_kind["contradicts"]
    assert contradiction["line"].startswith("⚠ Contradicted at ")
    assert contradiction["by"] == beside["node_id"] and contradicts["target"] == hit["node_id"]
    warnings = answer["structuredContent"]["warnings"]
    assert contradiction["line"] in warnings and contradicts["line"] in warnings
    assert hit["fusion"]["bm25_rank"] == 1 and {"max", "rrf"} <= set(hit["fusion"])


async def write_contradiction(home: Path) -> None:
    """ "user schema", then agent-c's concept against it, through a serve that then stops."""
    from tests.e2e.test_recall_after_restart import derive

    async with Client(stdio_params(home, SESSION)) as client:
        await derive(client, "agent-a", {"content": "user schema", "concept_type": "entity"})
        await derive(
            client,
            "agent-c",
            {
                "content": "accounts replaced the users table",
                "concept_type": "observation",
                "against": ["user schema"],
            },
        )


def test_a_forwarder_records_the_annotations_the_hub_answered(served_home: Path) -> None:
    """The ledger's part crosses the hub wire: a forwarder's own line carries it."""
    ledger = served_home / "forwarder.jsonl"
    answers: list[dict[str, Any]] = []

    async def scenario() -> None:
        async with Client(stdio_params(served_home, SESSION)) as hub:
            body(await hub.call_tool("lambo_stats", {"agent_id": "hub"}))  # it holds the lease
            params = stdio_params(served_home, SESSION, "--ledger", str(ledger))
            async with Client(params) as forwarder:
                recalled = await forwarder.call_tool(
                    "lambo_recall", {"agent_id": "agent-b", "query": "user schema"}
                )
                answers.append(body(recalled))

    anyio.run(write_contradiction, served_home)
    anyio.run(scenario)
    (answer,) = answers
    assert all("annotations" not in h for h in answer["hits"])
    lines = lines_of(ledger)
    assert {b["role"] for b in lines if b["kind"] == "heartbeat"} == {"forwarder"}
    (line,) = [c for c in lines if c.get("tool") == "lambo_recall"]
    assert line["contradiction_warning"] is True
    kinds = [a["kind"] for hit in line["hits"] for a in hit["annotations"]]
    assert sorted(kinds) == ["contradiction", "contradicts"]
    assert all(a["line"] in answer["warnings"] for h in line["hits"] for a in h["annotations"])


class _Rpc:
    """Line-delimited JSON-RPC with a stdio serve, reading its raw answers."""

    def __init__(self, serve: subprocess.Popen[str]) -> None:
        assert serve.stdin is not None and serve.stdout is not None
        self.stdin, self.stdout, self.next_id = serve.stdin, serve.stdout, 0

    def notify(self, method: str) -> None:
        self.stdin.write(json.dumps({"jsonrpc": "2.0", "method": method}) + "\n")
        self.stdin.flush()

    def ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.stdin.write(json.dumps(message) + "\n")
        self.stdin.flush()
        while True:  # notifications may come first
            line = self.stdout.readline()
            assert line, "the serve closed its stdout"
            got: dict[str, Any] = json.loads(line)
            if got.get("id") == self.next_id:
                assert "result" in got, got
                return got


def test_a_layered_recall_line_carries_a_layer_hits_annotations(served_home: Path) -> None:
    """The merged recall's ledger part: a layer hit's annotation lines start with the
    layer's name, as its warnings do."""
    ledger = served_home / "layered.jsonl"
    layered = ("--layer", "general")
    answers: list[dict[str, Any]] = []

    async def write() -> None:
        async with Client(stdio_params(served_home, "proj", *layered)) as client:
            for agent, concept in (
                ("agent-a", {"content": "user schema", "concept_type": "entity"}),
                (
                    "agent-c",
                    {
                        "content": "accounts replaced the users table",
                        "concept_type": "observation",
                        "against": ["user schema"],
                    },
                ),
            ):
                ack = await client.call_tool(
                    "lambo_derive", {"agent_id": agent, "scope": "general", "concepts": [concept]}
                )
                receipt = body(ack)["receipt"]
                stats = body(
                    await client.call_tool(
                        "lambo_stats", {"agent_id": agent, "receipt": receipt, "wait_ms": 30_000}
                    )
                )
                assert stats["receipt"]["state"] == "applied"

    async def read() -> None:
        params = stdio_params(served_home, "proj", *layered, "--ledger", str(ledger))
        async with Client(params) as client:
            recalled = await client.call_tool(
                "lambo_recall", {"agent_id": "agent-b", "query": "user schema"}
            )
            answers.append(body(recalled))

    anyio.run(write)
    anyio.run(read)  # a fresh serve of general lists the contradiction at start
    (answer,) = answers
    assert all("annotations" not in h for h in answer["hits"])
    (line,) = [c for c in lines_of(ledger) if c.get("tool") == "lambo_recall"]
    assert line["session_hits"].get("general", 0) >= 1
    assert line["contradiction_warning"] is True
    notes = [(hit, a) for hit in line["hits"] for a in hit["annotations"]]
    assert notes and all(a["line"].startswith("[general] ⚠") for _, a in notes)
    assert all(a["line"] in answer["warnings"] for _, a in notes)
    hit = next(h for h, a in notes if a["kind"] == "contradiction")
    assert hit["session"] == "general" and "fusion" in hit
