"""The write queue's rate keys: the startup probe and the observed rates, never stand-ins."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from lambo_core.embed.onnx import OnnxEmbedder
from lambo_core.rates import OBSERVED_MIN, PROBE_CONCEPTS, PROBE_ROUNDS, WriteRates, run_probe
from lambo_core.receipts import ReceiptState
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import SqliteStore
from lambo_core.writes import WritePipeline

DEADLINE_S = 60.0


def test_unmeasured_until_something_measures() -> None:
    keys = WriteRates().keys()
    assert keys["write_queue_measured"] is False
    assert keys["write_queue_bound_source"] == "unmeasured"
    for name in (
        "write_queue_items_per_sec",
        "write_queue_serial_items_per_sec",
        "write_queue_probe_serial_items_per_sec",
        "write_queue_probe_optimism",
        "write_queue_apply_ms_p50",
    ):
        assert keys[name] is None, name


def test_probe_then_observed_and_the_optimism_between_them() -> None:
    rates = WriteRates()
    rates.probed(200.0, 500.0)
    keys = rates.keys()
    assert keys["write_queue_bound_source"] == "probe" and keys["write_queue_measured"]
    # while the source is probe, the rate in force is the probe's own figure
    assert (
        keys["write_queue_serial_items_per_sec"] == keys["write_queue_probe_serial_items_per_sec"]
    )
    assert keys["write_queue_items_per_sec"] == 500.0
    assert keys["write_queue_probe_optimism"] is None

    for _ in range(OBSERVED_MIN - 1):
        rates.applied(30.0, 20.0, queue_was_busy=False)
    assert rates.keys()["write_queue_bound_source"] == "probe"
    rates.applied(30.0, 20.0, queue_was_busy=False)
    keys = rates.keys()
    assert keys["write_queue_bound_source"] == "observed"
    assert keys["write_queue_serial_items_per_sec"] == 50.0  # 1000 / 20 ms
    assert keys["write_queue_probe_serial_items_per_sec"] == 200.0  # kept beside it
    assert keys["write_queue_probe_optimism"] == 4.0  # 200 / 50
    # no back-to-back applies seen: the drain rate is not measured
    assert keys["write_queue_items_per_sec"] is None
    assert keys["write_queue_apply_samples"] == OBSERVED_MIN
    assert keys["write_queue_apply_ms_p50"] == 30.0


def test_the_drain_rate_is_measured_over_back_to_back_applies() -> None:
    rates = WriteRates()
    for _ in range(OBSERVED_MIN + 1):
        rates.applied(10.0, 5.0, queue_was_busy=True)
    rate = rates.keys()["write_queue_items_per_sec"]
    assert rate is not None and rate > 0


def test_writes_of_a_batch_count_done_when_their_share_of_its_embedding_is_spent() -> None:
    # A batch's writes settle moments apart after one embedder call made all their vectors:
    # each counts done at the time it would have alone (the pipeline passes done_at), so
    # the drain rate is the real one (here 20 writes/s), not the gap between two settles.
    import time

    rates = WriteRates()
    base = time.monotonic()
    for k in range(OBSERVED_MIN + 1):
        rates.applied(10.0, 50.0, queue_was_busy=True, done_at=base + 0.05 * k)
    keys = rates.keys()
    assert keys["write_queue_items_per_sec"] == pytest.approx(20.0)
    assert keys["write_queue_serial_items_per_sec"] == pytest.approx(20.0)


def test_run_probe_times_serial_rounds_and_four_at_once() -> None:
    calls: list[list[str]] = []
    lock = threading.Lock()

    def embed(texts: list[str]) -> None:
        with lock:
            calls.append(texts)

    serial, wide = run_probe(embed, ["a", "b"], threading.Event())
    assert serial is not None and serial > 0
    assert wide is not None and wide > 0
    assert len(calls) == PROBE_ROUNDS + 4 and all(c == ["a", "b"] for c in calls)


class SteppedClock:
    """Monotonic seconds that move only when a fake embed says it took time."""

    def __init__(self) -> None:
        self._now = 0.0
        self._lock = threading.Lock()

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds

    def __call__(self) -> float:
        with self._lock:
            return self._now


def test_run_probe_stops_early_and_says_what_it_did_not_measure() -> None:
    stop = threading.Event()
    stop.set()
    assert run_probe(lambda texts: None, ["a"], stop) == (None, None)

    clock = SteppedClock()

    def slow(texts: list[str]) -> None:
        clock.advance(1.0)  # one embed outlasts the whole budget

    # a budget the serial rounds use up: the four-wide figure is not measured
    serial, wide = run_probe(slow, ["a"], threading.Event(), budget_s=0.5, clock=clock)
    assert serial == 1.0 and wide is None  # one round of one second, then the budget was gone


def test_probe_concepts_are_representative() -> None:
    assert len(PROBE_CONCEPTS) == 2
    for text in PROBE_CONCEPTS:
        assert 300 <= len(text.encode()) <= 380


def test_a_serve_pipeline_probes_the_real_model_and_then_observes(
    tmp_path: Path, minilm: OnnxEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = Session.open(SqliteStore(tmp_path / "p.db"), "s", EmbedderPlan.ready(minilm))
    pipeline = WritePipeline(session)
    probed = threading.Event()
    record = pipeline.rates.probed

    def record_then_tell(serial: float | None, wide: float | None) -> None:
        record(serial, wide)
        probed.set()

    monkeypatch.setattr(pipeline.rates, "probed", record_then_tell)
    pipeline.start(probe=True)
    try:
        assert probed.wait(DEADLINE_S), "the probe never finished"
        keys = pipeline.stats()
        assert keys["write_queue_bound_source"] == "probe"
        assert keys["write_queue_probe_serial_items_per_sec"] > 0
        assert (
            keys["write_queue_serial_items_per_sec"]
            == keys["write_queue_probe_serial_items_per_sec"]
        )
        receipts = [
            pipeline.submit(
                "lambo_derive",
                {
                    "agent_id": "a",
                    "concepts": [{"content": f"observed fact {i}", "concept_type": "logic"}],
                },
            ).structured["receipt"]
            for i in range(OBSERVED_MIN)
        ]
        for receipt in receipts:
            assert session.receipts.wait(receipt, "a", "s", 30_000).state is ReceiptState.APPLIED
        keys = pipeline.stats()
        assert keys["write_queue_bound_source"] == "observed"
        assert keys["write_queue_serial_items_per_sec"] > 0
        assert keys["write_queue_probe_optimism"] == pytest.approx(
            keys["write_queue_probe_serial_items_per_sec"]
            / keys["write_queue_serial_items_per_sec"],
            rel=0.01,
        )
    finally:
        pipeline.close()


def test_a_one_shot_pipeline_does_not_probe(tmp_path: Path, minilm: OnnxEmbedder) -> None:
    session = Session.open(SqliteStore(tmp_path / "o.db"), "s", EmbedderPlan.ready(minilm))
    pipeline = WritePipeline(session).start()
    pipeline.close()
    assert not pipeline.rates.probe_ran
    assert pipeline.stats()["write_queue_bound_source"] == "unmeasured"
