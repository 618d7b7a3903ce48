"""No acked write is lost when a real `lambo serve` is SIGKILLed in the middle of a batch: some
of the batch's writes applied, the rest embedded but not applied, more queued behind it."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from lambo_core.model import IntentState
from lambo_core.paths import resolve_paths
from lambo_core.store import SqliteStore
from tests.e2e.conftest import serve_env, sitecustomize
from tests.e2e.raw_serve import RawServe
from tests.e2e.test_crash import wait_until_settled

N = 300
AGENTS = 10  # 300 writes in flight fit their lanes (64 outstanding each)

# The serve's apply worker stops before the fourth write of the first batch of at least 8
# (three of them applied, the others embedded and held), says so in a file, and sleeps
# there until the test kills it.
MID_BATCH = """
import os, time
from lambo_core.writes.pipeline import WritePipeline

_marker = os.environ["LAMBO_E2E_BATCH_MARKER"]
_take, _turn = WritePipeline._take_batch, WritePipeline._turn
_now = {"size": 0, "turns": 0}

def _take_batch(self, head):
    batch, texts = _take(self, head)
    _now.update(size=len(batch), turns=0)
    return batch, texts

def _held_turn(self, intent, prepared, *, back_to_back):
    _now["turns"] += 1
    if _now["size"] >= 8 and _now["turns"] == 4 and not os.path.exists(_marker):
        with open(_marker + ".tmp", "w") as f:
            f.write(f"{_now['size']} {intent.receipt_id}\\n")
        os.replace(_marker + ".tmp", _marker)
        time.sleep(600)
    return _turn(self, intent, prepared, back_to_back=back_to_back)

WritePipeline._take_batch = _take_batch
WritePipeline._turn = _held_turn
"""


def test_a_sigkill_mid_batch_loses_no_acked_write(served_home: Path, tmp_path: Path) -> None:
    marker = tmp_path / "mid-batch"
    env = {**sitecustomize(tmp_path / "site", MID_BATCH), "LAMBO_E2E_BATCH_MARKER": str(marker)}
    serve = RawServe(served_home, None, env=env)
    acked = []
    for i in range(N):
        ack = serve.call(
            "lambo_derive",
            {
                "agent_id": f"agent-{i % AGENTS}",
                "concepts": [{"content": f"batched crash fact {i}", "concept_type": "logic"}],
            },
        )
        assert ack["receipt_state"] == "pending"
        acked.append(ack["receipt"])
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert time.monotonic() < deadline, "the serve never held a batch of 8 or more"
        assert serve.proc.poll() is None, "the serve exited"
        time.sleep(0.05)
    size, stopped_at = marker.read_text().split()
    assert int(size) >= 8
    serve.proc.send_signal(signal.SIGKILL)  # three of that batch applied, the rest not
    serve.proc.wait(10)
    serve.close()

    db = resolve_paths(serve_env(served_home)).default_store
    store = SqliteStore(db)
    try:
        at_kill = {r: store.get_intent(r) for r in acked}
    finally:
        store.close()
    states = [i.state if i is not None else None for i in at_kill.values()]
    assert IntentState.APPLIED in states and IntentState.PENDING in states
    assert states.count(None) == 0  # every acked write's intent was in the store
    first_owed = acked.index(stopped_at)
    # in order: everything before the write the worker stopped at applied, nothing after it
    assert set(states[:first_owed]) == {IntentState.APPLIED}
    assert set(states[first_owed:]) == {IntentState.PENDING}

    again = RawServe(served_home, None)  # no sitecustomize: a plain serve replays them
    try:
        for i, receipt in enumerate(acked):
            wait_until_settled(again, receipt, f"agent-{i % AGENTS}")
        stats = again.call("lambo_stats", {"agent_id": "agent-a"})
        assert stats["write_queue_replay_owed"] == 0, stats
        assert stats["write_queue_replayed"] == N - first_owed
        assert stats["concept_count"] == N
    finally:
        again.proc.terminate()
        again.proc.wait(30)
        again.close()

    store = SqliteStore(db)
    try:
        keys = [c.canonical_key for c in store.concepts("crash")]
        assert sorted(keys) == sorted(f"batched crash fact {i}" for i in range(N))  # once each
        assert all(
            getattr(store.get_intent(r), "state", None) is IntentState.APPLIED for r in acked
        )
        assert store.pending_intents("crash") == []
    finally:
        store.close()
