"""`lambo model import` and `lambo model pull` of a two-tower model: the layouts an import
recognises and the ones it refuses, and the pull against the fake hub (tests/
embed_fixtures.py) with the tiny model's files and with stand-ins for the catalog's CLIP."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from lambo_core.cli.model import model_group
from lambo_core.config import load_config
from lambo_core.embed import catalog as catalog_module
from lambo_core.embed.catalog import CLIP_VIT_B32, CatalogFile, CatalogModel, CatalogVision
from lambo_core.embed.download import ModelFetchError, pull_model
from lambo_core.embed.importer import import_model, plan_import
from lambo_core.embed.loader import LoadedModels
from lambo_core.embed.manifest import ModelManifest
from lambo_core.embed.preprocess import read_preprocessor
from lambo_core.embed.two_tower import TwoTowerEmbedder
from lambo_core.errors import ConfigError
from tests.embed_fixtures import FakeHub, HubFile
from tests.two_tower import (
    PREPROCESSOR,
    TinyClip,
    clip_stand_in,
    png,
    tiny_clip,
    vision_graph,
)

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(model_group, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


# --------------------------------------------------------------------------- import


def test_the_transformers_js_layout_imports(tmp_path: Path) -> None:
    src = tiny_clip(tmp_path / "src", layout="xenova")
    path = import_model(src.dir, "tiny-clip", tmp_path / "models")
    manifest = ModelManifest.read(path)
    assert manifest.modalities == ["text", "image"]
    assert manifest.model_file == "text_model_quantized.onnx"
    assert manifest.output == "text_embeds"  # chosen over last_hidden_state
    assert manifest.vision is not None
    assert (manifest.vision.model_file, manifest.vision.input, manifest.vision.output) == (
        "vision_model_quantized.onnx",
        "pixel_values",
        "image_embeds",
    )
    assert manifest.source["model_file"] == "onnx/text_model_quantized.onnx"
    assert manifest.source["vision_model_file"] == "onnx/vision_model_quantized.onnx"
    assert set(manifest.files) == {
        "text_model_quantized.onnx",
        "vision_model_quantized.onnx",
        "tokenizer.json",
        "preprocessor_config.json",
    }
    assert manifest.max_length == 77  # the tokenizer's truncation
    red = TwoTowerEmbedder(path, threads=1).embed_images([png((255, 0, 0))])
    assert red.shape == (1, 8)


def _second_pair(src: TinyClip) -> None:
    for tower in ("text_model", "vision_model"):
        shutil.copy(
            src.dir / "onnx" / f"{tower}_quantized.onnx", src.dir / "onnx" / f"{tower}.onnx"
        )


def test_several_exports_are_refused_until_model_file_names_the_text_tower(
    tmp_path: Path,
) -> None:
    src = tiny_clip(tmp_path / "src", layout="xenova")
    _second_pair(src)
    with pytest.raises(ConfigError) as caught:
        plan_import(src.dir, "tiny-clip")
    assert caught.value.message == (
        "the directory given holds several two-tower exports (onnx/text_model.onnx + "
        "onnx/vision_model.onnx; onnx/text_model_quantized.onnx + "
        "onnx/vision_model_quantized.onnx); name the text tower with --model-file (its "
        "vision_model pair comes with it)"
    )
    plan = plan_import(src.dir, "tiny-clip", model_file="onnx/text_model.onnx")
    assert plan.vision is not None and plan.vision.model_path.name == "vision_model.onnx"
    with pytest.raises(ConfigError, match="--model-file: in a two-tower directory it names"):
        plan_import(src.dir, "tiny-clip", model_file="onnx/vision_model.onnx")


def test_a_vision_tower_without_its_pair_or_preprocessing_is_refused(tmp_path: Path) -> None:
    src = tiny_clip(tmp_path / "src")
    (src.dir / "preprocessor_config.json").unlink()
    with pytest.raises(ConfigError, match=r"has a vision tower but no preprocessor_config\.json"):
        plan_import(src.dir, "tiny-clip")
    (src.dir / "text_model.onnx").rename(src.dir / "model.onnx")
    with pytest.raises(ConfigError, match=r"holds a vision tower \(vision_model\.onnx\) but no"):
        plan_import(src.dir, "tiny-clip")


def test_towers_of_different_widths_are_refused(tmp_path: Path) -> None:
    src = tiny_clip(tmp_path / "src")
    (src.dir / "vision_model.onnx").write_bytes(vision_graph(np.eye(3, 4, dtype=np.float32)))
    with pytest.raises(ConfigError) as caught:
        plan_import(src.dir, "tiny-clip")
    assert caught.value.message == (
        "the vision tower vision_model.onnx makes 4-d vectors and the text tower 8-d; the "
        "two towers of one model share one space"
    )


def test_an_unsupported_preprocessor_field_is_refused_before_copying(tmp_path: Path) -> None:
    src = tiny_clip(tmp_path / "src")
    config = {**PREPROCESSOR, "do_reduce_labels": True}
    (src.dir / "preprocessor_config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError) as caught:
        import_model(src.dir, "tiny-clip", tmp_path / "models")
    assert caught.value.message.startswith(
        "preprocessor_config.json: do_reduce_labels is a preprocessing field lambo does not run"
    )
    assert not (tmp_path / "models").exists()


def test_cli_import_says_what_it_read_and_verify_probes_an_image(
    tmp_path: Path, lambo_home: Path
) -> None:
    src = tiny_clip(tmp_path / "src", layout="xenova")
    code, out, err = _invoke("import", str(src.dir), "--name", "tiny-clip")
    assert code == 0, err
    assert "  modalities: text, image (from the two towers, vision_model_quantized.onnx" in out
    assert "  image resample: 3 (bicubic) (from preprocessor_config.json)" in out
    assert "  image crop_size: {'height': 32, 'width': 32} (from preprocessor_config.json)" in out
    assert "and a probe image" in err
    code, out, _ = _invoke("verify", "tiny-clip")
    assert code == 0
    assert "files:        4 checked" in out
    assert "note:         embeds images too: a probe image in" in out


# --------------------------------------------------------------------------- pull


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    server = FakeHub()
    yield server
    server.stop()


def _tiny_entry() -> CatalogModel:
    """An entry shaped like the catalog's CLIP one, for the tiny model's files."""
    repo = "acme/tiny-clip"
    read = read_preprocessor(PREPROCESSOR, "tiny")
    return CatalogModel(
        name="tiny-clip",
        summary="tiny two-tower test model",
        files=(
            CatalogFile(repo, COMMIT, "onnx/text_model_quantized.onnx", "text_model.onnx"),
            CatalogFile(repo, COMMIT, "onnx/vision_model_quantized.onnx", "vision_model.onnx"),
            CatalogFile(repo, COMMIT, "tokenizer.json", "tokenizer.json"),
            CatalogFile(repo, COMMIT, "preprocessor_config.json", "preprocessor_config.json"),
        ),
        model_file="text_model.onnx",
        pooling="cls",
        output="text_embeds",
        dim=8,
        max_length=77,
        token_type_ids=False,
        pad_id=2,
        pad_token="<pad>",
        merge_threshold=0.9,
        quantization="float",
        license="MIT",
        vision=CatalogVision(
            "vision_model.onnx",
            "pixel_values",
            "image_embeds",
            "preprocessor_config.json",
            read.preprocess,
        ),
    )


def _serve_tiny(hub: FakeHub, tmp_path: Path, preprocessor: dict[str, object]) -> str:
    src = tiny_clip(tmp_path / "src", layout="xenova")
    files = {
        f"onnx/{p.name}": (src.dir / "onnx" / p.name).read_bytes()
        for p in (src.dir / "onnx").iterdir()
    }
    files["tokenizer.json"] = (src.dir / "tokenizer.json").read_bytes()
    hub.add(
        "acme/tiny-clip",
        COMMIT,
        {
            **files,
            "preprocessor_config.json": HubFile(json.dumps(preprocessor).encode(), lfs=False),
        },
    )
    return hub.start()


def test_pull_installs_a_two_tower_model_that_embeds_images(hub: FakeHub, tmp_path: Path) -> None:
    base = _serve_tiny(hub, tmp_path, PREPROCESSOR)
    path = pull_model(
        "tiny-clip", tmp_path / "m", base, progress=False, catalog={"tiny-clip": _tiny_entry()}
    )
    manifest = ModelManifest.read(path)
    assert manifest.modalities == ["text", "image"] and manifest.source["kind"] == "catalog"
    entry_vision = _tiny_entry().vision
    assert manifest.vision is not None and entry_vision is not None
    assert manifest.vision.preprocess == entry_vision.preprocess
    pulled = TwoTowerEmbedder(path, threads=1)
    imported = TwoTowerEmbedder(
        import_model(tmp_path / "src", "local", tmp_path / "imported"), threads=1
    )
    images = [png((255, 0, 0)), png((0, 0, 255), (20, 60))]
    np.testing.assert_allclose(
        pulled.embed_images(images), imported.embed_images(images), atol=1e-6
    )
    np.testing.assert_allclose(pulled.embed(["crimson"]), imported.embed(["crimson"]), atol=1e-6)


def test_a_preprocessor_file_that_says_otherwise_installs_nothing(
    hub: FakeHub, tmp_path: Path
) -> None:
    other = {**PREPROCESSOR, "crop_size": {"height": 30, "width": 30}}
    base = _serve_tiny(hub, tmp_path, other)
    with pytest.raises(ModelFetchError) as caught:
        pull_model(
            "tiny-clip", tmp_path / "m", base, progress=False, catalog={"tiny-clip": _tiny_entry()}
        )
    assert caught.value.message.startswith(
        "preprocessor_config.json of tiny-clip, as fetched, asks for other preprocessing than "
        "lambo's catalog records for tiny-clip, so nothing was installed"
    )
    assert not (tmp_path / "m" / "tiny-clip").exists()


def test_the_clip_catalog_entry_pulls_and_loads(
    hub: FakeHub, tmp_path: Path, lambo_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real entry (repository, revision, paths, names, preprocessing, pad) against
    stand-ins with CLIP's shapes: 512-d text_embeds from input_ids alone, 224x224 pixels."""
    files = clip_stand_in(tmp_path / "stand-in")
    (first, *_) = CLIP_VIT_B32.files
    hub.add(first.repo, first.revision, {f.path: files[f.path] for f in CLIP_VIT_B32.files})
    monkeypatch.setenv("LAMBO_HUB_URL", hub.start())
    code, out, err = _invoke("pull", "clip-vit-b32")
    assert code == 0, err
    Path("lambo.toml").write_text('[embedder]\nmodel = "clip-vit-b32"\nthreads = 1\n')
    embedder = LoadedModels().load(load_config())
    assert isinstance(embedder, TwoTowerEmbedder)
    assert embedder.contract == {"kind": "onnx", "model": "clip-vit-b32", "dim": 512}
    assert embedder.modalities == ["text", "image"] and embedder.merge_threshold == 0.92
    assert embedder.text.feeds == ["input_ids"] and embedder.text.output_name == "text_embeds"
    assert embedder.text.max_length == 77
    assert embedder.text.tokenize(["w5 w6", "w7"])["input_ids"].tolist() == [
        [49406, 5, 6, 49407],
        [49406, 7, 49407, 49407],  # padded with <|endoftext|>
    ]
    assert embedder.pixels(png((9, 9, 9), (300, 260))).shape == (3, 224, 224)
    vectors = embedder.embed_images([png((255, 0, 0), (640, 480))])
    assert vectors.shape == (1, 512)
    np.testing.assert_allclose(np.linalg.norm(vectors), 1.0, atol=1e-5)
    code, out, _ = _invoke("list")
    assert '{"kind": "onnx", "model": "clip-vit-b32", "dim": 512}  embeds text, image' in out


