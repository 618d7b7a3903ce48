"""lambo_recall by a client vector (query_vector), and what keeps a recall by image or vector
from running. Spec: lambo_recall, "Recall by image or by vector", the query_vector and image
rows, the Errors rows on contracts and configuration, "Layered sessions".

The vectors are the real MiniLM's (the one the session embeds with), computed here as a
client would and sent with the session's contract; the facts are written through the real
write pipeline on SQLite (vectors in RAM) and on PostgreSQL (vectors searched there).
"""

from __future__ import annotations

import base64
import io
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest
from PIL import Image

from lambo_core.config import load_config
from lambo_core.embed.onnx import OnnxEmbedder
from lambo_core.errors import ConfigError, LamboError, ParameterError, StoreError
from lambo_core.recall import RecallDefaults, RecallResult, recall
from lambo_core.recall.legs import SEARCH_FAILED
from lambo_core.recall.merge import NOT_SEARCHED_WARNING
from lambo_core.recall.parts import BASIS_RECENT, BASIS_VECTOR
from lambo_core.recall.pipeline import recall_parts
from lambo_core.serve import Serve, ServeOptions
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import MemoryStore, SqliteStore
from lambo_core.writes import WritePipeline
from tests.flaky_store import FlakyStore
from tests.layered_serve import body, derive, refusal
from tests.test_recall import FACTS, hybrid

__all__ = ["hybrid"]  # the facts on SQLite and PostgreSQL, shared with test_recall

ON = RecallDefaults(accept_client_vectors=True)
OFF = RecallDefaults()
BILLING = "billing statements created every night by a scheduled task"  # FACTS[4], no word


def by_vector(session: Session, embedder: OnnxEmbedder, text: str, **extra: Any) -> dict[str, Any]:
    """lambo_recall's arguments with ``text`` embedded by the client as query_vector."""
    vector = embedder.embed([text])[0]  # not embed_query: the client's own computation
    return {
        "agent_id": "a",
        "query_vector": {"values": vector.tolist(), "contract": dict(session.contract)},
        "traversal_depth": 0,
        **extra,
    }


def contents(result: RecallResult) -> list[str]:
    return [hit["content"] for hit in result.hits]


def refused(session: Session, args: Mapping[str, Any], defaults: RecallDefaults = ON) -> LamboError:
    with pytest.raises(LamboError) as info:
        recall(session, args, defaults=defaults)
    return info.value


def test_a_client_vector_finds_a_concept_that_shares_no_word(
    hybrid: Session, minilm: OnnxEmbedder
) -> None:
    keyword_only = recall(
        hybrid, {"agent_id": "a", "query": BILLING}, defaults=ON, legs={"keyword"}
    )
    assert keyword_only.hits == []  # no word in common
    result = recall(hybrid, by_vector(hybrid, minilm, BILLING), defaults=ON)
    assert contents(result)[0] == FACTS[4]
    assert result.warnings == []
    parts = recall_parts(hybrid, by_vector(hybrid, minilm, BILLING), defaults=ON)
    assert {hit.basis for hit in parts.hits} == {BASIS_VECTOR}  # no text: no recent leg
    assert parts.hits[0].relevance is not None and parts.hits[0].relevance > 0.4


def test_a_client_vector_is_normalized_and_not_cached(
    hybrid: Session, minilm: OnnxEmbedder
) -> None:
    args = by_vector(hybrid, minilm, BILLING)
    scaled = {
        **args,
        "query_vector": {
            **args["query_vector"],
            "values": [v * 37.5 for v in args["query_vector"]["values"]],
        },
    }
    cached = len(hybrid.index.leg_cache._entries)
    queries = len(minilm.query_cache)
    first = recall_parts(hybrid, args, defaults=ON)
    again = recall_parts(hybrid, scaled, defaults=ON)  # (parts record no access counts)
    assert first.hit_ids() == again.hit_ids()
    assert [h.relevance for h in first.hits] == pytest.approx([h.relevance for h in again.hits])
    assert len(hybrid.index.leg_cache._entries) == cached  # the leg cache never holds it
    assert len(minilm.query_cache) == queries  # nor the embedder's text query cache
    recall(hybrid, {"agent_id": "a", "query": BILLING}, defaults=ON)
    assert len(hybrid.index.leg_cache._entries) == cached + 1  # a text recall is cached


