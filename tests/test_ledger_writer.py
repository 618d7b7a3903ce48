"""The ledger writer: lines on disk, drops by kind, a parked writer, counts per session."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from lambo_core.ledger_writer import LedgerWriter

WAIT_S = 10.0


def read_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_lines_are_written_as_json_in_order_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    writer = LedgerWriter(path).start()
    for i in range(1000):
        assert writer.append("s", {"session": "s", "i": i, "text": "é"})
    assert writer.flushed(WAIT_S)
    assert [line["i"] for line in read_lines(path)] == list(range(1000))
    keys = writer.stats_keys("s")
    assert keys == {
        "ledger_path": str(path),
        "ledger_written_lines": 1000,
        "ledger_dropped_lines": 0,
        "ledger_dropped_channel_full": 0,
        "ledger_dropped_write_failed": 0,
        "ledger_queued_lines": 0,
    }
    writer.close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_reader_less_fifo_parks_the_writer_and_a_full_queue_drops(tmp_path: Path) -> None:
    fifo = tmp_path / "ledger.fifo"
    os.mkfifo(fifo)
    writer = LedgerWriter(fifo, capacity=3).start()
    accepted = [writer.append("s", {"i": i}) for i in range(5)]
    assert accepted == [True, True, True, False, False]
    keys = writer.stats_keys()
    # parked on its open: nothing written, nothing failed, only the queue shows it
    assert keys["ledger_written_lines"] == 0
    assert keys["ledger_queued_lines"] == 3
    assert keys["ledger_dropped_channel_full"] == 2
    assert keys["ledger_dropped_write_failed"] == 0
    assert keys["ledger_dropped_lines"] == 2
    reader = os.open(fifo, os.O_RDONLY)  # a reader arrives: the writer's open returns
    try:
        assert writer.flushed(WAIT_S)
        data = b""
        while data.count(b"\n") < 3:
            data += os.read(reader, 65536)
        assert [json.loads(x)["i"] for x in data.splitlines()] == [0, 1, 2]
        assert writer.stats_keys()["ledger_written_lines"] == 3
        assert writer.stats_keys()["ledger_queued_lines"] == 0
        writer.close()
    finally:
        os.close(reader)


def test_a_parked_writer_at_close_drops_its_queue_as_write_failed(tmp_path: Path) -> None:
    fifo = tmp_path / "ledger.fifo"
    os.mkfifo(fifo)
    writer = LedgerWriter(fifo).start()
    for i in range(4):
        writer.append("s", {"i": i})
    writer.close(budget_s=0.2)
    keys = writer.stats_keys()
    assert keys["ledger_queued_lines"] == 0
    assert keys["ledger_dropped_write_failed"] == 4
    assert keys["ledger_dropped_lines"] == 4
    assert keys["ledger_written_lines"] == 0


def test_a_path_that_cannot_be_opened_drops_as_write_failed(tmp_path: Path) -> None:
    writer = LedgerWriter(tmp_path).start()  # a directory
    assert writer.append("s", {"i": 1})
    assert writer.flushed(WAIT_S)
    keys = writer.stats_keys()
    assert keys["ledger_dropped_write_failed"] == 1
    assert keys["ledger_dropped_channel_full"] == 0
    assert keys["ledger_dropped_lines"] == 1
    assert keys["ledger_written_lines"] == 0
    writer.close()


def test_an_append_after_close_is_dropped_as_write_failed(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    writer = LedgerWriter(path).start()
    writer.append("s", {"i": 1})
    writer.close()
    assert not writer.append("s", {"i": 2})
    keys = writer.stats_keys()
    assert keys["ledger_written_lines"] == 1
    assert keys["ledger_dropped_write_failed"] == 1
    assert [line["i"] for line in read_lines(path)] == [1]


def test_per_session_counts_only_that_sessions_lines(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    shared = LedgerWriter(path, per_session=True).start()
    for _ in range(3):
        shared.append("a", {"session": "a"})
    shared.append("b", {"session": "b"})
    assert shared.flushed(WAIT_S)
    assert shared.stats_keys("a")["ledger_written_lines"] == 3
    assert shared.stats_keys("b")["ledger_written_lines"] == 1
    assert shared.stats_keys()["ledger_written_lines"] == 4
    shared.close()
    whole = LedgerWriter(tmp_path / "one.jsonl").start()
    whole.append("a", {})
    whole.append("b", {})
    assert whole.flushed(WAIT_S)
    assert whole.stats_keys("a")["ledger_written_lines"] == 2  # one session: the whole file
    whole.close()


def test_a_line_that_is_not_json_drops_its_batch_not_the_writer(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    writer = LedgerWriter(path).start()
    writer.append("s", {"bad": object()})
    assert writer.flushed(WAIT_S)
    writer.append("s", {"good": 1})
    assert writer.flushed(WAIT_S)
    assert read_lines(path) == [{"good": 1}]
    keys = writer.stats_keys()
    assert (keys["ledger_written_lines"], keys["ledger_dropped_write_failed"]) == (1, 1)
    writer.close()


def test_capacity_must_hold_a_line(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one line"):
        LedgerWriter(tmp_path / "x", capacity=0)
