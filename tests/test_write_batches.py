"""Micro-batched embedding in the apply worker: the writes queued behind the one in hand are
embedded in one embedder call, then each is applied in its turn with its own vectors.

Real SQLite, the real MiniLM, the real apply worker. The embedder is wrapped to count its
calls and, where a test must hold the worker inside a call, to wait for a permit per call.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lambo_core.embed.onnx import OnnxEmbedder
from lambo_core.model import IntentState, WriteIntent
from lambo_core.receipts import ReceiptState
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import SqliteStore
from lambo_core.writes import WritePipeline
from lambo_core.writes.embedding import texts_to_embed
from tests.test_stop import DEADLINE_S, close_in_thread, state

S = ReceiptState


class SteppedEmbedder:
    """MiniLM counting its calls; with ``stepped``, each call waits for a permit of its own."""

    def __init__(self, inner: OnnxEmbedder, *, stepped: bool = False, poison: str = "") -> None:
        self.inner = inner
        self.stepped = stepped
        self.poison = poison  # a text this embedder fails on, alone or in a batch
        self.permits = threading.Semaphore(0)
        self.calls: list[list[str]] = []
        self._called = threading.Condition()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def embed(self, texts: Any) -> Any:
        with self._called:
            self.calls.append(list(texts))
            self._called.notify_all()
        if self.stepped:
            assert self.permits.acquire(timeout=DEADLINE_S), "the test never let the call go"
        if self.poison and any(self.poison in t for t in texts):
            raise RuntimeError("the model choked on a text")
        return self.inner.embed(texts)

    def wait_calls(self, n: int) -> None:
        """Until the worker has made ``n`` calls (the last may be waiting for its permit)."""
        with self._called:
            made = self._called.wait_for(lambda: len(self.calls) >= n, DEADLINE_S)
        assert made, f"the worker made {len(self.calls)} embedder calls, not {n}"


def pipeline(path: Path, embedder: Any, **kw: Any) -> WritePipeline:
    return WritePipeline(Session.open(SqliteStore(path), "s", EmbedderPlan.ready(embedder)), **kw)


def one(content: str, agent: str = "agent-a", **kw: Any) -> dict[str, Any]:
    return {"agent_id": agent, "concepts": [{"content": content, "concept_type": "logic", **kw}]}


def submit(p: WritePipeline, args: dict[str, Any]) -> str:
    ack = p.submit("lambo_derive", args)
    assert ack.structured["receipt_state"] == "pending", ack.text
    return str(ack.structured["receipt"])


def intent_of(p: WritePipeline, receipt: str) -> WriteIntent:
    intent = p.session.store.get_intent(receipt)
    assert intent is not None, receipt
    return intent


def settle(p: WritePipeline, receipt: str, agent: str = "agent-a") -> Any:
    view = p.session.receipts.wait(receipt, agent, "s", 30_000)
    assert view.state is not S.PENDING, view
    return view


def held_behind_the_first(
    p: WritePipeline, emb: SteppedEmbedder, writes: list[dict[str, Any]]
) -> tuple[str, list[str]]:
    """Submit a first write and hold the worker inside its embedding, queue ``writes``
    behind it, then let the first go: the worker takes the queued ones as one batch."""
    calls = len(emb.calls)
    first = submit(p, one("the write in hand before the batch"))
    emb.wait_calls(calls + 1)
    receipts = [submit(p, w) for w in writes]
    emb.permits.release()
    return first, receipts


def test_queued_writes_are_embedded_in_one_call_and_applied_in_order(
    tmp_path: Path, minilm: OnnxEmbedder
) -> None:
    emb = SteppedEmbedder(minilm, stepped=True)
    p = pipeline(tmp_path / "b.db", emb).start()
    try:
        first, receipts = held_behind_the_first(
            p, emb, [one(f"batched fact number {i}") for i in range(20)]
        )
        emb.wait_calls(2)  # the batch's one call
        emb.permits.release()
        views = [settle(p, r) for r in [first, *receipts]]
        assert [v.state for v in views] == [S.APPLIED] * 21
        # one call for the first write, one for the twenty queued behind it
        assert [len(c) for c in emb.calls] == [1, 20]
        intents = [p.session.store.get_intent(r) for r in receipts]
        seqs = [i.seq for i in intents if i is not None and i.state is IntentState.APPLIED]
        assert len(seqs) == 20 and seqs == sorted(seqs)
        assert p.stats()["write_queue_applied"] == 21
        assert p.rates.keys()["write_queue_apply_samples"] == 21  # one sample per write
    finally:
        emb.stepped = False
        emb.permits.release(4)
        p.close()


def vectors_by_content(p: WritePipeline) -> dict[str, Any]:
    return {c.content: c.vector for c in p.session.store.concepts("s")}


def test_batched_vectors_are_the_ones_each_write_gets_alone(
    tmp_path: Path, minilm: OnnxEmbedder
) -> None:
    # Writes of different shapes: one concept, three concepts framed with their call's text,
    # a parent_of pair, long and short texts (they pad differently in one batch).
    writes = [one("the cache is warmed at boot")]
    writes.append(
        {
            "agent_id": "agent-a",
            "concepts": [
                {"content": f"the {w} stage retries twice before paging", "concept_type": "logic"}
                for w in ("build", "test", "deploy")
            ],
        }
    )
    writes.append(
        {
            "agent_id": "agent-a",
            "concepts": [{"content": "the billing service", "concept_type": "entity"}],
            "parent_of": [{"parent": "the billing service", "child": "the invoice renderer"}],
        }
    )
    writes += [one("a much longer fact " + "about the nightly backup window " * 12)]
    writes += [one(f"short fact {i}") for i in range(6)]

    stored = {}
    for batch in (1, 32):
        emb = SteppedEmbedder(minilm, stepped=True)
        p = pipeline(tmp_path / f"v{batch}.db", emb, embed_batch=batch).start()
        try:
            first, receipts = held_behind_the_first(p, emb, writes)
            emb.stepped = False
            emb.permits.release(len(writes) + 1)
            assert {settle(p, r).state for r in [first, *receipts]} == {S.APPLIED}
            stored[batch] = vectors_by_content(p)
            calls = [len(c) for c in emb.calls]
            texts = [len(texts_to_embed(intent_of(p, r).payload)) for r in receipts]
            if batch == 1:
                assert calls == [1, *texts]  # each write alone
            else:
                assert calls == [1, sum(texts)]  # every queued write in one call
        finally:
            p.close()
    assert stored[1].keys() == stored[32].keys() and len(stored[1]) >= 14
    for content, alone in stored[1].items():
        np.testing.assert_allclose(stored[32][content], alone, atol=1e-5, err_msg=content)
    # and against the model itself, one write at a time as texts_to_embed frames it
    payload = {"kind": "derive", "concepts": writes[1]["concepts"], "parent_of": []}
    direct = minilm.embed(texts_to_embed(payload))
    for row, concept in zip(direct, writes[1]["concepts"], strict=True):
        np.testing.assert_allclose(stored[32][concept["content"]], row, atol=1e-5)


def test_a_failing_write_fails_alone_and_every_other_receipt_applies_in_order(
    tmp_path: Path, minilm: OnnxEmbedder
) -> None:
    emb = SteppedEmbedder(minilm)
    p = pipeline(tmp_path / "f.db", emb).start()
    try:
        ruling = settle(p, submit(p, one("the old ruling")))
        rid = ruling.data["created"][0]
        emb.stepped = True
        writes = [one(f"decision {i} of the review") for i in range(8)]
        writes[3] = one("a decision resting on the ruling", depends_on=[rid])
        first, receipts = held_behind_the_first(p, emb, writes[:3])
        # queue the citing write and the rest behind it, then remove what it cites before
        # the worker reaches it: it fails on apply, inside the batch
        with p.session.index.lock:
            receipts += [submit(p, w) for w in writes[3:]]
            p.session.store.delete_concepts("s", [rid])
            p.session.index.remove_concepts([rid])
        emb.stepped = False
        emb.permits.release(8)
        views = {r: settle(p, r) for r in [first, *receipts]}
        failed = receipts[3]
        assert views[failed].state is S.FAILED
        assert "named something else when the write was applied" in views[failed].detail
        assert [views[r].state for r in receipts if r != failed] == [S.APPLIED] * 7
        created = [views[r].data["created"][0] for r in receipts if r != failed]
        graph = p.session.index.graph
        assert [getattr(graph.concept(n), "content", None) for n in created] == [
            w["concepts"][0]["content"] for i, w in enumerate(writes) if i != 3
        ]
        assert intent_of(p, failed).state is IntentState.FAILED
        applied = [intent_of(p, r) for r in receipts if r != failed]
        assert [i.seq for i in applied] == sorted(i.seq for i in applied)
        assert max(len(c) for c in emb.calls) > 1  # they really were batched
        assert (p.applied, p.failed) == (9, 1)
    finally:
        emb.stepped = False
        emb.permits.release(8)
        p.close()


def test_a_batched_call_that_fails_embeds_each_write_alone(
    tmp_path: Path, minilm: OnnxEmbedder
) -> None:
    emb = SteppedEmbedder(minilm, stepped=True, poison="the poisoned text")
    p = pipeline(tmp_path / "e.db", emb).start()
    try:
        writes = [one(f"healthy fact {i}") for i in range(5)]
        writes[2] = one("the poisoned text")
        _, receipts = held_behind_the_first(p, emb, writes)
        emb.stepped = False
        emb.permits.release(8)
        views = [settle(p, r) for r in receipts]
        assert views[2].state is S.FAILED
        assert "the embedder failed on this write" in views[2].detail
        # a failure of the embedder keeps the intent for a server whose model can do it
        assert views[2].detail.endswith("the next server on this session replays it")
        intent = p.session.store.get_intent(receipts[2])
        assert intent is not None and intent.state is IntentState.PENDING
        assert [v.state for i, v in enumerate(views) if i != 2] == [S.APPLIED] * 4
        # the batch's call (5 texts) failed; then each write alone
        assert [len(c) for c in emb.calls] == [1, 5, 1, 1, 1, 1, 1]
    finally:
        p.close()


def test_replays_are_batched_and_a_write_this_build_cannot_open_fails_alone(
    tmp_path: Path, minilm: OnnxEmbedder
) -> None:
    path = tmp_path / "r.db"
    store = SqliteStore(path)
    store.ensure_session("s", 1.0)
    for i in range(6):
        payload: dict[str, Any] = {
            "kind": "derive",
            "concepts": [
                {"content": f"owed fact {i}", "type": "logic", "against": [], "depends_on": []}
            ],
            "parent_of": [],
        }
        if i == 2:
            payload = {"kind": "from-a-later-build", "x": 1}
        store.add_intent(WriteIntent(f"r{i}", "s", "agent-a", "lambo_derive", payload, 1.0))
    emb = SteppedEmbedder(minilm, stepped=True)
    p = WritePipeline(Session.open(store, "s", EmbedderPlan.ready(emb))).start()
    try:
        emb.wait_calls(1)  # all six were queued before the worker started: one batch
        # an earlier holder settled the fourth applied before it let go
        store.settle_intent("r3", "applied", {"detail": "applied earlier"}, 2.0)
        emb.permits.release()
        assert p.wait_idle(DEADLINE_S)
        assert [len(c) for c in emb.calls] == [5]  # r2 has no text to embed
        assert p.replayed == 5 and p.replay_owed == 0 and p.failed == 0
        contents = sorted(c.content for c in store.concepts("s"))
        assert contents == [f"owed fact {i}" for i in (0, 1, 4, 5)]  # r3 not applied again
        states = [getattr(store.get_intent(f"r{i}"), "state", None) for i in range(6)]
        assert (
            states == [IntentState.APPLIED] * 2 + [IntentState.FAILED] + [IntentState.APPLIED] * 3
        )
    finally:
        p.close()
        store.close()


def test_a_stop_mid_batch_hands_the_rest_on_and_the_next_server_replays_them(
    tmp_path: Path, minilm: OnnxEmbedder
) -> None:
    path = tmp_path / "s.db"
    emb = SteppedEmbedder(minilm, stepped=True)
    p = pipeline(path, emb).start()
    agents = [f"agent-{i % 3}" for i in range(10)]
    first, receipts = held_behind_the_first(
        p, emb, [one(f"stopped fact {i}", agent=a) for i, a in enumerate(agents)]
    )
    emb.wait_calls(2)  # inside the batch's one call
    assert len(emb.calls[1]) == 10  # all ten behind the first, in one call
    thread, reports = close_in_thread(p, timeout=DEADLINE_S)
    deadline = time.monotonic() + DEADLINE_S
    while not p._stopping.is_set():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    emb.permits.release()  # the batch's call ends after the stop began
    thread.join(DEADLINE_S)
    (report,) = reports
    assert report.worker_stopped and report.flushed
    # the write in hand (the batch's first) applied; the nine behind it handed on
    assert (report.applied, report.deferred, report.unflushed) == (2, 9, 0)
    assert state(p, first) is S.APPLIED
    assert state(p, receipts[0], agents[0]) is S.APPLIED
    assert [state(p, r, a) for r, a in zip(receipts[1:], agents[1:], strict=True)] == [
        S.INTENT_DURABLE
    ] * 9
    assert p._in_flight == 0
    p.session.store.close()

    store = SqliteStore(path)
    owed = [i.receipt_id for i in store.pending_intents("s")]
    assert owed == receipts[1:]  # in their order
    nxt = WritePipeline(Session.open(store, "s", EmbedderPlan.ready(minilm))).start()
    try:
        assert nxt.replay_owed == 9
        for receipt, agent in zip(receipts, agents, strict=True):
            view = nxt.session.receipts.wait(receipt, agent, "s", 34_000)
            assert view.state in (S.APPLIED, S.APPLIED_AFTER_RESTART), view
        contents = sorted(c.content for c in nxt.session.store.concepts("s"))
        assert contents == sorted(
            ["the write in hand before the batch"] + [f"stopped fact {i}" for i in range(10)]
        )
    finally:
        nxt.close()


def test_a_stop_while_the_model_loads_hands_the_whole_batch_on(
    tmp_path: Path, minilm: OnnxEmbedder
) -> None:
    from tests.test_stop import loading_model

    store = SqliteStore(tmp_path / "m.db")
    store.ensure_session("s", 1.0)
    for i in range(5):  # owed by an earlier server: queued together, before the worker starts
        payload = {
            "kind": "derive",
            "concepts": [
                {"content": f"fact {i}", "type": "logic", "against": [], "depends_on": []}
            ],
            "parent_of": [],
        }
        store.add_intent(WriteIntent(f"m{i}", "s", "agent-a", "lambo_derive", payload, 1.0))
    plan, loaded = loading_model(minilm)
    p = WritePipeline(Session.open(store, "s", plan)).start()
    report = p.close(timeout=0.5)  # the model does not load within the stop's budget
    loaded.set()
    assert report.worker_stopped and (report.applied, report.replays_left) == (0, 5)
    assert p.stats()["write_queue_failed"] == 0 and p._in_flight == 0
    assert [i.receipt_id for i in store.pending_intents("s")] == [f"m{i}" for i in range(5)]
    store.close()


@pytest.mark.parametrize("bad", [0, -3, "many", True])
def test_embed_batch_is_refused_outside_its_rule(tmp_path: Path, bad: object) -> None:
    from lambo_core.config import load_config
    from lambo_core.errors import ConfigError

    shown = f'"{bad}"' if isinstance(bad, str) else str(bad).lower()
    (tmp_path / "lambo.toml").write_text(f"[writes]\nembed_batch = {shown}\n")
    with pytest.raises(ConfigError) as refused:
        load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path)
    text = refused.value.render()
    assert "writes.embed_batch" in text
    assert "must be at least 1" in text or "must be an integer" in text


def test_a_lease_lost_mid_batch_hands_the_write_and_the_rest_on_in_order(
    tmp_path: Path, minilm: OnnxEmbedder
) -> None:
    from lambo_core.hub import LeaseKeeper
    from tests.test_fencing import _take_over

    path = tmp_path / "shared.db"
    store = SqliteStore(path)
    keeper = LeaseKeeper(store, "s", "old", pid=11, host="h")
    assert keeper.try_acquire() is not None
    emb = SteppedEmbedder(minilm, stepped=True)
    p = WritePipeline(Session.open(store, "s", EmbedderPlan.ready(emb))).start()
    first, receipts = held_behind_the_first(p, emb, [one(f"fenced fact {i}") for i in range(6)])
    emb.wait_calls(2)  # inside the batch's one call
    assert len(emb.calls[1]) == 6
    _take_over(lambda: SqliteStore(path))  # the lease passes on while the batch embeds
    emb.permits.release()
    assert p._thread is not None
    p._thread.join(DEADLINE_S)
    assert not p._thread.is_alive() and p.fenced
    report = p.close(DEADLINE_S, lease_held=lambda: False)
    assert report.worker_stopped and (report.applied, report.unflushed) == (1, 6)
    assert state(p, first) is S.APPLIED
    assert [state(p, r) for r in receipts] == [S.CLOSE_UNFLUSHED] * 6
    assert p._in_flight == 0
    # the new holder finds all six owed, in their order, none applied by the old one
    assert [i.receipt_id for i in store.pending_intents("s")] == receipts
    assert sorted(c.content for c in store.concepts("s")) == ["the write in hand before the batch"]
    store.close()