def test_text_beside_a_vector_still_feeds_the_keyword_leg(
    hybrid: Session, minilm: OnnxEmbedder
) -> None:
    alone = recall(hybrid, by_vector(hybrid, minilm, FACTS[3], top_k=2), defaults=ON)
    assert contents(alone)[0] == FACTS[3]
    assert FACTS[1] not in contents(alone)  # the vector alone does not reach it
    beside = recall(
        hybrid, by_vector(hybrid, minilm, FACTS[3], top_k=2, query="postgres"), defaults=ON
    )
    assert set(contents(beside)) == {FACTS[3], FACTS[1]}


def test_recent_interactions_are_left_out_without_text(
    hybrid: Session, minilm: OnnxEmbedder
) -> None:
    # the fillers were written last: the recent leg holds them, and only them
    fillers = {f"zz filler {i}" for i in range(3)}
    legs = {"keyword", "recent"}  # the vector leg aside, to see the recent leg alone
    for blank in (None, "", "  \t "):
        args = by_vector(hybrid, minilm, BILLING)
        if blank is not None:
            args["query"] = blank  # blank text counts as none
        assert recall(hybrid, args, defaults=ON, legs=legs).hits == []
    with_text = recall(
        hybrid, by_vector(hybrid, minilm, BILLING, query="qqqq"), defaults=ON, legs=legs
    )
    assert set(contents(with_text)) == fillers
    # every leg: with text some hit may come from the recent leg; without, none does
    parts = recall_parts(hybrid, by_vector(hybrid, minilm, "zz filler"), defaults=ON)
    assert all(hit.basis != BASIS_RECENT for hit in parts.hits)


def test_a_dependency_question_is_answered_by_the_blended_recall(
    hybrid: Session, minilm: OnnxEmbedder
) -> None:
    pipeline = WritePipeline(hybrid).start()
    try:
        ack = pipeline.submit(
            "lambo_derive",
            {
                "agent_id": "a",
                "concepts": [
                    {
                        "content": "the nightly report reads the staging database",
                        "concept_type": "logic",
                        "depends_on": [FACTS[1]],
                    }
                ],
            },
        )
        view = hybrid.receipts.wait(ack.structured["receipt"], "a", "s", 30_000)
        assert view.state.value == "applied", view.detail
    finally:
        pipeline.close()
    question = f"what depends on {FACTS[1]}"
    text = recall_parts(hybrid, {"agent_id": "a", "query": question}, defaults=ON)
    assert text.dependency is not None  # by text: answered by traversal
    by = recall_parts(hybrid, by_vector(hybrid, minilm, BILLING, query=question), defaults=ON)
    assert by.dependency is None
    assert by.hits and by.hits[0].basis == BASIS_VECTOR


