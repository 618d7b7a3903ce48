"""A clean stop hands its queue on: SIGTERM or the end of stdin with 200+ writes queued.

Each serve acks 240 derives from four agents (60 each, inside the 64-write lane) and is
stopped at once, alternately by SIGTERM and by closing its stdin, five times each. The
stop must exit 0 inside its budget, settle every write it did not apply intent_durable
(the waits in flight hear it; the serve's own report counts the rest), and the next serve
must answer each receipt applied_after_restart. At the end the store holds every write
exactly once.
"""

from __future__ import annotations

import contextlib
import re
import signal
from pathlib import Path

from lambo_core.model import IntentState
from lambo_core.store import SqliteStore
from tests.e2e.raw_serve import RawServe

AGENTS = 4
PER_AGENT = 63  # inside the 64-write lane even if nothing applies meanwhile
QUEUED = 200  # at least this many still queued when the stop begins
REPEATS = 5  # of each way of stopping
WAITS_PER_AGENT = 4  # 16 in flight: the server's wait bound
BUDGET_S = 15.0  # [serve] shutdown_budget_s's default
SESSION = "stop"
STOPPED = re.compile(
    r"stopped in (?P<secs>[\d.]+) s: (?P<applied>\d+) write\(s\) applied, (?P<deferred>\d+) "
    r"handed on as durable intents \(intent_durable\), (?P<unflushed>\d+) close_unflushed"
)


def fact(rep: int, i: int) -> str:
    return f"clean stop {rep} wrote fact {i} about the widget cache"


def stop_report(log: Path) -> re.Match[str]:
    text = log.read_text(errors="replace")
    found = STOPPED.search(text)
    assert found is not None, text[-3000:]
    assert "shutdown budget ran out" not in text and "final flush did not complete" not in text
    return found


def test_sigterm_and_end_of_stdin_hand_queued_writes_on(served_home: Path, tmp_path: Path) -> None:
    store_path = tmp_path / "stop.db"
    owed: list[tuple[str, str]] = []  # (agent, receipt) the previous serve acked
    everything: list[str] = []
    ways = ["sigterm", "eof"] * REPEATS
    for rep, how in enumerate([*ways, "last"]):
        log = tmp_path / f"serve-{rep}.log"
        with (
            log.open("wb") as err,
            contextlib.closing(
                RawServe(served_home, store_path, session=SESSION, stderr=err)
            ) as serve,
        ):
            # The previous serve's writes, each waited on through its own receipt here.
            for agent, receipt in owed:
                answer = serve.call(
                    "lambo_stats", {"agent_id": agent, "receipt": receipt, "wait_ms": 34_000}
                )
                assert answer["receipt"]["state"] == "applied_after_restart", answer["receipt"]
            if how == "last":
                assert serve.proc.stdin is not None
                serve.proc.stdin.close()
                assert serve.proc.wait(BUDGET_S + 30) == 0
                break

            # Sent without waiting for each ack (pipelined), so few apply meanwhile.
            sent = []
            for i in range(AGENTS * PER_AGENT):
                agent = f"agent-{i % AGENTS}"
                arguments = {
                    "agent_id": agent,
                    "concepts": [{"content": fact(rep, i), "concept_type": "logic"}],
                }
                sent.append((agent, serve.start_call("lambo_derive", arguments)))
            acked: list[tuple[str, str]] = []
            for agent, request_id in sent:
                ack = serve.answer(request_id)["result"]["structuredContent"]
                assert ack["receipt_state"] == "pending"
                acked.append((agent, ack["receipt"]))
            # Waits in flight on each agent's last receipts: the stop must answer them.
            waits = {
                serve.start_call(
                    "lambo_stats", {"agent_id": agent, "receipt": receipt, "wait_ms": 34_000}
                ): receipt
                for agent, receipt in acked[-AGENTS * WAITS_PER_AGENT :]
            }
            # A call answered after them means the serve has read them and they are waiting.
            queued = serve.call("lambo_stats", {"agent_id": "agent-0"})["write_queue_outstanding"]
            assert queued >= QUEUED, queued  # really stopped with a queue
            if how == "sigterm":
                serve.proc.send_signal(signal.SIGTERM)
            else:
                assert serve.proc.stdin is not None
                serve.proc.stdin.close()
            for request_id, receipt in waits.items():
                result = serve.answer(request_id)["result"]
                assert not result["isError"], result
                got = result["structuredContent"]["receipt"]
                assert got["receipt"] == receipt
                assert got["state"] == "intent_durable", got
            # Failure bound, not a pacing: the serve's own report says how long it took.
            assert serve.proc.wait(BUDGET_S + 30) == 0
        report = stop_report(log)
        assert float(report["secs"]) < BUDGET_S
        assert int(report["unflushed"]) == 0
        assert int(report["applied"]) + int(report["deferred"]) == len(acked)
        assert int(report["deferred"]) > 0, report.group(0)
        owed = acked
        everything += [receipt for _, receipt in acked]

    store = SqliteStore(store_path)
    try:
        contents = sorted(c.content for c in store.concepts(SESSION))
        expected = sorted(
            fact(rep, i) for rep in range(len(ways)) for i in range(AGENTS * PER_AGENT)
        )
        assert contents == expected  # every write, exactly once
        for receipt in everything:
            intent = store.get_intent(receipt)
            assert intent is not None and intent.state is IntentState.APPLIED
        assert store.pending_intents(SESSION) == []
    finally:
        store.close()


def test_a_forwarder_whose_client_leaves_still_answers_its_calls_in_flight(
    served_home: Path, tmp_path: Path
) -> None:
    store_path = tmp_path / "fwd.db"
    with (tmp_path / "hub.log").open("wb") as hub_log, (tmp_path / "fwd.log").open("wb") as log:
        hub = RawServe(served_home, store_path, session=SESSION, stderr=hub_log)
        forwarder = RawServe(served_home, store_path, session=SESSION, stderr=log)
        try:
            assert forwarder.call("lambo_stats", {"agent_id": "a"})["holder_pid"] == hub.proc.pid
            receipts = [
                forwarder.call(
                    "lambo_derive",
                    {
                        "agent_id": "a",
                        "concepts": [{"content": fact(99, i), "concept_type": "logic"}],
                    },
                )["receipt"]
                for i in range(40)
            ]
            waiting = forwarder.start_call(
                "lambo_stats", {"agent_id": "a", "receipt": receipts[-1], "wait_ms": 500}
            )
            forwarder.call("lambo_stats", {"agent_id": "a"})  # the wait has been read
            assert forwarder.proc.stdin is not None
            forwarder.proc.stdin.close()
            result = forwarder.answer(waiting)["result"]
            # answered by the hub, not "the holder stopped answering"
            assert not result["isError"], result
            assert result["structuredContent"]["receipt"]["state"] in ("pending", "applied")
            assert forwarder.proc.wait(BUDGET_S + 30) == 0
        finally:
            forwarder.close()
            assert hub.proc.stdin is not None
            hub.proc.stdin.close()
            assert hub.proc.wait(BUDGET_S + 30) == 0
            hub.close()
