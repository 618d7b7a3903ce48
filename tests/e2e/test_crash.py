"""No acked write is lost: SIGKILL a serve right after its last ack, restart, count; on each
store that outlives a serve (SQLite, PostgreSQL)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from lambo_core.model import IntentState
from tests.e2e.conftest import open_served_store
from tests.e2e.raw_serve import RawServe

N = 500
# A wait that ends pending means other writes were queued ahead: ask again, this many times.
WAITS_PER_RECEIPT = 8


def wait_until_settled(serve: RawServe, receipt: str, agent: str) -> None:
    """Block on the receipt through lambo_stats (the server wakes the wait when it lands)."""
    for _ in range(WAITS_PER_RECEIPT):
        answer = serve.call(
            "lambo_stats", {"agent_id": agent, "receipt": receipt, "wait_ms": 34_000}
        )["receipt"]
        if answer["state"] not in ("pending", "pending_replay"):
            return
    raise AssertionError(f"{receipt} still {answer['state']}: {answer['detail']}")


def test_500_acked_derives_survive_sigkill(
    served_home: Path, served_shared_store: str, request: pytest.FixtureRequest
) -> None:
    serve = RawServe(served_home, None)
    acked = []
    for i in range(N):
        # Ten agents, so 500 writes in flight fit their lanes (64 outstanding each).
        ack = serve.call(
            "lambo_derive",
            {
                "agent_id": f"agent-{i % 10}",
                "concepts": [{"content": f"crash fact number {i}", "concept_type": "logic"}],
            },
        )
        assert ack["receipt_state"] == "pending"
        acked.append(ack["receipt"])
    serve.proc.send_signal(signal.SIGKILL)  # right after the last ack
    serve.proc.wait(10)
    serve.close()

    again = RawServe(served_home, None)
    try:
        for i, receipt in enumerate(acked):
            wait_until_settled(again, receipt, f"agent-{i % 10}")
        stats = again.call("lambo_stats", {"agent_id": "agent-a"})
        assert stats["write_queue_replay_owed"] == 0, stats
        assert stats["concept_count"] == N
        # The kill really left writes owed: the second serve applied them from their intents.
        assert stats["write_queue_replayed"] > 0
    finally:
        again.proc.terminate()
        again.proc.wait(30)
        again.close()

    store = open_served_store(served_shared_store, served_home, request)
    keys = [c.canonical_key for c in store.concepts("crash")]
    assert sorted(keys) == sorted(f"crash fact number {i}" for i in range(N))  # exactly once
    for receipt in acked:
        intent = store.get_intent(receipt)
        assert intent is not None and intent.state is IntentState.APPLIED
    assert store.pending_intents("crash") == []
    store.close()
