"""A clean stop of the write pipeline: what it applies, what it hands on, what it reports.

Real SQLite and the real MiniLM; the embedder is gated where a test must hold the worker
inside a write, and the store made to refuse writes where a test needs a failing flush.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from lambo_core.embed.loader import LazyEmbedder
from lambo_core.embed.onnx import OnnxEmbedder
from lambo_core.model import IntentState
from lambo_core.receipts import ReceiptState
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import SqliteStore
from lambo_core.writes import StopReport, WritePipeline
from tests.flaky_store import FlakyStore

S = ReceiptState
DEADLINE_S = 30.0  # a failure bound for anything that waits on another thread


class GatedEmbedder:
    """MiniLM, but each embed call waits until the test opens the gate."""

    def __init__(self, inner: OnnxEmbedder) -> None:
        self.inner = inner
        self.gate = threading.Event()
        self.entered = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def embed(self, texts: Any) -> Any:
        self.entered.set()
        assert self.gate.wait(DEADLINE_S), "the test never opened the gate"
        return self.inner.embed(texts)


def loading_model(minilm: OnnxEmbedder) -> tuple[EmbedderPlan, threading.Event]:
    """A plan whose model is still loading until the test sets the event."""
    loaded = threading.Event()

    def load() -> Any:
        assert loaded.wait(DEADLINE_S)
        return minilm

    return EmbedderPlan(lazy=LazyEmbedder(load).start(), contract=minilm.contract), loaded


def derive(p: WritePipeline, content: str, agent: str = "agent-a") -> str:
    ack = p.submit(
        "lambo_derive",
        {"agent_id": agent, "concepts": [{"content": content, "concept_type": "logic"}]},
    )
    assert ack.structured["receipt_state"] == "pending", ack.text
    return str(ack.structured["receipt"])


def state(p: WritePipeline, receipt: str, agent: str = "agent-a") -> ReceiptState:
    return p.session.receipts.lookup(receipt, agent, p.session.name).state


def admission_closes(p: WritePipeline, monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """An event set once the stop has closed the receipt book (admission closed from then on)."""
    closed = threading.Event()
    close = p.session.receipts.close

    def close_then_tell() -> None:
        close()
        closed.set()

    monkeypatch.setattr(p.session.receipts, "close", close_then_tell)
    return closed


def close_in_thread(p: WritePipeline, **kw: Any) -> tuple[threading.Thread, list[StopReport]]:
    reports: list[StopReport] = []
    thread = threading.Thread(target=lambda: reports.append(p.close(**kw)))
    thread.start()
    return thread, reports


def test_stop_finishes_the_write_in_hand_and_hands_the_rest_on(
    tmp_path: Path, minilm: OnnxEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.db"
    gated = GatedEmbedder(minilm)
    p = WritePipeline(Session.open(SqliteStore(path), "s", EmbedderPlan.ready(gated))).start()
    closed = admission_closes(p, monkeypatch)
    receipts = [derive(p, f"queued fact {i}", agent=f"agent-{i % 4}") for i in range(40)]
    assert gated.entered.wait(DEADLINE_S)  # the worker is inside the first write
    thread, reports = close_in_thread(p, timeout=DEADLINE_S)
    assert closed.wait(DEADLINE_S)
    late = p.submit(
        "lambo_derive",
        {"agent_id": "x", "concepts": [{"content": "late", "concept_type": "logic"}]},
    )
    assert late.structured["receipt_state"] == "dropped"  # admission is closed
    gated.gate.set()
    thread.join(DEADLINE_S)
    (report,) = reports
    assert report.worker_stopped and report.flushed
    assert (report.applied, report.deferred, report.unflushed) == (1, 39, 0)
    agents = [f"agent-{i % 4}" for i in range(40)]
    assert state(p, receipts[0], agents[0]) is S.APPLIED
    assert {state(p, r, a) for r, a in zip(receipts[1:], agents[1:], strict=True)} == {
        S.INTENT_DURABLE
    }
    stats = p.stats()
    assert (stats["write_queue_deferred"], stats["write_queue_abandoned"]) == (39, 0)
    assert stats["write_queue_dropped_closed"] == 1
    p.session.store.close()

    # The next server replays them; each receipt answers applied_after_restart there.
    nxt = WritePipeline(Session.open(SqliteStore(path), "s", EmbedderPlan.ready(minilm))).start()
    try:
        assert nxt.replay_owed == 39
        for receipt, agent in zip(receipts, agents, strict=True):
            view = nxt.session.receipts.wait(receipt, agent, "s", 34_000)
            assert view.state is S.APPLIED_AFTER_RESTART, view
        contents = sorted(c.content for c in nxt.session.store.concepts("s"))
        assert contents == sorted(f"queued fact {i}" for i in range(40))
    finally:
        nxt.close()


def test_a_write_waiting_for_the_model_is_handed_on_not_failed(
    tmp_path: Path, minilm: OnnxEmbedder
) -> None:
    plan, loaded = loading_model(minilm)
    p = WritePipeline(Session.open(SqliteStore(tmp_path / "m.db"), "s", plan)).start()
    receipts = [derive(p, f"fact {i}") for i in range(3)]
    report = p.close(timeout=0.5)  # the model does not load within the stop's budget
    loaded.set()
    assert report.worker_stopped and (report.applied, report.deferred) == (0, 3)
    assert [state(p, r) for r in receipts] == [S.INTENT_DURABLE] * 3
    assert p.stats()["write_queue_failed"] == 0
    assert [i.state for i in p.session.store.pending_intents("s")] == [IntentState.PENDING] * 3


def test_a_model_that_loads_during_the_stop_lets_the_write_in_hand_apply(
    tmp_path: Path, minilm: OnnxEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan, loaded = loading_model(minilm)
    p = WritePipeline(Session.open(SqliteStore(tmp_path / "m.db"), "s", plan)).start()
    closed = admission_closes(p, monkeypatch)
    receipts = [derive(p, f"fact {i}") for i in range(3)]
    thread, reports = close_in_thread(p, timeout=DEADLINE_S)
    assert closed.wait(DEADLINE_S)
    loaded.set()  # a short-lived client's write, made while the model was loading
    thread.join(DEADLINE_S)
    (report,) = reports
    assert report.worker_stopped and (report.applied, report.deferred) == (1, 2)
    assert [state(p, r) for r in receipts] == [S.APPLIED, S.INTENT_DURABLE, S.INTENT_DURABLE]


def test_a_refused_final_flush_answers_close_unflushed(
    tmp_path: Path, minilm: OnnxEmbedder
) -> None:
    store = FlakyStore(SqliteStore(tmp_path / "f.db"))
    p = WritePipeline(Session.open(store, "s", EmbedderPlan.ready(minilm)))  # no worker
    queued = [derive(p, f"queued {i}") for i in range(3)]
    p.session.access_counts.record(["a-recalled-concept"])  # the write-behind owes a flush
    store.refuse.add("add_access_counts")  # the disk filled up, and stays full
    report = p.close(timeout=1.0)
    try:
        assert not report.flushed and (report.deferred, report.unflushed) == (0, 3)
        assert [state(p, r) for r in queued] == [S.CLOSE_UNFLUSHED] * 3
        assert p.stats()["write_queue_abandoned"] == 3
        assert "final flush did not complete" in report.summary()
        # the final flush never dead-letters: what it owed is still owed
        assert p.session.access_counts.pending("a-recalled-concept") == 1
    finally:
        p.session.access_counts.drain()


def test_a_retried_final_flush_that_completes_turns_them_intent_durable(
    tmp_path: Path, minilm: OnnxEmbedder
) -> None:
    store = FlakyStore(SqliteStore(tmp_path / "r.db"))
    p = WritePipeline(Session.open(store, "s", EmbedderPlan.ready(minilm))).start()
    first = derive(p, "an applied fact")
    assert p.session.receipts.wait(first, "agent-a", "s", 30_000).state is S.APPLIED
    gate = GatedEmbedder(minilm)
    p.session.plan = EmbedderPlan.ready(gate)  # hold the worker out of the queue
    queued = [derive(p, f"queued {i}") for i in range(3)]
    assert gate.entered.wait(DEADLINE_S)
    p.session.access_counts.record([c.id for c in p.session.store.concepts("s")])
    store.refuse.add("add_access_counts")
    store.times["add_access_counts"] = 2  # the first two flushes fail, then it recovers
    thread, reports = close_in_thread(p, timeout=DEADLINE_S)
    gate.gate.set()
    thread.join(DEADLINE_S)
    (report,) = reports
    assert report.flushed and (report.deferred, report.unflushed) == (2, 0)
    assert store.refused["add_access_counts"] == 2
    assert state(p, queued[0]) is S.APPLIED
    assert [state(p, r) for r in queued[1:]] == [S.INTENT_DURABLE] * 2
    stats = p.stats()
    assert (stats["write_queue_deferred"], stats["write_queue_abandoned"]) == (2, 0)


def test_a_lease_passed_to_another_writer_answers_close_unflushed(
    tmp_path: Path, minilm: OnnxEmbedder
) -> None:
    p = WritePipeline(Session.open(SqliteStore(tmp_path / "l.db"), "s", EmbedderPlan.ready(minilm)))
    queued = [derive(p, f"queued {i}") for i in range(2)]
    report = p.close(timeout=0.5, lease_held=lambda: False)
    assert not report.flushed and report.unflushed == 2
    assert [state(p, r) for r in queued] == [S.CLOSE_UNFLUSHED] * 2


def test_a_write_still_applying_past_the_budget_is_reported(
    tmp_path: Path, minilm: OnnxEmbedder
) -> None:
    gated = GatedEmbedder(minilm)
    p = WritePipeline(Session.open(SqliteStore(tmp_path / "b.db"), "s", EmbedderPlan.ready(gated)))
    p.start()
    in_hand, *rest = [derive(p, f"fact {i}") for i in range(3)]
    assert gated.entered.wait(DEADLINE_S)
    report = p.close(timeout=0.2)
    try:
        assert not report.worker_stopped
        assert "shutdown budget ran out" in report.summary()
        # the rest are handed on; the one in hand is neither, until the worker ends it
        assert state(p, in_hand) is S.PENDING
        assert [state(p, r) for r in rest] == [S.INTENT_DURABLE] * 2
    finally:
        gated.gate.set()
        assert p._thread is not None
        p._thread.join(DEADLINE_S)
    assert state(p, in_hand) is S.APPLIED


@pytest.mark.parametrize("budget", [0.5, 15.0])
def test_an_idle_pipeline_stops_at_once_and_reports_nothing_owed(
    tmp_path: Path, minilm: OnnxEmbedder, budget: float
) -> None:
    p = WritePipeline(Session.open(SqliteStore(tmp_path / "i.db"), "s", EmbedderPlan.ready(minilm)))
    report = p.start().close(timeout=budget)
    assert report.worker_stopped and report.flushed
    assert (report.applied, report.deferred, report.unflushed, report.replays_left) == (0, 0, 0, 0)


def test_the_shutdown_budget_must_end_well_inside_the_lease(tmp_path: Path) -> None:
    from lambo_core.config import load_config
    from lambo_core.errors import ConfigError
    from lambo_core.serve import shutdown_budget

    def config(budget: float) -> Any:
        (tmp_path / "lambo.toml").write_text(f"[serve]\nshutdown_budget_s = {budget}\n")
        return load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path)

    assert shutdown_budget(config(15.0)) == 15.0
    assert shutdown_budget(config(30.0)) == 30.0
    with pytest.raises(ConfigError) as refused:
        shutdown_budget(config(31.0))
    assert "serve.shutdown_budget_s is 31 s; it must be at most 30 s" in refused.value.message


def test_a_replay_that_fails_here_answers_failed_at_once_not_a_full_wait(
    tmp_path: Path,
) -> None:
    from lambo_core.errors import ConfigError

    def no_model() -> EmbedderPlan:
        return EmbedderPlan(lazy=None, contract=None, problem=ConfigError("no model installed"))

    path = tmp_path / "n.db"
    first = WritePipeline(Session.open(SqliteStore(path), "s", no_model())).start()
    receipt = derive(first, "a fact no model can embed")
    view = first.session.receipts.wait(receipt, "agent-a", "s", 30_000)
    assert view.state is S.FAILED  # transient: the intent is kept for a server with a model
    first.close()
    first.session.store.close()

    second = WritePipeline(Session.open(SqliteStore(path), "s", no_model())).start()
    try:
        assert second.wait_idle(DEADLINE_S)  # its replay was attempted, and failed again
        view = second.session.receipts.wait(receipt, "agent-a", "s", 34_000)
        assert view.state is S.FAILED
        assert "no model installed" in view.detail
        assert view.detail.endswith("the next server on this session replays it")
        assert second.session.receipts.lookup(receipt, "agent-b", "s").state is S.FORBIDDEN
        intent = second.session.store.get_intent(receipt)
        assert intent is not None and intent.state is IntentState.PENDING
    finally:
        second.close()


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_stop_signal_before_the_serve_runs_exits_0(signame: str) -> None:
    import subprocess
    import sys

    code = (
        "import os, signal, time\n"
        "from lambo_core.serve_signals import exit_cleanly_until_serving\n"
        "exit_cleanly_until_serving()\n"
        f"os.kill(os.getpid(), signal.{signame})\n"
        "time.sleep(30)\n"
        "raise SystemExit(3)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_a_stop_hands_on_the_write_it_gave_back_and_runs_no_background_job(
    tmp_path: Path, minilm: OnnxEmbedder
) -> None:
    plan, loaded = loading_model(minilm)
    p = WritePipeline(Session.open(SqliteStore(tmp_path / "j.db"), "s", plan))
    ran_while_stopping: list[bool] = []
    stop_over = threading.Event()

    def slow_job() -> None:  # a daemon cycle that would outlast the stop's join
        ran_while_stopping.append(p._stopping.is_set())
        if p._stopping.is_set():
            stop_over.wait(DEADLINE_S)

    p.every(0.01, slow_job)
    p.start()
    receipt = derive(p, "a fact made while the model loads")
    report = p.close(timeout=1.0)
    stop_over.set()
    loaded.set()
    assert report.worker_stopped, report.summary()
    assert (report.deferred, report.unflushed) == (1, 0)
    assert state(p, receipt) is S.INTENT_DURABLE
    assert True not in ran_while_stopping


def test_a_degraded_session_still_hands_on_intents_it_committed(
    tmp_path: Path, minilm: OnnxEmbedder
) -> None:
    from lambo_core.errors import StoreError

    store = FlakyStore(SqliteStore(tmp_path / "d.db"))
    p = WritePipeline(Session.open(store, "s", EmbedderPlan.ready(minilm)))  # no worker
    store.refuse.add("add_intent")
    store.times["add_intent"] = 1  # one intent refused, then the disk has room again
    with pytest.raises(StoreError):
        derive(p, "the refused one")
    assert p.health.degraded
    queued = [derive(p, f"kept {i}") for i in range(3)]  # their intents are committed
    report = p.close(timeout=5.0)
    assert report.flushed and (report.deferred, report.unflushed) == (3, 0)
    assert [state(p, r) for r in queued] == [S.INTENT_DURABLE] * 3


@pytest.mark.parametrize("budget", [0.0, 0.1])
def test_an_idle_pipeline_on_a_tiny_budget_still_stops_cleanly(
    tmp_path: Path, minilm: OnnxEmbedder, budget: float
) -> None:
    p = WritePipeline(Session.open(SqliteStore(tmp_path / "t.db"), "s", EmbedderPlan.ready(minilm)))
    report = p.start().close(timeout=budget)
    assert report.worker_stopped, report.summary()
