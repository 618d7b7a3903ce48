"""A recall made while the model loads: the bounded wait ([recall] model_wait_ms) both ways.

The model is the real MiniLM behind a ``LazyEmbedder`` whose loader waits on an
Event the test sets, so the test decides whether it loads within the wait. The
question shares no word with the fact it should find: only the vector leg finds it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from lambo_core.config import load_config
from lambo_core.embed.base import Embedder
from lambo_core.embed.loader import LazyEmbedder
from lambo_core.embed.onnx import OnnxEmbedder
from lambo_core.recall import RecallDefaults, RecallResult, recall
from lambo_core.recall.legs import NOTICE_LOADING, VECTOR_LOADING_WARNING
from lambo_core.service import MemoryService, ToolResult
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import SqliteStore
from lambo_core.writes import WritePipeline
from tests.test_recall import assert_mcp_shape, minilm

__all__ = ["minilm"]  # the module-scoped MiniLM fixture of test_recall

FACT = "deploys to production happen on tuesday afternoons"
QUESTION = "when do we ship a release?"  # no word in common with FACT
OTHERS = ["the staging database runs postgres 15", "API tokens expire after one hour"]
# later calls, so the recent leg (the last 3 interactions) holds none of the facts
FILLERS = [f"zz filler {i}" for i in range(3)]


class WatchedLazy(LazyEmbedder):
    """A LazyEmbedder that says when a reader starts waiting for it, and for how long."""

    def __init__(self, load: Any) -> None:
        super().__init__(load)
        self.waiting = threading.Event()
        self.timeouts: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.timeouts.append(timeout)
        self.waiting.set()
        return super().wait(timeout)


@dataclass
class Loading:
    """A session whose stored concepts have vectors, served while its model still loads."""

    session: Session
    lazy: WatchedLazy
    release: threading.Event


@pytest.fixture
def loading(tmp_path: Path, minilm: OnnxEmbedder) -> Iterator[Loading]:
    path = tmp_path / "m.db"
    writer = WritePipeline(Session.open(SqliteStore(path), "s", EmbedderPlan.ready(minilm)))
    writer.start()
    for text in [FACT, *OTHERS, *FILLERS]:
        ack = writer.submit(
            "lambo_derive",
            {"agent_id": "agent-a", "concepts": [{"content": text, "concept_type": "logic"}]},
        )
        writer.session.receipts.wait(ack.structured["receipt"], "agent-a", "s", 30_000)
    writer.close()

    release = threading.Event()

    def load() -> Embedder:
        assert release.wait(60), "the test never released the model"
        return minilm

    lazy = WatchedLazy(load).start()
    session = Session.open(
        SqliteStore(path), "s", EmbedderPlan(lazy=lazy, contract=minilm.contract)
    )
    assert session.embeds and session.index.vectors is not None
    assert len(session.index.vectors) == 6
    try:
        yield Loading(session, lazy, release)
    finally:
        release.set()
        lazy.wait(60)


def ask(session: Session, wait_ms: int) -> RecallResult:
    result = recall(
        session,
        {"agent_id": "a", "query": QUESTION, "traversal_depth": 0},
        defaults=RecallDefaults(model_wait_ms=wait_ms),
    )
    assert_mcp_shape(result)
    return result


def test_a_model_loaded_within_the_wait_gives_the_vector_leg(loading: Loading) -> None:
    answers: list[RecallResult] = []
    reader = threading.Thread(target=lambda: answers.append(ask(loading.session, 60_000)))
    reader.start()
    assert loading.lazy.waiting.wait(30)
    # The recall waits without the index lock: another thread takes it meanwhile.
    lock = loading.session.index.lock
    assert lock.acquire(timeout=10)
    lock.release()
    assert reader.is_alive() and not answers  # still waiting for the model
    loading.release.set()
    reader.join(60)
    (result,) = answers
    assert loading.lazy.timeouts == [60.0]
    assert result.hits[0]["content"] == FACT  # found by meaning
    assert result.warnings == []
    assert result.context.startswith(FACT + " [Logic] (score ")


def test_a_model_still_loading_after_the_wait_is_named_in_the_first_line(
    loading: Loading,
) -> None:
    result = ask(loading.session, 50)
    assert loading.lazy.timeouts == [0.05]  # the configured bound, then it went on
    assert not loading.lazy.ready
    assert result.warnings == [VECTOR_LOADING_WARNING]
    assert result.context.split("\n")[0] == NOTICE_LOADING
    assert FACT not in [h["content"] for h in result.hits]  # keyword-only: not found

    loading.release.set()
    assert loading.lazy.wait(60)
    again = ask(loading.session, 50)
    assert again.hits[0]["content"] == FACT and again.warnings == []
    assert not again.context.startswith("Keyword-only")


def service_for(loading: Loading, tmp_path: Path, wait_ms: int) -> MemoryService:
    (tmp_path / "lambo.toml").write_text(f"[recall]\nmodel_wait_ms = {wait_ms}\n")
    config = load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path)
    pipeline = WritePipeline(loading.session).start()
    return MemoryService(loading.session, pipeline, config)


def test_a_served_recall_waits_off_the_event_loop(loading: Loading, tmp_path: Path) -> None:
    """lambo_recall waits in a worker thread: other calls are answered meanwhile."""
    service = service_for(loading, tmp_path, 60_000)

    async def scenario() -> tuple[ToolResult, ToolResult]:
        answers: list[ToolResult] = []

        async def recall_call() -> None:
            answers.append(await service.call("lambo_recall", {"agent_id": "a", "query": QUESTION}))

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(recall_call)
            assert await anyio.to_thread.run_sync(loading.lazy.waiting.wait, 30)
            stats = await service.call("lambo_stats", {"agent_id": "a"})
            assert not answers  # the recall is still waiting for the model
            loading.release.set()
        return answers[0], stats

    try:
        recalled, stats = anyio.run(scenario)
    finally:
        service.pipeline.close()
    assert stats.structured is not None and stats.structured["embedder_state"] == "loading"
    assert loading.lazy.timeouts[0] == 60.0
    assert recalled.structured is not None and recalled.structured["warnings"] == []
    assert recalled.structured["hits"][0]["content"] == FACT
    assert recalled.texts[0].startswith(FACT)


def test_a_served_recall_without_a_wait_says_keyword_only_first(
    loading: Loading, tmp_path: Path
) -> None:
    service = service_for(loading, tmp_path, 0)
    try:
        recalled = anyio.run(
            lambda: service.call("lambo_recall", {"agent_id": "a", "query": "postgres staging"})
        )
    finally:
        service.pipeline.close()
    assert loading.lazy.timeouts == [0.0]
    text = recalled.texts[0]
    assert text.split("\n")[0] == NOTICE_LOADING
    assert "the staging database runs postgres 15 [Logic]" in text  # the keyword hit follows
    assert recalled.structured is not None
    assert recalled.structured["context"] == text
    assert recalled.structured["warnings"][0] == VECTOR_LOADING_WARNING
