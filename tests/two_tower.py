"""A tiny two-tower (CLIP-style) ONNX model the tests build themselves, and images for it.

Both graphs are written as ONNX protobuf by hand (``embed_fixtures``), run by real
onnxruntime, and are simple enough to compute with numpy:

- text tower (``text_model.onnx``): inputs ``input_ids``, ``attention_mask``; outputs
  ``text_embeds`` = the masked mean of ``T[input_ids]`` ``[b, d]`` (already pooled, like
  a CLIP text export) and ``last_hidden_state`` = ``T[input_ids]`` ``[b, s, d]``;
- vision tower (``vision_model.onnx``): input ``pixel_values [b, 3, 32, 32]``; output
  ``image_embeds`` = the per-channel mean of the pixels times ``W [3, d]``.

``W``'s rows are orthonormal, so the colour of an image survives the projection. The
rows of ``T`` for colour words ("red", "crimson", "scarlet"...) are the direction a pure
image of that colour lands on after the preprocessing, plus a little noise; every other
word's row is small and random. So "crimson" finds a red picture whose caption never
says it, and two reds find each other.
"""

from __future__ import annotations

import io
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from tests.embed_fixtures import (
    FLOAT,
    INT64,
    attr_int,
    model_bytes,
    node,
    tensor,
    value_info,
)

DIM = 8
SIDE = 32  # the crop: pixel_values are [b, 3, SIDE, SIDE]
MAX_LENGTH = 77
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
# Hugging Face's CLIPImageProcessor fields, at the tiny model's size.
PREPROCESSOR: dict[str, object] = {
    "crop_size": {"height": SIDE, "width": SIDE},
    "do_center_crop": True,
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "feature_extractor_type": "CLIPFeatureExtractor",
    "image_mean": list(CLIP_MEAN),
    "image_processor_type": "CLIPImageProcessor",
    "image_std": list(CLIP_STD),
    "resample": 3,
    "rescale_factor": 0.00392156862745098,
    "size": {"shortest_edge": SIDE},
}
SPECIALS = ["<|startoftext|>", "<|endoftext|>", "<pad>", "<unk>"]
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (255, 0, 0),
    "crimson": (220, 20, 60),
    "scarlet": (255, 36, 0),
    "green": (0, 255, 0),
    "emerald": (80, 200, 120),
    "blue": (0, 0, 255),
    "navy": (0, 0, 128),
    "azure": (0, 127, 255),
}
FILLER = [
    "a", "the", "photo", "picture", "of", "from", "square", "deploy", "dashboard",
    "screenshot", "logo", "chart", "error", "page", "button", "banner",
]  # fmt: skip


def _channel_means(rgb: tuple[int, int, int]) -> npt.NDArray[np.float64]:
    """Where a uniform image of colour ``rgb`` lands after rescale and normalize."""
    pixel = np.asarray(rgb, dtype=np.float64) / 255.0
    out: npt.NDArray[np.float64] = (pixel - np.asarray(CLIP_MEAN)) / np.asarray(CLIP_STD)
    return out


