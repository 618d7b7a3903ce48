"""MemoryService in-process: lambo_stats, receipts by id, piggyback, refusals."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from lambo_core.config import load_config
from lambo_core.embed.loader import LoadedModels
from lambo_core.service import MemoryService, ToolResult, UnknownTool
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import MemoryStore
from lambo_core.writes import WritePipeline

WRITE_QUEUE_KEYS = [
    "write_queue_bound",
    "write_queue_lane_bound",
    "write_queue_measured",
    "write_queue_bound_source",
    "write_queue_items_per_sec",
    "write_queue_serial_items_per_sec",
    "write_queue_probe_serial_items_per_sec",
    "write_queue_probe_optimism",
    "write_queue_apply_samples",
    "write_queue_apply_ms_p50",
    "write_queue_apply_ms_p90",
    "write_queue_apply_ms_max",
    "write_queue_outstanding",
    "write_queue_accepted",
    "write_queue_applied",
    "write_queue_failed",
    "write_queue_abandoned",
    "write_queue_deferred",
    "write_queue_replayed",
    "write_queue_replay_owed",
    "write_queue_dropped",
    "write_queue_dropped_closed",
    "receipts_retained",
]


@pytest.fixture
def service(tmp_path: Any) -> Iterator[MemoryService]:
    (tmp_path / "lambo.toml").write_text('[embedder]\nmatch_strategy = "canonical"\n')
    config = load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path)
    session = Session.open(MemoryStore(), "s", EmbedderPlan.from_config(config, LoadedModels()))
    pipeline = WritePipeline(session).start()
    yield MemoryService(session, pipeline, config)
    pipeline.close()


def call(service: MemoryService, tool: str, **args: Any) -> ToolResult:
    async def go() -> ToolResult:
        return await service.call(tool, args)

    return anyio.run(go)


def derive(service: MemoryService, content: str, agent: str = "a") -> str:
    result = call(
        service,
        "lambo_derive",
        agent_id=agent,
        concepts=[{"content": content, "concept_type": "logic"}],
    )
    assert not result.is_error
    assert result.structured is not None
    return str(result.structured["receipt"])


def test_stats_reports_every_always_present_key(service: MemoryService) -> None:
    result = call(service, "lambo_stats", agent_id="a")
    assert not result.is_error and result.structured is not None
    body = result.structured
    for key in (
        *WRITE_QUEUE_KEYS,
        "node_count",
        "edge_count",
        "concept_count",
        "flush_lag_ms",
        "dead_lettered",
        "degraded",
        "promotion_policy",
        "embedding_contract",
        "embedding_modalities",
        "gc",
        "canonical_count",
        "canonization_cycles",
    ):
        assert key in body, key
    assert body["promotion_policy"] == "Swarm"
    assert body["embedding_contract"] == {"kind": "none", "model": None, "dim": 0}
    assert body["gc"] == {"last_gc_at": None, "last_gc_epoch": 0, "last_sweep": None}
    assert "embedding: {kind: none, model: null, dim: 0}" in result.texts[0]
    assert "None" not in result.texts[0]


def test_receipt_states_through_stats(service: MemoryService) -> None:
    receipt = derive(service, "a fact")
    waited = call(service, "lambo_stats", agent_id="a", receipt=receipt, wait_ms=99_999)
    assert waited.structured is not None
    assert waited.structured["receipt"]["state"] == "applied"
    assert waited.structured["receipt"]["created_count"] == 1
    assert waited.texts[0].startswith(f"receipt {receipt}: applied — derived 1 concept(s)")
    other = call(service, "lambo_stats", agent_id="b", receipt=receipt)
    assert other.structured is not None and other.structured["receipt"]["state"] == "forbidden"
    never = call(service, "lambo_stats", agent_id="a", receipt="lwr1.zz")
    assert never.structured is not None
    assert never.structured["receipt"]["state"] == "never_issued"
    assert "lwr1.zz" not in never.texts[0]


def test_piggyback_rides_once_on_the_same_agents_next_response(service: MemoryService) -> None:
    first = derive(service, "one")
    assert service.pipeline.wait_idle(10)
    other = call(service, "lambo_stats", agent_id="someone-else")
    assert other.structured is not None and "write_receipts" not in other.structured
    mine = call(service, "lambo_stats", agent_id="a")
    assert mine.structured is not None
    assert [r["receipt"] for r in mine.structured["write_receipts"]] == [first]
    assert mine.texts[-1].startswith("write receipts:\nreceipt " + first)
    again = call(service, "lambo_stats", agent_id="a")
    assert again.structured is not None and "write_receipts" not in again.structured


def test_at_most_eight_receipts_per_response(service: MemoryService) -> None:
    # Submitted straight to the pipeline, so no ack in between takes any of them.
    for i in range(11):
        args = {"agent_id": "a", "concepts": [{"content": f"f{i}", "concept_type": "logic"}]}
        service.pipeline.submit("lambo_derive", args)
    assert service.pipeline.wait_idle(10)
    first = call(service, "lambo_stats", agent_id="a").structured
    second = call(service, "lambo_stats", agent_id="a").structured
    assert first is not None and second is not None
    assert len(first["write_receipts"]) == 8
    assert len(second["write_receipts"]) == 3


@pytest.mark.parametrize(
    ("args", "text"),
    [
        ({}, "agent_id is required"),
        ({"agent_id": "a", "wait_ms": "5"}, "wait_ms must be an integer in 0..=34000"),
        (
            {"agent_id": "a", "receipt": "lwr1.0000000000000001.1.1", "wait_ms": -1},
            "wait_ms must be an integer in 0..=34000 (a larger value is clamped to 34000)",
        ),
        ({"agent_id": "a", "receipt": 5}, "receipt must be a string"),
        ({"agent_id": "a", "recipt": "x"}, "recipt is not an argument of lambo_stats"),
        ({"agent_id": "a", "created_at": "x"}, "created_at is refused"),
        ({"agent_id": "a\tb"}, "agent_id must be one line"),
    ],
)
def test_stats_refusals(service: MemoryService, args: dict[str, Any], text: str) -> None:
    result = call(service, "lambo_stats", **args)
    assert result.is_error
    assert result.texts[0].startswith(text)
    assert result.to_json()["isError"] is True


def test_unknown_tool(service: MemoryService) -> None:
    with pytest.raises(UnknownTool):
        call(service, "lambo_nope", agent_id="a")


def test_recall_access_counts_are_written_behind(service: MemoryService) -> None:
    derive(service, "the lease TTL is 45 seconds")
    assert service.pipeline.wait_idle(10)
    recalled = call(service, "lambo_recall", agent_id="a", query="lease TTL")
    assert recalled.structured is not None
    (node,) = [h["node_id"] for h in recalled.structured["hits"]]
    stored = service.session.store.get_concept("s", node)
    assert stored is not None and stored.access_count == 0  # the read wrote nothing
    assert service.pipeline.flush_access_counts() == 1
    stored = service.session.store.get_concept("s", node)
    assert stored is not None and stored.access_count == 1
    concept = service.session.index.graph.concept(node)
    assert concept is not None and concept.access_count == 1
    assert service.pipeline.flush_access_counts() == 0  # nothing twice


def test_background_jobs_run_on_the_writer_thread(service: MemoryService) -> None:
    import threading

    ran = threading.Event()
    threads: list[str] = []

    def job() -> None:
        threads.append(threading.current_thread().name)
        ran.set()

    service.pipeline.every(0.01, job)
    assert ran.wait(10)
    assert threads[0].startswith("lambo-apply-")


def test_every_served_tool_has_a_published_schema() -> None:
    from lambo_core.mcp.tools import DESCRIPTIONS, SCHEMAS
    from lambo_core.service import SERVED_TOOLS, listed_tools

    assert set(listed_tools(True)) == set(SERVED_TOOLS) | {"lambo_derive_image"}
    assert set(listed_tools(True)) == set(SCHEMAS) == set(DESCRIPTIONS)
    for schema in SCHEMAS.values():
        assert schema["additionalProperties"] is False
        assert "agent_id" in schema["required"]


def test_a_writes_own_ack_never_carries_its_outcome(service: MemoryService) -> None:
    # Keyword-only writes apply at once, so each outcome is settled before its ack returns.
    first = call(
        service,
        "lambo_derive",
        agent_id="a",
        concepts=[{"content": "first", "concept_type": "logic"}],
    )
    assert first.structured is not None
    assert "write_receipts" not in first.structured
    second = call(
        service,
        "lambo_derive",
        agent_id="a",
        concepts=[{"content": "second", "concept_type": "logic"}],
    )
    assert second.structured is not None
    carried = [r["receipt"] for r in second.structured.get("write_receipts", [])]
    assert second.structured["receipt"] not in carried
    assert service.pipeline.wait_idle(10)
    later = call(service, "lambo_stats", agent_id="a").structured
    assert later is not None
    delivered = carried + [r["receipt"] for r in later.get("write_receipts", [])]
    assert sorted(delivered) == sorted([first.structured["receipt"], second.structured["receipt"]])


def test_recall_names_another_agents_reservation_as_a_conflict(service: MemoryService) -> None:
    receipt = derive(service, "deploy script lives in ops/deploy.sh", agent="a")
    call(service, "lambo_stats", agent_id="a", receipt=receipt, wait_ms=10_000)
    found = call(service, "lambo_recall", agent_id="a", query="deploy script")
    assert found.structured is not None
    node_id = found.structured["hits"][0]["node_id"]
    held = call(service, "lambo_reserve", agent_id="b", node_id=node_id, ttl_seconds=60)
    assert not held.is_error
    theirs = call(service, "lambo_recall", agent_id="a", query="deploy script")
    assert theirs.structured is not None
    [line] = theirs.structured["warnings"]
    assert line.startswith("⚡ Conflict: reserved by b until ")
    assert line in theirs.texts[0]
    mine = call(service, "lambo_recall", agent_id="b", query="deploy script")
    assert mine.structured is not None and mine.structured["warnings"] == []