def test_a_failed_vector_search_is_an_error_not_an_answer(
    pg_dsn: str, minilm: OnnxEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    from lambo_core.store.postgres.store import PostgresStore

    store = FlakyStore(PostgresStore(pg_dsn))
    pipeline = WritePipeline(Session.open(store, "s", EmbedderPlan.ready(minilm))).start()
    try:
        for text in FACTS:
            ack = pipeline.submit(
                "lambo_derive",
                {"agent_id": "a", "concepts": [{"content": text, "concept_type": "logic"}]},
            )
            pipeline.session.receipts.wait(ack.structured["receipt"], "a", "s", 30_000)
        session = pipeline.session
        args = by_vector(session, minilm, BILLING, query="invoices")
        assert contents(recall(session, args, defaults=ON))[0] == FACTS[4]
        store.refuse.add("vector_top_k")
        caplog.set_level(logging.DEBUG)
        err = refused(session, args)
        assert isinstance(err, StoreError)
        assert err.render() == f"store error: {SEARCH_FAILED}"
        assert "re-check the session's embedding contract (lambo_stats) and retry" in err.render()
        values = args["query_vector"]["values"]
        for value in values[:16]:
            assert repr(value)[:9] not in err.render() + caplog.text
    finally:
        pipeline.close()
        store.inner.close()


# ---------------------------------------------------------------------------- refusals


@pytest.fixture
def memory_session(minilm: OnnxEmbedder) -> Session:
    """A real embedder over a store without vector search."""
    return Session.open(MemoryStore(), "m", EmbedderPlan.ready(minilm))


@pytest.fixture
def canonical_session() -> Session:
    return Session.open(MemoryStore(), "c", EmbedderPlan(None, None))


@pytest.fixture
def sqlite_session(tmp_path: Path, minilm: OnnxEmbedder) -> Iterator[Session]:
    store = SqliteStore(tmp_path / "r.db")
    yield Session.open(store, "s", EmbedderPlan.ready(minilm))
    store.close()


def png_image() -> dict[str, str]:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (180, 20, 40)).save(buf, "PNG")
    return {"mime": "image/png", "data": base64.b64encode(buf.getvalue()).decode("ascii")}


PNG = png_image()


def vector_of(session: Session, values: list[Any] | None = None, **contract: Any) -> dict[str, Any]:
    dim = int(session.contract["dim"]) or 384
    return {
        "values": values if values is not None else [0.01 * (i % 7 + 1) for i in range(dim)],
        "contract": {**session.contract, **contract},
    }