def test_the_clip_entry_is_exact() -> None:
    assert {f.repo for f in CLIP_VIT_B32.files} == {"Xenova/clip-vit-base-patch32"}
    assert {f.revision for f in CLIP_VIT_B32.files} == {"4c1807b705b1d015fb032789cc4d221b23025a6f"}
    assert [(f.path, f.local) for f in CLIP_VIT_B32.files] == [
        ("onnx/text_model_quantized.onnx", "text_model.onnx"),
        ("onnx/vision_model_quantized.onnx", "vision_model.onnx"),
        ("tokenizer.json", "tokenizer.json"),
        ("preprocessor_config.json", "preprocessor_config.json"),
    ]
    vision = CLIP_VIT_B32.vision
    assert vision is not None
    assert (vision.input, vision.output) == ("pixel_values", "image_embeds")
    # what Xenova/clip-vit-base-patch32's preprocessor_config.json says, field for field
    hub_file = {
        "crop_size": {"height": 224, "width": 224},
        "do_center_crop": True,
        "do_convert_rgb": True,
        "do_normalize": True,
        "do_rescale": True,
        "do_resize": True,
        "feature_extractor_type": "CLIPFeatureExtractor",
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_processor_type": "CLIPFeatureExtractor",
        "image_std": [0.26862954, 0.26130258, 0.27577711],
        "resample": 3,
        "rescale_factor": 0.00392156862745098,
        "size": {"shortest_edge": 224},
    }
    assert read_preprocessor(hub_file, "hub").preprocess == vision.preprocess
    assert catalog_module.CATALOG["clip-vit-b32"] is CLIP_VIT_B32
