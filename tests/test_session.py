"""Opening a session: the embedding contract stamp, mismatch refusal, relabel, lazy embedder."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from lambo_core.config import load_config
from lambo_core.embed.base import EmbeddingContract, make_contract
from lambo_core.embed.loader import EmbedderLoading, LazyEmbedder, LoadedModels
from lambo_core.errors import ConfigError
from lambo_core.model import Vector
from lambo_core.session import NO_EMBEDDER_CONTRACT, EmbedderPlan, Session
from lambo_core.store import SqliteStore


class FixedEmbedder:
    """A stand-in with a chosen contract: these tests are about contracts, not vectors."""

    def __init__(self, model: str, dim: int) -> None:
        self._contract = make_contract("onnx", model, dim)

    @property
    def contract(self) -> EmbeddingContract:
        return dict(self._contract)  # type: ignore[return-value]

    @property
    def modalities(self) -> list[str]:
        return ["text"]

    @property
    def dim(self) -> int:
        return self._contract["dim"]

    @property
    def merge_threshold(self) -> float:
        return 0.85

    def embed(self, texts: Sequence[str]) -> Vector:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        out[:, 0] = 1.0
        return out

    def embed_query(self, text: str) -> Vector:
        vector: Vector = self.embed([text])[0]
        return vector


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    return SqliteStore(tmp_path / "s.db")


def test_fresh_session_is_stamped_at_first_write(store: SqliteStore) -> None:
    plan = EmbedderPlan.ready(FixedEmbedder("minilm", 384))
    session = Session.open(store, "s", plan)
    record = store.get_session("s")
    assert record is not None and record.embedding_contract is None
    session.stamp_before_write()
    record = store.get_session("s")
    assert record is not None
    assert record.embedding_contract == {"kind": "onnx", "model": "minilm", "dim": 384}
    assert session.contract["dim"] == 384
    assert session.modalities == ["text"]


def test_mismatched_contract_is_refused(store: SqliteStore) -> None:
    Session.open(store, "s", EmbedderPlan.ready(FixedEmbedder("minilm", 384))).stamp_before_write()
    with pytest.raises(ConfigError) as info:
        Session.open(store, "s", EmbedderPlan.ready(FixedEmbedder("bge-m3", 1024)))
    text = info.value.render()
    assert "session 's' was written with embedding contract" in text
    assert "model: minilm, dim: 384" in text and "model: bge-m3, dim: 1024" in text
    assert "--allow-embedding-mismatch" in text
    # The stamp is untouched by the refusal.
    record = store.get_session("s")
    assert record is not None and record.embedding_contract is not None
    assert record.embedding_contract["model"] == "minilm"


def test_allow_mismatch_relabels_before_the_first_write(store: SqliteStore) -> None:
    Session.open(store, "s", EmbedderPlan.ready(FixedEmbedder("minilm", 384))).stamp_before_write()
    session = Session.open(
        store,
        "s",
        EmbedderPlan.ready(FixedEmbedder("bge-m3", 1024)),
        allow_embedding_mismatch=True,
    )
    record = store.get_session("s")
    assert record is not None and record.embedding_contract is not None
    assert record.embedding_contract["model"] == "minilm"  # not yet: only at the first write
    session.stamp_before_write()
    record = store.get_session("s")
    assert record is not None and record.embedding_contract is not None
    assert record.embedding_contract == {"kind": "onnx", "model": "bge-m3", "dim": 1024}
    # From then on a plain serve with the new contract opens it.
    Session.open(store, "s", EmbedderPlan.ready(FixedEmbedder("bge-m3", 1024)))


def test_canonical_strategy_has_no_embedder(tmp_path: Path, store: SqliteStore) -> None:
    (tmp_path / "lambo.toml").write_text('[embedder]\nmatch_strategy = "canonical"\n')
    config = load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path)
    plan = EmbedderPlan.from_config(config, LoadedModels())
    assert plan.lazy is None and plan.problem is None and not plan.embeds
    session = Session.open(store, "s", plan)
    assert not session.embeds
    assert session.contract == NO_EMBEDDER_CONTRACT
    session.stamp_before_write()
    record = store.get_session("s")
    assert record is not None and record.embedding_contract is None


def test_missing_model_is_one_clear_configuration_error(
    tmp_path: Path, store: SqliteStore, caplog: pytest.LogCaptureFixture
) -> None:
    config = load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path)
    with caplog.at_level("WARNING"):
        plan = EmbedderPlan.from_config(config, LoadedModels())
    assert plan.problem is not None and plan.embeds
    logged = caplog.text
    for hint in ("lambo model pull", "lambo model import", "canonical"):
        assert hint in logged
    session = Session.open(store, "s", plan)  # reads keep working: the session opens
    with pytest.raises(ConfigError) as info:
        session.embedder(timeout=0)
    assert "lambo model pull" in info.value.render()


def test_writes_wait_while_the_model_loads(store: SqliteStore) -> None:
    release = threading.Event()
    embedder = FixedEmbedder("minilm", 384)

    def slow_load() -> FixedEmbedder:
        release.wait(10)
        return embedder

    lazy = LazyEmbedder(slow_load).start()
    plan = EmbedderPlan(lazy=lazy, contract=embedder.contract)
    session = Session.open(store, "s", plan)
    with pytest.raises(EmbedderLoading, match="still loading"):
        session.embedder(timeout=0)
    release.set()
    assert session.embedder(timeout=10) is embedder
