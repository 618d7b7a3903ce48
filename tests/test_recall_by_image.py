"""lambo_recall by image with the tests' tiny two-tower model (tests/two_tower.py): real
onnxruntime inference on generated PNG, JPEG and WebP images. Spec: "Recall by image or by
vector". The concepts are text, embedded by the text tower; colour words land where images
of that colour do, so a red picture finds the crimson dress whose text never says red."""

from __future__ import annotations

import base64
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from lambo_core.embed.importer import import_model
from lambo_core.embed.two_tower import TwoTowerEmbedder
from lambo_core.errors import ConfigError, LamboError, ParameterError
from lambo_core.recall import RecallDefaults, recall
from lambo_core.recall.parts import BASIS_VECTOR
from lambo_core.recall.pipeline import recall_parts
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import MemoryStore, SqliteStore
from lambo_core.writes import WritePipeline
from tests.two_tower import COLOURS, TinyClip, install_tiny_clip, png, tiny_clip

DEFAULTS = RecallDefaults()
DRESSES = [
    "the crimson dress for onam",
    "the navy blazer for the interview",
    "the emerald saree from the wedding",
]


@pytest.fixture
def tiny(tmp_path: Path) -> TinyClip:
    return install_tiny_clip(tmp_path)


@pytest.fixture
def clip(tiny: TinyClip) -> TwoTowerEmbedder:
    return TwoTowerEmbedder(tiny.dir, threads=1, batch_size=4)


@pytest.fixture
def wardrobe(tmp_path: Path, clip: TwoTowerEmbedder) -> Iterator[Session]:
    store = SqliteStore(tmp_path / "w.db")
    pipeline = WritePipeline(Session.open(store, "w", EmbedderPlan.ready(clip))).start()
    for text in DRESSES:
        ack = pipeline.submit(
            "lambo_derive",
            {"agent_id": "a", "concepts": [{"content": text, "concept_type": "entity"}]},
        )
        view = pipeline.session.receipts.wait(ack.structured["receipt"], "a", "w", 30_000)
        assert view.state.value == "applied", view.detail
    yield pipeline.session
    pipeline.close()
    store.close()


def image(rgb: tuple[int, int, int], fmt: str = "PNG", **kw: Any) -> dict[str, str]:
    mime = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp"}[fmt]
    return {"mime": mime, "data": base64.b64encode(png(rgb, fmt=fmt, **kw)).decode("ascii")}


@pytest.mark.parametrize(
    ("rgb", "fmt", "first"),
    [
        (COLOURS["red"], "PNG", DRESSES[0]),
        (COLOURS["scarlet"], "JPEG", DRESSES[0]),
        (COLOURS["blue"], "WEBP", DRESSES[1]),
        (COLOURS["green"], "PNG", DRESSES[2]),
    ],
)
def test_an_image_finds_the_concept_of_its_colour_through_the_vector_leg(
    wardrobe: Session, rgb: tuple[int, int, int], fmt: str, first: str
) -> None:
    args = {"agent_id": "a", "image": image(rgb, fmt), "traversal_depth": 0}
    result = recall(wardrobe, args, defaults=DEFAULTS)
    assert result.hits[0]["content"] == first
    assert result.warnings == []
    parts = recall_parts(wardrobe, args, defaults=DEFAULTS)
    assert {hit.basis for hit in parts.hits} == {BASIS_VECTOR}


def test_text_beside_an_image_feeds_the_keyword_leg_and_nothing_is_cached(
    wardrobe: Session, clip: TwoTowerEmbedder
) -> None:
    cached = len(wardrobe.index.leg_cache._entries)
    queries = len(clip.text.query_cache)
    red = {"agent_id": "a", "image": image(COLOURS["red"]), "top_k": 1}
    assert [h["content"] for h in recall(wardrobe, red, defaults=DEFAULTS).hits] == [DRESSES[0]]
    beside = recall(wardrobe, {**red, "top_k": 2, "query": "interview"}, defaults=DEFAULTS)
    assert {h["content"] for h in beside.hits} == {DRESSES[0], DRESSES[1]}
    assert len(wardrobe.index.leg_cache._entries) == cached
    assert len(clip.text.query_cache) == queries


