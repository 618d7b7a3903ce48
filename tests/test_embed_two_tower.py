"""The two-tower embedder with the tiny CLIP-style model of tests/two_tower.py: its numbers
against numpy, its preprocessing against a Pillow/numpy reference, the refusals of
preprocessor fields lambo does not run, the manifest's modalities, and loading it from a
configuration (EmbedderPlan, Session, lambo_stats)."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lambo_core.config import load_config
from lambo_core.embed.base import embeds_images
from lambo_core.embed.loader import LoadedModels, read_model_facts
from lambo_core.embed.manifest import MANIFEST_NAME, ModelManifest
from lambo_core.embed.onnx import OnnxEmbedder
from lambo_core.embed.preprocess import (
    ImagePreprocess,
    center_crop,
    read_preprocessor,
    resize_size,
)
from lambo_core.embed.two_tower import TwoTowerEmbedder
from lambo_core.errors import ConfigError, ParameterError
from lambo_core.serve import ServeOptions, open_service, stop_service
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import SqliteStore
from tests.two_tower import (
    CLIP_MEAN,
    CLIP_STD,
    PREPROCESSOR,
    SIDE,
    TinyClip,
    install_tiny_clip,
    png,
)

RED = (255, 0, 0)
RED2 = (228, 24, 30)  # a slightly different red
BLUE = (0, 0, 255)


@pytest.fixture
def tiny(tmp_path: Path) -> TinyClip:
    return install_tiny_clip(tmp_path)


@pytest.fixture
def clip(tiny: TinyClip) -> TwoTowerEmbedder:
    return TwoTowerEmbedder(tiny.dir, threads=1, batch_size=4)


def reference_pixels(data: bytes) -> np.ndarray:
    """CLIPImageProcessor's steps written out for the tiny model's config: RGB, bicubic
    resize of the short side to 32 (long side truncated), center crop 32x32, /255,
    (x - mean) / std, channels first."""
    image = Image.open(io.BytesIO(data)).convert("RGB")
    w, h = image.size
    size = (SIDE, int(SIDE * h / w)) if w <= h else (int(SIDE * w / h), SIDE)
    array = np.asarray(image.resize(size, Image.Resampling.BICUBIC)).astype(np.float64)
    top, left = (array.shape[0] - SIDE) // 2, (array.shape[1] - SIDE) // 2
    array = array[top : top + SIDE, left : left + SIDE] * (1 / 255)
    mean, std = np.asarray(CLIP_MEAN, np.float32), np.asarray(CLIP_STD, np.float32)
    out = (array.astype(np.float32) - mean) / std
    result: np.ndarray = out.transpose(2, 0, 1)
    return result


# --------------------------------------------------------------------------- the numbers


def test_the_towers_match_numpy(tiny: TinyClip, clip: TwoTowerEmbedder) -> None:
    texts = ["crimson", "a photo of the deploy dashboard", "navy banner", "zzz unknown"]
    got = clip.embed(texts)
    want = np.stack([tiny.text_vector(t) for t in texts])
    np.testing.assert_allclose(got, want, atol=1e-5)
    images = [png(RED), png(BLUE, (30, 70)), png(RED2, (90, 33), fmt="JPEG")]
    vectors = clip.embed_images(images)
    assert vectors.dtype == np.float32 and vectors.shape == (3, 8)
    for row, data in zip(vectors, images, strict=True):
        np.testing.assert_allclose(row, tiny.image_vector(reference_pixels(data)), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)


def test_colour_words_land_near_images_of_that_colour(clip: TwoTowerEmbedder) -> None:
    red, red2, blue = clip.embed_images([png(RED), png(RED2, (60, 50)), png(BLUE)])
    words = clip.embed(["crimson", "scarlet", "red", "blue", "navy", "a deploy screenshot"])
    crimson, scarlet, red_word, blue_word, navy, caption = words
    assert float(red @ crimson) > 0.9 and float(red @ scarlet) > 0.9
    assert float(red @ red_word) > float(red @ blue_word) + 0.5
    assert float(blue @ navy) > float(blue @ crimson) + 0.5
    assert float(red @ red2) > 0.95 > float(red @ blue)
    # a caption without a colour word is nowhere near the picture
    assert float(red @ caption) < 0.5


def test_the_protocol_modalities_and_query_cache(clip: TwoTowerEmbedder) -> None:
    assert clip.modalities == ["text", "image"] and embeds_images(clip)
    assert clip.contract == {"kind": "onnx", "model": "tiny-clip", "dim": 8}
    assert clip.dim == 8 and clip.merge_threshold == 0.85
    first = clip.embed_query("crimson")
    assert clip.embed_query("crimson") is first and not first.flags.writeable
    assert not embeds_images(OnnxEmbedder(clip.text.model_dir, threads=1))


def test_images_come_back_in_input_order_in_batches(clip: TwoTowerEmbedder) -> None:
    colours = [RED, BLUE, (0, 255, 0), RED2, (10, 10, 200)]
    images = [png(c, (40 + 7 * i, 36)) for i, c in enumerate(colours)]
    together = clip.embed_images(images)
    assert clip.last_image_batches == [4, 1]  # batch_size 4
    alone = np.stack([clip.embed_images([data])[0] for data in images])
    np.testing.assert_allclose(together, alone, atol=1e-6)
    assert clip.embed_images([]).shape == (0, 8)


def test_concurrent_image_embeds_agree(clip: TwoTowerEmbedder) -> None:
    images = [png(RED), png(BLUE), png(RED2)]
    want = clip.embed_images(images)
    results: list[np.ndarray] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for _ in range(5):
                results.append(clip.embed_images(images))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 20
    for got in results:
        np.testing.assert_allclose(got, want, atol=1e-6)


def test_webp_grey_and_rgba_images_are_taken(clip: TwoTowerEmbedder) -> None:
    grey = io.BytesIO()
    Image.new("L", (40, 40), 128).save(grey, format="PNG")
    rgba = io.BytesIO()
    Image.new("RGBA", (40, 40), (255, 0, 0, 90)).save(rgba, format="PNG")
    vectors = clip.embed_images([png(RED, fmt="WEBP"), grey.getvalue(), rgba.getvalue()])
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    # RGBA is converted by dropping alpha, as Pillow's convert("RGB") (and so HF) does
    assert float(vectors[2] @ clip.embed_images([png(RED, patch=None)])[0]) > 0.999


def _gif() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), RED).save(out, format="GIF")
    return out.getvalue()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x89PNG\r\n\x1a\nnot really", "images[1] is not a PNG, JPEG or WebP image"),
        (_gif(), "images[1] is not a PNG, JPEG or WebP image"),
        (png(RED)[:60], "images[1] "),
    ],
    ids=["garbage", "gif", "truncated"],
)
def test_bad_image_bytes_are_refused_without_the_bytes(
    clip: TwoTowerEmbedder, data: bytes, message: str
) -> None:
    with pytest.raises(ParameterError) as caught:
        clip.embed_images([png(RED), data])
    assert caught.value.message.startswith(message)
    assert "PNG\r" not in caught.value.render() and "\\x" not in caught.value.render()


def test_an_image_over_4096_pixels_a_side_is_not_decoded(clip: TwoTowerEmbedder) -> None:
    with pytest.raises(ParameterError, match=r"images\[0\] is over 4096 pixels a side"):
        clip.embed_images([png(RED, (4097, 2), patch=None)])


def test_one_image_is_not_a_batch(clip: TwoTowerEmbedder) -> None:
    with pytest.raises(TypeError, match="a sequence of images, not one image"):
        clip.embed_images(png(RED))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- preprocessing


@pytest.mark.parametrize("size", [(48, 40), (40, 48), (33, 100), (100, 33), (32, 32), (7, 5)])
def test_preprocessing_matches_the_reference(clip: TwoTowerEmbedder, size: tuple[int, int]) -> None:
    data = png((30, 160, 220), size, patch=(250, 10, 10))
    got = clip.pixels(data)
    assert got.shape == (3, SIDE, SIDE) and got.dtype == np.float32
    np.testing.assert_allclose(got, reference_pixels(data), atol=1e-6)


def test_the_resize_truncates_the_long_side_and_the_crop_pads_when_small() -> None:
    assert resize_size(48, 40, 32) == (38, 32)  # int(32 * 48 / 40) = int(38.4)
    assert resize_size(40, 48, 32) == (32, 38)
    assert resize_size(100, 33, 32) == (96, 32)  # int(96.97)
    image = np.arange(5 * 4 * 3, dtype=np.uint8).reshape(5, 4, 3)
    np.testing.assert_array_equal(center_crop(image, 3, 2), image[1:4, 1:3])
    # smaller than the crop: centered in zeros, the extra row going below (HF's ceil)
    padded = center_crop(image, 8, 6)
    assert padded.shape == (8, 6, 3)
    np.testing.assert_array_equal(padded[2:7, 1:5], image)
    assert padded[:2].sum() == 0 and padded[7:].sum() == 0
    assert padded[:, :1].sum() == 0 and padded[:, 5:].sum() == 0


def test_steps_the_config_turns_off_are_skipped() -> None:
    read = read_preprocessor(
        {"do_resize": False, "do_center_crop": False, "do_normalize": False}, "p.json"
    )
    steps = read.preprocess
    assert (steps.shortest_edge, steps.crop, steps.mean, steps.std) == (None, None, None, None)
    image = Image.new("RGB", (3, 2), (255, 51, 0))
    np.testing.assert_allclose(steps.pixels(image)[:, 0, 0], [1.0, 0.2, 0.0], atol=1e-6)
    assert steps.pixels(image).shape == (3, 2, 3)


def test_without_convert_rgb_only_rgb_images_are_taken() -> None:
    steps = read_preprocessor({**PREPROCESSOR, "do_convert_rgb": False}, "p.json").preprocess
    assert steps.pixels(Image.new("RGB", (40, 40), RED)).shape == (3, SIDE, SIDE)
    with pytest.raises(ParameterError) as caught:
        steps.pixels(Image.new("L", (40, 40), 7), "images[2]")
    assert caught.value.message == (
        "images[2] is in Pillow mode L, and this model takes RGB images only (its "
        "preprocessor_config.json has do_convert_rgb false)"
    )


def test_fields_left_out_take_clip_defaults_and_say_so() -> None:
    read = read_preprocessor({"crop_size": 32, "size": 32}, "p.json")
    assert read.preprocess == ImagePreprocess(True, 32, 3, (32, 32), 1 / 255, CLIP_MEAN, CLIP_STD)
    sources = {setting: source for setting, _, source in read.lines}
    assert sources["size"] == "p.json" and sources["crop_size"] == "p.json"
    assert sources["resample"] == "CLIPImageProcessor's default"
    assert sources["image_mean"] == "CLIPImageProcessor's default"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"do_pad": True}, "p.json: do_pad is a preprocessing field lambo does not run"),
        ({"size": {"height": 32, "width": 32}}, "p.json: size must be {shortest_edge: N}"),
        ({"size": {"shortest_edge": 0}}, "p.json: size must be {shortest_edge: N}"),
        ({"resample": 7}, "p.json: resample must be a Pillow resampling code"),
        ({"crop_size": {"height": 32}}, "p.json: crop_size must be {height: N, width: N}"),
        ({"rescale_factor": -1}, "p.json: rescale_factor must be a positive number"),
        ({"image_mean": [0.5, 0.5]}, "p.json: image_mean must be 3 numbers"),
        ({"image_std": [0.2, 0.0, 0.2]}, "p.json: image_std must be 3 positive numbers"),
        ({"do_resize": "yes"}, "p.json: do_resize must be true or false"),
        ({"image_processor_type": "ViTImageProcessor"}, "p.json: image_processor_type must"),
    ],
    ids=lambda v: next(iter(v)) if isinstance(v, dict) else "",
)
def test_preprocessor_fields_lambo_does_not_run_are_refused(
    change: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        read_preprocessor({**PREPROCESSOR, **change}, "p.json")
    assert caught.value.message.startswith(message)


def test_a_graph_size_the_preprocessing_does_not_give_is_refused(tiny: TinyClip) -> None:
    _edit_manifest(tiny.dir, lambda m: m["vision"]["preprocess"].update(crop=None))
    with pytest.raises(ConfigError, match="takes 32x32 pixels but its preprocessing gives images"):
        TwoTowerEmbedder(tiny.dir, threads=1)


# --------------------------------------------------------------------------- the manifest


def _edit_manifest(model_dir: Path, edit: object) -> None:
    path = model_dir / MANIFEST_NAME
    data = json.loads(path.read_text())
    assert callable(edit)
    edit(data)
    path.write_text(json.dumps(data))


def test_a_manifest_without_modalities_is_a_text_model(tiny: TinyClip) -> None:
    def old(data: dict[str, object]) -> None:
        del data["modalities"], data["vision"]

    _edit_manifest(tiny.dir, old)
    manifest = ModelManifest.read(tiny.dir)
    assert manifest.vision is None and manifest.modalities == ["text"]
    assert "vision" not in manifest.to_json() and manifest.to_json()["modalities"] == ["text"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.update(modalities=["image"]), 'modalities must be ["text"] or'),
        (lambda m: m.pop("vision"), 'modalities is ["text", "image"] but there is no vision'),
        (lambda m: m.update(modalities=["text"]), 'modalities must be ["text", "image"] beside'),
        (lambda m: m["vision"].update(model_file="../x.onnx"), "vision.model_file must name"),
        (lambda m: m["vision"].update(output=3), "vision.output must be a graph"),
        (
            lambda m: m["vision"]["preprocess"].update(resample=9),
            "vision.preprocess.resample must be",
        ),
        (lambda m: m["vision"]["preprocess"].update(std=[1, 1, 0]), "vision.preprocess.mean and"),
        (lambda m: m["vision"]["preprocess"].update(mean=None), "vision.preprocess.mean and std"),
        (lambda m: m["vision"]["preprocess"].update(crop={"height": 3}), "vision.preprocess.crop"),
    ],
)
def test_a_bad_vision_manifest_is_refused_naming_the_field(
    tiny: TinyClip, edit: object, message: str
) -> None:
    _edit_manifest(tiny.dir, edit)
    with pytest.raises(ConfigError) as caught:
        ModelManifest.read(tiny.dir)
    assert caught.value.message.startswith(f"{MANIFEST_NAME} of model tiny-clip: {message}")


# --------------------------------------------------------------------------- configured


def _configure(name: str = "tiny-clip") -> None:
    Path("lambo.toml").write_text(f'[embedder]\nmodel = "{name}"\nthreads = 1\n')


def test_a_configured_two_tower_model_loads_as_one(tiny: TinyClip) -> None:
    _configure()
    embedder = LoadedModels().load(load_config())
    assert isinstance(embedder, TwoTowerEmbedder) and embeds_images(embedder)
    assert read_model_facts(load_config()) == (embedder.contract, ["text", "image"])


def test_the_plan_reads_modalities_without_loading_the_model(tiny: TinyClip) -> None:
    """A vision graph onnxruntime cannot load: the plan still says what the manifest says,
    and the load (in the background) is what fails."""
    (tiny.dir / "vision_model.onnx").write_bytes(b"\x00" * 407)  # same size, not a graph
    _configure()
    plan = EmbedderPlan.from_config(load_config(), LoadedModels())
    assert plan.modalities == ["text", "image"] and plan.contract is not None
    assert plan.lazy is not None and not plan.lazy.wait(30)
    assert plan.lazy.error is not None and "could not load vision_model.onnx" in str(
        plan.lazy.error
    )


def test_session_and_stats_say_text_and_image(tiny: TinyClip, tmp_path: Path) -> None:
    _configure()
    config = load_config()
    store = SqliteStore(tmp_path / "m.db")
    session = Session.open(store, "s", EmbedderPlan.from_config(config, LoadedModels()))
    assert session.modalities == ["text", "image"]
    service = open_service(SqliteStore(tmp_path / "n.db"), config, ServeOptions(session="s"))
    try:
        payload = service.stats_payload()
        assert payload["embedding_modalities"] == ["text", "image"]
        assert payload["embedding_contract"] == {"kind": "onnx", "model": "tiny-clip", "dim": 8}
        assert "modalities text, image" in service.stats_summary(payload)
    finally:
        stop_service(service)


def test_a_text_model_plan_still_says_text(tmp_path: Path) -> None:
    from lambo_core.embed.importer import import_model
    from tests.embed_fixtures import tiny_bge_m3

    src = tiny_bge_m3(tmp_path / "src", layout="dense")
    import_model(src.dir, "tiny-text", load_config().paths.models_dir)
    _configure("tiny-text")
    plan = EmbedderPlan.from_config(load_config(), LoadedModels())
    assert plan.modalities == ["text"]
    assert plan.lazy is not None and plan.lazy.wait(30)
    assert not embeds_images(plan.lazy.get())
    assert EmbedderPlan(lazy=None, contract=None).modalities == ["text"]
    assert Session.open(SqliteStore(tmp_path / "x.db"), "s", plan).modalities == ["text"]


def test_a_long_thin_image_resamples_only_what_the_crop_keeps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """4096x1 under CLIP's 224 shortest edge would resize to 917504x224 (616 MB of RGB):
    only the cropped region is resampled, and it matches the whole resize's crop to one
    8-bit level; without a crop such an image is refused."""
    from lambo_core.embed import preprocess

    steps = ImagePreprocess(True, 224, 3, (224, 224), 1 / 255, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    thin = Image.new("RGB", (4096, 1), (200, 10, 10))
    assert steps.pixels(thin).shape == (3, 224, 224)
    rng = np.random.default_rng(1)
    noise = Image.fromarray(rng.integers(0, 256, (300, 700, 3), dtype=np.uint8), "RGB")
    exact = steps.pixels(noise)
    monkeypatch.setattr(preprocess, "MAX_RESIZED_PIXELS", 0)  # every resize takes the box
    boxed = steps.pixels(noise)
    assert boxed.shape == exact.shape
    assert float(np.abs(boxed - exact).max()) <= 2 / 255 + 1e-6  # one level, std 0.5
    uncropped = ImagePreprocess(True, 224, 3, None, 1 / 255, None, None)
    with pytest.raises(ParameterError, match="image is 700x300 pixels, which this model"):
        uncropped.pixels(noise)
