"""degraded, dead_lettered and flush_lag_ms move when the store refuses writes.

A real SQLite store behind ``FlakyStore``, which refuses the writes a test names as a
full disk does; the figures are read through MemoryService's lambo_stats, as an agent
reads them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from lambo_core.config import load_config
from lambo_core.embed.onnx import OnnxEmbedder
from lambo_core.health import MAX_FLUSH_ATTEMPTS
from lambo_core.model import IntentState
from lambo_core.receipts import ReceiptState
from lambo_core.service import MemoryService
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import SqliteStore
from lambo_core.writes import WritePipeline
from lambo_core.writes.faults import STORE_REFUSED_WRITE
from tests.flaky_store import FlakyStore


class World:
    def __init__(self, tmp_path: Path, minilm: OnnxEmbedder, *, worker: bool = True) -> None:
        self.store = FlakyStore(SqliteStore(tmp_path / "h.db"))
        config = load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path)
        session = Session.open(self.store, "s", EmbedderPlan.ready(minilm))
        # Without the worker nothing flushes behind a test's back (its own flushes count).
        self.pipeline = WritePipeline(session)
        if worker:
            self.pipeline.start()
        self.service = MemoryService(session, self.pipeline, config)

    def call(self, tool: str, **args: Any) -> Any:
        async def go() -> Any:
            return await self.service.call(tool, args)

        return anyio.run(go)

    def stats(self) -> dict[str, Any]:
        result = self.call("lambo_stats", agent_id="ops")
        assert not result.is_error
        return dict(result.structured)

    def derive(self, content: str) -> Any:
        return self.call(
            "lambo_derive",
            agent_id="agent-a",
            concepts=[{"content": content, "concept_type": "logic"}],
        )

    def settle(self, receipt: str) -> Any:
        return self.pipeline.session.receipts.wait(receipt, "agent-a", "s", 30_000)

    def apply_here(self, receipt: str) -> None:
        """Apply one queued write on this thread (a World without its worker)."""
        intent = self.pipeline._queue.get_nowait()
        assert intent is not None and intent.receipt_id == receipt
        self.pipeline._apply_one(intent)


@pytest.fixture
def world(tmp_path: Path, minilm: OnnxEmbedder) -> Iterator[World]:
    w = World(tmp_path, minilm)
    yield w
    w.pipeline.close()
    w.pipeline.session.access_counts.drain()


@pytest.fixture
def still(tmp_path: Path, minilm: OnnxEmbedder) -> Iterator[World]:
    """A World whose writes and flushes happen only when the test makes them."""
    w = World(tmp_path, minilm, worker=False)
    yield w
    w.pipeline.close()
    w.pipeline.session.access_counts.drain()


def test_healthy_session_reads_healthy(world: World) -> None:
    stats = world.stats()
    assert (stats["flush_lag_ms"], stats["dead_lettered"], stats["degraded"]) == (0.0, 0, False)
    assert (
        "flush_lag_ms 0, dead_lettered 0, degraded false"
        in world.call("lambo_stats", agent_id="ops").texts[0]
    )


def test_an_apply_the_store_refuses_degrades_the_session_and_keeps_the_intent(
    world: World,
) -> None:
    world.store.refuse.add("apply")
    ack = world.derive("the widget cache holds 512 entries")
    receipt = ack.structured["receipt"]
    view = world.settle(receipt)
    assert view.state is ReceiptState.FAILED
    assert view.detail.startswith(STORE_REFUSED_WRITE)
    assert "database or disk is full" not in view.detail  # the detail goes to the log only
    stats = world.stats()
    assert (
        stats["degraded"] is True
        and "degraded true" in world.call("lambo_stats", agent_id="ops").texts[0]
    )
    intent = world.store.inner.get_intent(receipt)
    assert intent is not None and intent.state is IntentState.PENDING  # replayed next time

    # While degraded, every write says so: an ack carries a warning line.
    again = world.derive("the widget cache evicts least recently used")
    assert "warning: this session is degraded" in again.texts[0]
    assert any("degraded" in w for w in again.structured["warnings"])
    assert world.settle(again.structured["receipt"]).state is ReceiptState.FAILED

    # The store takes writes again: the next applied write clears it.
    world.store.refuse.discard("apply")
    third = world.derive("the widget cache is warmed at start")
    assert world.settle(third.structured["receipt"]).state is ReceiptState.APPLIED
    assert world.stats()["degraded"] is False
    fourth = world.derive("the widget cache is per process")
    assert "degraded" not in fourth.texts[0]


def test_an_intent_the_store_refuses_is_refused_and_says_the_session_is_degraded(
    world: World,
) -> None:
    world.store.refuse.add("add_intent")
    result = world.derive("a fact the disk has no room for")
    assert result.is_error
    text = result.texts[0]
    assert text.startswith("store error: the store refused the write")
    assert "this session is degraded" in text
    assert "disk is full" not in text
    stats = world.stats()
    assert stats["degraded"] is True
    assert stats["write_queue_accepted"] == 0 and stats["write_queue_outstanding"] == 0


def test_a_write_behind_batch_refused_again_and_again_is_dead_lettered(still: World) -> None:
    world = still
    session = world.pipeline.session
    world.store.refuse.add("add_access_counts")
    session.access_counts.record(["some-concept"])
    assert world.stats()["flush_lag_ms"] > 0.0  # a change the store does not hold yet
    lags = []
    for _ in range(MAX_FLUSH_ATTEMPTS - 1):
        assert world.pipeline.flush_access_counts() == 0
        stats = world.stats()
        assert stats["dead_lettered"] == 0 and stats["degraded"] is True
        lags.append(stats["flush_lag_ms"])
    assert lags == sorted(lags) and lags[0] > 0.0  # the lag keeps the batch's age
    world.pipeline.flush_access_counts()  # the last refusal: the batch is dropped
    stats = world.stats()
    assert stats["dead_lettered"] == 1
    assert stats["flush_lag_ms"] == 0.0  # the lag falls back; only dead_lettered says so
    assert session.access_counts.pending("some-concept") == 0
    assert world.store.refused["add_access_counts"] == MAX_FLUSH_ATTEMPTS

    # A flush that goes through clears degraded.
    world.store.refuse.discard("add_access_counts")
    session.access_counts.record(["some-concept"])
    world.pipeline.flush_access_counts()
    stats = world.stats()
    assert (stats["dead_lettered"], stats["degraded"], stats["flush_lag_ms"]) == (1, False, 0.0)


def test_flush_lag_counts_access_counts_until_they_are_flushed(still: World) -> None:
    world = still
    result = world.derive("the lease TTL is 45 s")
    world.apply_here(result.structured["receipt"])
    assert world.settle(result.structured["receipt"]).state is ReceiptState.APPLIED
    recall = world.call("lambo_recall", agent_id="agent-a", query="lease TTL")
    assert not recall.is_error
    assert world.stats()["flush_lag_ms"] > 0.0  # the recall's access counts wait
    world.pipeline.flush_access_counts()
    assert world.stats()["flush_lag_ms"] == 0.0


def test_a_store_that_keeps_refusing_is_logged_once_with_its_reason_then_counted(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.store.refuse.add("apply")
    with caplog.at_level("WARNING"):
        for i in range(6):
            ack = world.derive(f"a fact the full disk refuses {i}")
            assert world.settle(ack.structured["receipt"]).state is ReceiptState.FAILED
        world.store.refuse.discard("apply")
        ack = world.derive("the disk has room again")
        assert world.settle(ack.structured["receipt"]).state is ReceiptState.APPLIED
    refusals = [r.getMessage() for r in caplog.records if "the store refused" in r.getMessage()]
    # the degraded line and one more, each with the store's own reason; the rest counted
    assert len(refusals) == 2, refusals
    assert all("database or disk is full" in m for m in refusals)
    summary = [r.getMessage() for r in caplog.records if "store refusals" in r.getMessage()]
    assert summary and summary[0].startswith("4 more store refusals")
    per_write = [r for r in caplog.records if "disk is full" in r.getMessage()]
    assert len(per_write) == 2  # not once more for every write that failed
