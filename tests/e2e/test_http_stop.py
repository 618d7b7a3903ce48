"""SIGTERM stops an HTTP serve of two sessions the way a stdio stop does, for each session.

Each session gets derives from four agents, acked over HTTP and sent concurrently so most
are still queued; waits on the last receipts are in flight when the serve is told to stop.
The serve must exit 0 inside its budget, answer those waits (a write it did not apply
settles intent_durable), report a stop for each session, and the next serve must answer
every receipt applied or applied_after_restart, with every write in the store once.
"""

from __future__ import annotations

import re
from pathlib import Path

import anyio
from mcp import Client

from lambo_core.store import SqliteStore
from tests.e2e.conftest import body
from tests.e2e.http_serve import HttpServe, http_client, serve_settings

SESSIONS = ("north", "south")
AGENTS = 4
PER_AGENT = 40  # inside the 64-write lane
WAITS_PER_AGENT = 2
BUDGET_S = 15.0  # [serve] shutdown_budget_s's default
STOPPED = re.compile(
    r"session (?P<session>\w+): stopped in (?P<secs>[\d.]+) s: (?P<applied>\d+) write\(s\) "
    r"applied, (?P<deferred>\d+) handed on as durable intents"
)


def fact(session: str, i: int) -> str:
    return f"{session} wrote fact {i} about the widget cache"


async def _ack_all(client: Client, session: str) -> list[tuple[str, str]]:
    acked: list[tuple[str, str]] = []

    async def one(i: int) -> None:
        agent = f"agent-{i % AGENTS}"
        ack = body(
            await client.call_tool(
                "lambo_derive",
                {
                    "agent_id": agent,
                    "concepts": [{"content": fact(session, i), "concept_type": "logic"}],
                },
            )
        )
        assert ack["receipt_state"] == "pending"
        acked.append((agent, str(ack["receipt"])))

    async with anyio.create_task_group() as tg:
        for i in range(AGENTS * PER_AGENT):
            tg.start_soon(one, i)
    return acked


def test_sigterm_stops_every_session_and_hands_queued_writes_on(
    served_home: Path, tmp_path: Path
) -> None:
    store_path = tmp_path / "stop.db"
    # every derive at once, past the default rates: this test is about the stop
    serve_settings(served_home, per_credential_rps=5000.0, per_session_rps=5000.0)
    # one model call per write, so writes are still queued when the stop comes (the batched
    # writer drains this queue before the stats call; tests/test_write_batches.py stops
    # mid batch)
    with (served_home / "config" / "lambo.toml").open("a", encoding="utf-8") as fh:
        fh.write("\n[writes]\nembed_batch = 1\n")
    acked: dict[str, list[tuple[str, str]]] = {}
    waited: dict[str, list[dict[str, object]]] = {s: [] for s in SESSIONS}
    with HttpServe(served_home, store_path, SESSIONS) as serve:

        async def scenario() -> None:
            async with (
                http_client(serve.url(SESSIONS[0]), mode="legacy") as north,
                http_client(serve.url(SESSIONS[1]), mode="legacy") as south,
            ):
                clients = {SESSIONS[0]: north, SESSIONS[1]: south}
                for session, client in clients.items():
                    acked[session] = await _ack_all(client, session)

                async def wait(session: str, agent: str, receipt: str) -> None:
                    result = await clients[session].call_tool(
                        "lambo_stats", {"agent_id": agent, "receipt": receipt, "wait_ms": 34_000}
                    )
                    waited[session].append(body(result)["receipt"])

                async with anyio.create_task_group() as tg:
                    for session in SESSIONS:
                        for agent, receipt in acked[session][-AGENTS * WAITS_PER_AGENT :]:
                            tg.start_soon(wait, session, agent, receipt)
                    # answered after the waits were sent: they have reached the serve
                    for client in clients.values():
                        stats = body(await client.call_tool("lambo_stats", {"agent_id": "x"}))
                        assert stats["write_queue_outstanding"] > 0
                    serve.proc.send_signal(15)

        anyio.run(scenario)
        assert serve.wait_exit(BUDGET_S + 30) == 0
    reports = {m["session"]: m for m in STOPPED.finditer(serve.log)}
    assert set(reports) == set(SESSIONS), serve.log[-3000:]
    for session in SESSIONS:
        report = reports[session]
        assert float(report["secs"]) < BUDGET_S
        assert int(report["applied"]) + int(report["deferred"]) <= len(acked[session])
        states = {r["state"] for r in waited[session]}
        assert len(waited[session]) == AGENTS * WAITS_PER_AGENT
        assert states <= {"applied", "intent_durable"}, states
    assert any(int(r["deferred"]) > 0 for r in reports.values()), serve.log[-2000:]

    # The next serve answers every receipt and holds every write once.
    with HttpServe(served_home, store_path, SESSIONS) as again:

        async def check() -> None:
            for session in SESSIONS:
                async with http_client(again.url(session)) as client:
                    for agent, receipt in acked[session]:
                        got = body(
                            await client.call_tool(
                                "lambo_stats",
                                {"agent_id": agent, "receipt": receipt, "wait_ms": 34_000},
                            )
                        )["receipt"]
                        assert got["state"] in ("applied", "applied_after_restart"), got

        anyio.run(check)
        assert again.stop() == 0
    store = SqliteStore(store_path)
    try:
        for session in SESSIONS:
            contents = sorted(c.content for c in store.concepts(session))
            assert contents == sorted(fact(session, i) for i in range(AGENTS * PER_AGENT))
            assert store.pending_intents(session) == []
    finally:
        store.close()