def test_the_configuration_refusals_name_what_is_missing(
    sqlite_session: Session,
    memory_session: Session,
    canonical_session: Session,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    cases: list[tuple[Session, dict[str, Any], RecallDefaults, type[LamboError], str]] = [
        (
            sqlite_session,
            {"image": PNG, "query_vector": vector_of(sqlite_session)},
            ON,
            ParameterError,
            "send at most one of image, query_vector",
        ),
        (
            sqlite_session,
            {"query_vector": vector_of(sqlite_session)},
            OFF,
            ConfigError,
            "configuration error: recall by query_vector needs client vectors, which this "
            "server does not accept; the operator enables them with [embedder] "
            "accept_client_vectors = true",
        ),
        (
            sqlite_session,
            {"image": PNG, "query": "a red saree"},
            ON,
            ConfigError,
            "configuration error: recall by image needs an embedder that embeds images; this "
            "server's embedder embeds text only",
        ),
        (
            canonical_session,
            {"image": PNG},
            ON,
            ConfigError,
            "configuration error: recall by image needs an embedder that embeds images; this "
            'server has none (match_strategy = "canonical"',
        ),
        (
            canonical_session,
            {"query_vector": vector_of(canonical_session)},
            ON,
            ConfigError,
            "configuration error: recall by query_vector needs vector search, and this server "
            'has no embedder (match_strategy = "canonical" or embedder.kind = none); set '
            '[embedder] match_strategy = "hybrid"',
        ),
        (
            memory_session,
            {"query_vector": vector_of(memory_session)},
            ON,
            ConfigError,
            "configuration error: recall by query_vector needs a store with vector search, "
            "and this session's store has none",
        ),
        # the configuration is refused before the payload is read: a bad vector is not named
        (
            sqlite_session,
            {"query_vector": {"values": [float("nan")], "contract": {}}},
            OFF,
            ConfigError,
            "configuration error: recall by query_vector needs client vectors",
        ),
        (
            sqlite_session,
            {"query_vector": vector_of(sqlite_session, model="other-model")},
            ON,
            ParameterError,
            "query_vector.contract differs from the session's in model; the session's "
            "embedding contract is {kind: onnx, model: minilm, dim: 384}",
        ),
        (
            sqlite_session,
            {"query_vector": vector_of(sqlite_session, values=[0.0] * 384)},
            ON,
            ParameterError,
            "query_vector.values has zero length",
        ),
        (
            sqlite_session,
            {"query_vector": vector_of(sqlite_session, values=[0.5] * 383)},
            ON,
            ParameterError,
            "query_vector.values has 383 values, but the session's embedding contract has dim 384",
        ),
        (
            sqlite_session,
            {"query_vector": vector_of(sqlite_session, values=[0.25] * 4097)},
            ON,
            ParameterError,
            "query_vector.values has 4097 values; at most 4096 are accepted",
        ),
    ]
    for session, extra, defaults, kind, start in cases:
        err = refused(session, {"agent_id": "a", **extra}, defaults)
        assert isinstance(err, kind), (start, err)
        assert err.render().startswith(start), err.render()
        for sent in (PNG["data"][:16], PNG["data"][-16:], "other-model", "0.01", "0.25", "0.5,"):
            assert sent not in err.render() + caplog.text, (sent, err.render())


def test_the_setting_is_read_from_lambo_toml(tmp_path: Path) -> None:
    assert (
        RecallDefaults.from_config(load_config(env={}, cwd=tmp_path)).accept_client_vectors is False
    )
    (tmp_path / "lambo.toml").write_text("[embedder]\naccept_client_vectors = true\n")
    config = load_config(env={}, cwd=tmp_path)
    assert RecallDefaults.from_config(config).accept_client_vectors is True
    (tmp_path / "lambo.toml").write_text('[embedder]\naccept_client_vectors = "maybe"\n')
    with pytest.raises(ConfigError) as info:
        load_config(env={}, cwd=tmp_path)
    assert "embedder.accept_client_vectors (" in info.value.render()
    assert info.value.render().endswith("must be true or false")


# ---------------------------------------------------------------------------- layered


def test_a_layered_session_recalls_by_vector_only_itself_and_says_so(
    tmp_path: Path, minilm: OnnxEmbedder
) -> None:
    toml = (
        f'[embedder]\nmodel = "{minilm.model_dir}"\naccept_client_vectors = true\n'
        f'[store]\npath = "{tmp_path / "lambo.db"}"\n'
    )
    (tmp_path / "lambo.toml").write_text(toml)
    config = load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path)

    async def main() -> None:
        serve = Serve(config, ServeOptions(session="lambo", layers=("general",)))
        await serve.start()
        try:
            own = await derive(serve, FACTS[4])
            await derive(serve, "invoices are generated by a nightly cron", scope="general")
            contract = body(await serve("lambo_stats", {"agent_id": "a"}))["embedding_contract"]
            values = minilm.embed([BILLING])[0].tolist()
            args = {"agent_id": "a", "query_vector": {"values": values, "contract": contract}}
            found = body(await serve("lambo_recall", args))
            assert found["warnings"][0] == NOT_SEARCHED_WARNING.format(
                by="vector", session="lambo", layers="general"
            )
            assert found["warnings"][0] == (
                "recall: a recall by vector reads session lambo only; its layers (general) "
                "were not searched"
            )
            assert [(h["node_id"], h["session"]) for h in found["hits"]] == [(own, "lambo")]
            # scoped to the session itself: the same hits, no warning
            scoped = body(await serve("lambo_recall", {**args, "scope": "lambo"}))
            assert scoped["warnings"] == []
            assert [h["node_id"] for h in scoped["hits"]] == [own]
            # scoped to the layer: the layer's own recall by vector
            layer = body(await serve("lambo_recall", {**args, "scope": "general"}))
            assert {h["session"] for h in layer["hits"]} == {"general"}
            # a text recall still merges both
            merged = body(await serve("lambo_recall", {"agent_id": "a", "query": "invoices"}))
            assert {h["session"] for h in merged["hits"]} == {"lambo", "general"}
            # refusals come back as they would unlayered, with no warning added
            bad = {**args, "query_vector": {"values": values[:10], "contract": contract}}
            assert refusal(await serve("lambo_recall", bad)).startswith(
                "query_vector.values has 10 values"
            )
        finally:
            await serve.close()

    anyio.run(main)