@dataclass
class TinyClip:
    """The model's files and weights, for numpy to compute what onnxruntime should."""

    dir: Path
    table: npt.NDArray[np.float32]  # T [vocab, DIM]
    projection: npt.NDArray[np.float32]  # W [3, DIM]
    vocab: list[str] = field(default_factory=list)

    def ids(self, text: str) -> list[int]:
        index = {w: i for i, w in enumerate(self.vocab)}
        return [0, *(index.get(w, 3) for w in text.lower().split()), 1]

    def text_vector(self, text: str) -> npt.NDArray[np.float32]:
        """The text tower in numpy: the mean of the rows, unit length."""
        pooled = self.table[self.ids(text)].mean(axis=0)
        return unit(pooled)

    def image_vector(self, pixel_values: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """The vision tower in numpy on one ``[3, H, W]`` array, unit length."""
        means = pixel_values.reshape(3, -1).mean(axis=1)
        return unit(means.astype(np.float32) @ self.projection)

    def colour_direction(self, rgb: tuple[int, int, int]) -> npt.NDArray[np.float32]:
        return unit(_channel_means(rgb).astype(np.float32) @ self.projection)


def unit(v: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    out: npt.NDArray[np.float32] = (v / np.linalg.norm(v)).astype(np.float32)
    return out


def _tokenizer(path: Path, vocab: list[str]) -> None:
    """A WordLevel tokenizer.json, lowercasing, "<|startoftext|> $A <|endoftext|>",
    truncating at 77 (CLIP's text length), saved with no padding."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="<|startoftext|> $A <|endoftext|>",
        special_tokens=[("<|startoftext|>", 0), ("<|endoftext|>", 1)],
    )
    tok.enable_truncation(max_length=MAX_LENGTH)
    tok.save(str(path))


def _text_graph(table: npt.NDArray[np.float32]) -> bytes:
    inits = [tensor("T", table), tensor("axis1", np.array([1], dtype=np.int64))]
    inits.append(tensor("axis2", np.array([2], dtype=np.int64)))
    nodes = [
        node("Gather", ["T", "input_ids"], ["last_hidden_state"]),
        node("Cast", ["attention_mask"], ["Mf"], attr_int("to", FLOAT)),
        node("Unsqueeze", ["Mf", "axis2"], ["M3"]),
        node("Mul", ["last_hidden_state", "M3"], ["HM"]),
        node("ReduceSum", ["HM", "axis1"], ["S"], attr_int("keepdims", 0)),
        node("ReduceSum", ["M3", "axis1"], ["N"], attr_int("keepdims", 0)),
        node("Div", ["S", "N"], ["text_embeds"]),
    ]
    inputs = [
        value_info("input_ids", INT64, ["batch", "sequence"]),
        value_info("attention_mask", INT64, ["batch", "sequence"]),
    ]
    outputs = [
        value_info("text_embeds", FLOAT, ["batch", DIM]),
        value_info("last_hidden_state", FLOAT, ["batch", "sequence", DIM]),
    ]
    return model_bytes(nodes, inputs, outputs, inits)


def vision_graph(projection: npt.NDArray[np.float32]) -> bytes:
    inits = [
        tensor("W", projection),
        tensor("hw", np.array([2, 3], dtype=np.int64)),
        tensor("inv", np.array(1.0 / (SIDE * SIDE), dtype=np.float32)),
    ]
    nodes = [
        node("ReduceSum", ["pixel_values", "hw"], ["C"], attr_int("keepdims", 0)),
        node("Mul", ["C", "inv"], ["Cm"]),
        node("MatMul", ["Cm", "W"], ["image_embeds"]),
    ]
    inputs = [value_info("pixel_values", FLOAT, ["batch", 3, SIDE, SIDE])]
    outputs = [value_info("image_embeds", FLOAT, ["batch", int(projection.shape[1])])]
    return model_bytes(nodes, inputs, outputs, inits)


def tiny_clip(where: Path, *, seed: int = 11, layout: str = "flat") -> TinyClip:
    """Write the model directory (a source to import, not yet installed).

    layout "flat": text_model.onnx, vision_model.onnx, tokenizer.json and
    preprocessor_config.json side by side; "xenova": the graphs in onnx/ as
    transformers.js lays them out (``onnx/text_model_quantized.onnx``...), the rest above.
    """
    where.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((DIM, 3)))
    projection = q.T.astype(np.float32)  # orthonormal rows
    vocab = SPECIALS + list(COLOURS) + FILLER
    table = (0.05 * rng.standard_normal((len(vocab), DIM))).astype(np.float32)
    for word, rgb in COLOURS.items():
        direction = _channel_means(rgb).astype(np.float32) @ projection
        table[vocab.index(word)] = direction + 0.05 * rng.standard_normal(DIM)
    graphs = where / "onnx" if layout == "xenova" else where
    graphs.mkdir(exist_ok=True)
    suffix = "_quantized" if layout == "xenova" else ""
    (graphs / f"text_model{suffix}.onnx").write_bytes(_text_graph(table))
    (graphs / f"vision_model{suffix}.onnx").write_bytes(vision_graph(projection))
    _tokenizer(where / "tokenizer.json", vocab)
    (where / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2))
    return TinyClip(where, table, projection, vocab)


def install_tiny_clip(
    where: Path, name: str = "tiny-clip", models_dir: Path | None = None
) -> TinyClip:
    """Write the model's files under ``where`` and import them into ``models_dir``, by
    default the models directory of the configuration in effect (``LAMBO_HOME``'s), so a
    config can say ``[embedder] model = "tiny-clip"``."""
    from lambo_core.config import load_config
    from lambo_core.embed.importer import import_model

    src = tiny_clip(where / f"{name}-src")
    model_dir = import_model(src.dir, name, models_dir or load_config().paths.models_dir)
    return TinyClip(model_dir, src.table, src.projection, src.vocab)


def clip_home(lambo_home: Path, where: Path) -> TinyClip:
    """A LAMBO_HOME (for a ``lambo serve`` subprocess) whose configured model is the tiny
    two-tower model: ``[embedder] model = "tiny-clip"``, like e2e's ``served_home``."""
    tiny = install_tiny_clip(where, models_dir=lambo_home / "cache" / "models")
    config = lambo_home / "config" / "lambo.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('[embedder]\nmodel = "tiny-clip"\nthreads = 1\n')
    return tiny


def png(
    rgb: tuple[int, int, int],
    size: tuple[int, int] = (48, 40),
    *,
    patch: tuple[int, int, int] | None = (255, 255, 255),
    fmt: str = "PNG",
) -> bytes:
    """A generated image of colour ``rgb`` (``size`` = width, height), with a small patch
    of another colour in a corner so it is not uniform."""
    from PIL import Image

    image = Image.new("RGB", size, rgb)
    if patch is not None:
        image.paste(Image.new("RGB", (size[0] // 6, size[1] // 6), patch), (1, 1))
    out = io.BytesIO()
    image.save(out, format=fmt)
    return out.getvalue()


def copy_model(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest


def clip_stand_in(where: Path) -> dict[str, bytes]:
    """Stand-ins for the catalog's CLIP files, with its shapes and names: a text graph
    taking input_ids alone (as the CLIP text exports do) to text_embeds [b, 512], a vision
    graph taking pixel_values [b, 3, 224, 224] to image_embeds [b, 512], a tokenizer whose
    <|endoftext|> is id 49407, and CLIP's own preprocessor_config.json. Keyed by hub path."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    where.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(5)
    vocab = [f"w{i}" for i in range(49406)] + ["<|startoftext|>", "<|endoftext|>"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="<|startoftext|> $A <|endoftext|>",
        special_tokens=[("<|startoftext|>", 49406), ("<|endoftext|>", 49407)],
    )
    tok.save(str(where / "tokenizer.json"))
    text = model_bytes(
        [
            node("Cast", ["input_ids"], ["F"], attr_int("to", FLOAT)),
            node("ReduceSum", ["F", "axis1"], ["S"], attr_int("keepdims", 1)),
            node("MatMul", ["S", "Wt"], ["text_embeds"]),
        ],
        [value_info("input_ids", INT64, ["batch", "sequence"])],
        [value_info("text_embeds", FLOAT, ["batch", 512])],
        [
            tensor("axis1", np.array([1], dtype=np.int64)),
            tensor("Wt", rng.standard_normal((1, 512)).astype(np.float32)),
        ],
    )
    vision = model_bytes(
        [
            node("ReduceSum", ["pixel_values", "hw"], ["C"], attr_int("keepdims", 0)),
            node("MatMul", ["C", "Wv"], ["image_embeds"]),
        ],
        [value_info("pixel_values", FLOAT, ["batch", 3, 224, 224])],
        [value_info("image_embeds", FLOAT, ["batch", 512])],
        [
            tensor("hw", np.array([2, 3], dtype=np.int64)),
            tensor("Wv", rng.standard_normal((3, 512)).astype(np.float32)),
        ],
    )
    clip = {**PREPROCESSOR, "crop_size": {"height": 224, "width": 224}}
    clip["size"] = {"shortest_edge": 224}
    return {
        "onnx/text_model_quantized.onnx": text,
        "onnx/vision_model_quantized.onnx": vision,
        "tokenizer.json": (where / "tokenizer.json").read_bytes(),
        "preprocessor_config.json": json.dumps(clip, indent=2).encode(),
    }