def test_two_similar_images_rank_alike(wardrobe: Session) -> None:
    one = recall_parts(
        wardrobe, {"agent_id": "a", "image": image(COLOURS["red"])}, defaults=DEFAULTS
    )
    other = recall_parts(
        wardrobe,
        {"agent_id": "a", "image": image(COLOURS["crimson"], size=(64, 30), patch=None)},
        defaults=DEFAULTS,
    )
    assert one.hit_ids()[0] == other.hit_ids()[0]


def test_a_bad_image_is_refused_before_it_reaches_the_model(
    wardrobe: Session, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    good = image(COLOURS["red"])
    wide = base64.b64encode(png((1, 2, 3), size=(4097, 8))).decode()
    cases = [
        (
            {"mime": "image/jpeg", "data": good["data"]},
            "image: declared image/jpeg but the bytes are image/png",
        ),
        (
            {"mime": "image/png", "data": "data:image/png;base64," + good["data"]},
            "image.data starts with a data: URI prefix",
        ),
        ({"mime": "image/png", "data": wide}, "image is 4097x8 pixels; at most 4096 a side"),
    ]
    for sent, start in cases:
        with pytest.raises(LamboError) as info:
            recall(wardrobe, {"agent_id": "a", "image": sent}, defaults=DEFAULTS)
        assert info.value.render().startswith(start), info.value.render()
        for part in (sent["data"][:24], sent["data"][-24:]):
            assert part not in info.value.render() + caplog.text


def test_an_image_needs_a_store_with_vector_search(clip: TwoTowerEmbedder) -> None:
    session = Session.open(MemoryStore(), "m", EmbedderPlan.ready(clip))
    assert session.modalities == ["text", "image"]
    with pytest.raises(ConfigError) as info:
        recall(session, {"agent_id": "a", "image": image(COLOURS["red"])}, defaults=DEFAULTS)
    assert info.value.render().startswith(
        "configuration error: recall by image needs a store with vector search"
    )


def test_the_models_refusal_of_an_image_names_the_recalls_field(tmp_path: Path) -> None:
    # a model that takes RGB only (do_convert_rgb false): a grey PNG passes check_image, and
    # the model's own refusal comes back as an error naming image, never an answer
    src = tiny_clip(tmp_path / "rgb-only-src")
    config = src.dir / "preprocessor_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "do_convert_rgb": False}))
    model_dir = import_model(src.dir, "rgb-only", tmp_path / "models")
    store = SqliteStore(tmp_path / "g.db")
    embedder = TwoTowerEmbedder(model_dir, threads=1)
    pipeline = WritePipeline(Session.open(store, "g", EmbedderPlan.ready(embedder))).start()
    try:
        ack = pipeline.submit(
            "lambo_derive",
            {"agent_id": "a", "concepts": [{"content": DRESSES[0], "concept_type": "entity"}]},
        )
        pipeline.session.receipts.wait(ack.structured["receipt"], "a", "g", 30_000)
        out = io.BytesIO()
        Image.new("L", (40, 40), 90).save(out, "PNG")
        grey = {"mime": "image/png", "data": base64.b64encode(out.getvalue()).decode("ascii")}
        with pytest.raises(ParameterError) as info:
            recall(pipeline.session, {"agent_id": "a", "image": grey}, defaults=DEFAULTS)
        assert info.value.render() == (
            "image is in Pillow mode L, and this model takes RGB images only (its "
            "preprocessor_config.json has do_convert_rgb false)"
        )
        red = {"agent_id": "a", "image": image(COLOURS["red"])}
        assert recall(pipeline.session, red, defaults=DEFAULTS).hits[0]["content"] == DRESSES[0]
    finally:
        pipeline.close()
        store.close()
