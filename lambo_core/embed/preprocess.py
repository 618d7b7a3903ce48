"""A vision tower's image preprocessing: what ``preprocessor_config.json`` says, run exactly.

The fields are Hugging Face's ``CLIPImageProcessor``'s, applied in its order: convert to
RGB, resize so the shortest edge is ``size.shortest_edge`` (Pillow, on the 8-bit image,
with ``resample``; the long edge ``int(shortest * long / short)``), center crop to
``crop_size`` (padding with zeros when the image is smaller, as it does), rescale by
``rescale_factor``, normalize by ``image_mean`` / ``image_std``, channels first. A field
the file leaves out takes ``CLIPImageProcessor``'s default and says so; a field lambo
does not run is refused, naming it, rather than ignored (another processor's fields mean
other pixels, so other vectors than the model's own).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..errors import ConfigError, ParameterError
from ..limits import MAX_IMAGE_SIDE
from ..text import show_safely

if TYPE_CHECKING:
    from PIL import Image

PREPROCESSOR_FILE = "preprocessor_config.json"
# Pillow's resampling codes, which Hugging Face's configs use.
RESAMPLE = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}
# The embedder's own bound on what it decodes (image_input.check_image, which callers run
# first, holds images to the spec's 4096 pixels a side): no decompression bomb gets in.
MAX_DECODE_SIDE = MAX_IMAGE_SIDE  # the embedder guards itself as check_image does
#: The most pixels a whole resize may make; past it only what the crop keeps is resampled.
MAX_RESIZED_PIXELS = 4096 * 4096
FORMATS = ("PNG", "JPEG", "WEBP")

# CLIPImageProcessor's defaults (OpenAI's CLIP statistics), for fields a file leaves out.
_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
_DEFAULTS: dict[str, Any] = {
    "do_convert_rgb": True,
    "do_resize": True,
    "size": {"shortest_edge": 224},
    "resample": 3,
    "do_center_crop": True,
    "crop_size": {"height": 224, "width": 224},
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": list(_CLIP_MEAN),
    "image_std": list(_CLIP_STD),
}
# Fields that name the processor rather than change the pixels.
_NAMING = ("feature_extractor_type", "image_processor_type", "processor_class")
_PROCESSORS = ("CLIPImageProcessor", "CLIPFeatureExtractor", "CLIPProcessor")


@dataclass(frozen=True)
class ImagePreprocess:
    """The steps, resolved: None is a step the config turns off."""

    convert_rgb: bool
    shortest_edge: int | None
    resample: int
    crop: tuple[int, int] | None  # (height, width)
    rescale_factor: float | None
    mean: tuple[float, float, float] | None
    std: tuple[float, float, float] | None

    # --- lambo-model.json

    def to_json(self) -> dict[str, Any]:
        return {
            "convert_rgb": self.convert_rgb,
            "shortest_edge": self.shortest_edge,
            "resample": self.resample,
            "crop": None if self.crop is None else {"height": self.crop[0], "width": self.crop[1]},
            "rescale_factor": self.rescale_factor,
            "mean": None if self.mean is None else list(self.mean),
            "std": None if self.std is None else list(self.std),
        }

    @classmethod
    def from_json(cls, data: object, bad: Any) -> ImagePreprocess:
        """The manifest's ``vision.preprocess``; ``bad(field, rule)`` makes its refusal."""
        if not isinstance(data, dict):
            raise bad("vision.preprocess", "must be an object")
        convert = data.get("convert_rgb")
        if not isinstance(convert, bool):
            raise bad("vision.preprocess.convert_rgb", "must be true or false")
        edge = data.get("shortest_edge")
        if edge is not None and not _positive_int(edge):
            raise bad("vision.preprocess.shortest_edge", "must be null or a positive integer")
        resample = data.get("resample")
        if not isinstance(resample, int) or isinstance(resample, bool) or resample not in RESAMPLE:
            raise bad("vision.preprocess.resample", "must be a Pillow resampling code 0..5")
        crop = data.get("crop")
        if crop is not None and not (
            isinstance(crop, dict)
            and _positive_int(crop.get("height"))
            and _positive_int(crop.get("width"))
        ):
            raise bad("vision.preprocess.crop", "must be null or {height, width}")
        factor = data.get("rescale_factor")
        if factor is not None and not _positive_number(factor):
            raise bad("vision.preprocess.rescale_factor", "must be null or a positive number")
        mean, std = data.get("mean"), data.get("std")
        if (mean is None) != (std is None):
            raise bad("vision.preprocess.mean", "and std must both be null or both be set")
        if mean is not None and not (_triple(mean) and _triple(std, positive=True)):
            raise bad("vision.preprocess.mean", "and std must be 3 numbers each, std positive")
        return cls(
            convert_rgb=convert,
            shortest_edge=edge,
            resample=resample,
            crop=None if crop is None else (int(crop["height"]), int(crop["width"])),
            rescale_factor=None if factor is None else float(factor),
            mean=None if mean is None else _floats(mean),
            std=None if std is None else _floats(std),
        )

    # --- running it

    def pixels(self, image: Image.Image, field: str = "image") -> npt.NDArray[np.float32]:
        """One decoded image as the graph's ``[3, H, W]`` float32 input."""
        if self.convert_rgb and image.mode != "RGB":
            try:
                image = image.convert("RGB")
            except (ValueError, OSError):
                raise ParameterError(
                    f"{field} is in Pillow mode {image.mode}, which Pillow cannot convert to RGB"
                ) from None
        if image.mode != "RGB":
            raise ParameterError(
                f"{field} is in Pillow mode {image.mode}, and this model takes RGB images "
                "only (its preprocessor_config.json has do_convert_rgb false)"
            )
        if self.shortest_edge is not None:
            size = resize_size(image.width, image.height, self.shortest_edge)
            if size[0] * size[1] <= MAX_RESIZED_PIXELS:
                image = image.resize(size, resample=self.resample, reducing_gap=None)
            else:
                image = self._resize_kept(image, size, field)
        array = np.asarray(image)  # [H, W, 3] uint8
        if self.crop is not None:
            array = center_crop(array, *self.crop)
        out: npt.NDArray[np.float64] = array.astype(np.float64)
        if self.rescale_factor is not None:
            out = out * self.rescale_factor
        result = out.astype(np.float32)
        if self.mean is not None and self.std is not None:
            mean = np.asarray(self.mean, dtype=np.float32)
            std = np.asarray(self.std, dtype=np.float32)
            result = ((result - mean) / std).astype(np.float32)
        return np.ascontiguousarray(result.transpose(2, 0, 1))

    def _resize_kept(self, image: Image.Image, size: tuple[int, int], field: str) -> Image.Image:
        """The resize of an image so long and thin that its whole resize would not fit in
        memory (4096x1 under a 224 shortest edge is 917504x224): only the region the center
        crop keeps is resampled, Pillow's ``box``, so the pixels are those of the crop.
        Without a crop nothing bounds the tensor, so such an image is refused."""
        if self.crop is None:
            raise ParameterError(
                f"{field} is {image.width}x{image.height} pixels, which this model's resize "
                f"would make {size[0]}x{size[1]}; send an image nearer to square"
            )
        height, width = self.crop
        kept_w, kept_h = min(width, size[0]), min(height, size[1])
        left, top = (size[0] - kept_w) // 2, (size[1] - kept_h) // 2
        sx, sy = image.width / size[0], image.height / size[1]
        box = (left * sx, top * sy, (left + kept_w) * sx, (top + kept_h) * sy)
        return image.resize((kept_w, kept_h), resample=self.resample, box=box, reducing_gap=None)

    @property
    def fixed_size(self) -> tuple[int, int] | None:
        """(height, width) every image comes out at, when the steps fix one."""
        return self.crop


def resize_size(width: int, height: int, shortest_edge: int) -> tuple[int, int]:
    """(width, height) with the short side at ``shortest_edge``, the long one truncated."""
    short, long = (width, height) if width <= height else (height, width)
    new_long = int(shortest_edge * long / short)
    return (shortest_edge, new_long) if width <= height else (new_long, shortest_edge)


def center_crop(array: npt.NDArray[Any], height: int, width: int) -> npt.NDArray[Any]:
    """``[H, W, C]`` cut to ``height x width`` around its center, zero-padded when smaller."""
    orig_h, orig_w = array.shape[:2]
    top, left = (orig_h - height) // 2, (orig_w - width) // 2
    if top >= 0 and left >= 0:
        return array[top : top + height, left : left + width]
    new_h, new_w = max(height, orig_h), max(width, orig_w)
    padded = np.zeros((new_h, new_w, *array.shape[2:]), dtype=array.dtype)
    top_pad, left_pad = math.ceil((new_h - orig_h) / 2), math.ceil((new_w - orig_w) / 2)
    padded[top_pad : top_pad + orig_h, left_pad : left_pad + orig_w] = array
    top, left = top + top_pad, left + left_pad
    return padded[max(0, top) : min(new_h, top + height), max(0, left) : min(new_w, left + width)]


def decode_image(data: bytes, field: str) -> Image.Image:
    """PNG, JPEG or WebP bytes as a loaded Pillow image; a refusal never shows the bytes."""
    from PIL import Image, UnidentifiedImageError

    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"{field} is not bytes")
    try:
        image = Image.open(io.BytesIO(bytes(data)), formats=FORMATS)
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
        raise ParameterError(f"{field} is not a PNG, JPEG or WebP image") from None
    if image.width > MAX_DECODE_SIDE or image.height > MAX_DECODE_SIDE:
        raise ParameterError(f"{field} is over {MAX_DECODE_SIDE} pixels a side")
    try:
        image.load()
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise ParameterError(
            f"{field} could not be decoded (truncated or corrupt)", detail=type(exc).__name__
        ) from None
    return image


def probe_image() -> bytes:
    """A small PNG Pillow makes, for an import or `verify` to embed once."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 120, 40)).save(out, format="PNG")
    return out.getvalue()


# --- preprocessor_config.json


@dataclass(frozen=True)
class ReadConfig:
    """A preprocessor config read: the steps, and each setting with where it came from."""

    preprocess: ImagePreprocess
    lines: list[tuple[str, object, str]]  # (setting, value, source)


class _Reader:
    """One preprocessor config's fields, each read once and recorded with its source."""

    def __init__(self, config: dict[str, Any], where: str) -> None:
        self.config = config
        self.where = where
        self.lines: list[tuple[str, object, str]] = []

    def bad(self, fieldname: str, rule: str) -> ConfigError:
        return ConfigError(f"{self.where}: {fieldname} {rule}")

    def get(self, key: str) -> Any:
        if key in self.config:
            self.lines.append((key, self.config[key], self.where))
            return self.config[key]
        self.lines.append((key, _DEFAULTS[key], "CLIPImageProcessor's default"))
        return _DEFAULTS[key]

    def flag(self, key: str) -> bool:
        value = self.get(key)
        if not isinstance(value, bool):
            raise self.bad(key, "must be true or false")
        return value

    def resize(self) -> tuple[int | None, int]:
        if not self.flag("do_resize"):
            return None, 3
        size = self.get("size")
        edge = size if _positive_int(size) else None  # the legacy form: an int
        if isinstance(size, dict) and set(size) == {"shortest_edge"}:
            edge = size["shortest_edge"] if _positive_int(size["shortest_edge"]) else None
        if edge is None:
            raise self.bad(
                "size", "must be {shortest_edge: N} (lambo resizes by the shortest edge)"
            )
        resample = self.get("resample")
        if not isinstance(resample, int) or isinstance(resample, bool) or resample not in RESAMPLE:
            raise self.bad("resample", "must be a Pillow resampling code 0..5 (3 is bicubic)")
        return int(edge), resample

    def crop(self) -> tuple[int, int] | None:
        if not self.flag("do_center_crop"):
            return None
        size = self.get("crop_size")
        if _positive_int(size):
            return (size, size)
        if (
            isinstance(size, dict)
            and set(size) == {"height", "width"}
            and _positive_int(size["height"])
            and _positive_int(size["width"])
        ):
            return (size["height"], size["width"])
        raise self.bad("crop_size", "must be {height: N, width: N}")

    def rescale(self) -> float | None:
        if not self.flag("do_rescale"):
            return None
        factor = self.get("rescale_factor")
        if not _positive_number(factor):
            raise self.bad("rescale_factor", "must be a positive number")
        return float(factor)

    def normalize(self) -> tuple[tuple[float, float, float], tuple[float, float, float]] | None:
        if not self.flag("do_normalize"):
            return None
        mean, std = self.get("image_mean"), self.get("image_std")
        if not _triple(mean):
            raise self.bad("image_mean", "must be 3 numbers (R, G, B)")
        if not _triple(std, positive=True):
            raise self.bad("image_std", "must be 3 positive numbers (R, G, B)")
        return _floats(mean), _floats(std)


def read_preprocessor(config: object, where: str) -> ReadConfig:
    """``preprocessor_config.json``'s fields as steps; an unknown or bad field is refused."""
    if not isinstance(config, dict):
        raise ConfigError(f"{where} must hold a JSON object")
    reader = _Reader(config, where)
    for key in config:
        if key not in _DEFAULTS and key not in _NAMING:
            raise reader.bad(
                show_safely(str(key), 64),
                "is a preprocessing field lambo does not run (it runs CLIPImageProcessor's: "
                + ", ".join(_DEFAULTS)
                + "), so the model's own pixels cannot be reproduced",
            )
    for key in _NAMING:
        named = config.get(key)
        if named is not None and named not in _PROCESSORS:
            raise reader.bad(key, f"must name a CLIP image processor ({', '.join(_PROCESSORS)})")
    convert = reader.flag("do_convert_rgb")
    edge, resample = reader.resize()
    crop = reader.crop()
    factor = reader.rescale()
    stats = reader.normalize()
    steps = ImagePreprocess(
        convert_rgb=convert,
        shortest_edge=edge,
        resample=resample,
        crop=crop,
        rescale_factor=factor,
        mean=None if stats is None else stats[0],
        std=None if stats is None else stats[1],
    )
    return ReadConfig(steps, reader.lines)


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _positive_number(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _triple(value: object, *, positive: bool = False) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 3
        and all(
            isinstance(v, int | float)
            and not isinstance(v, bool)
            and math.isfinite(v)
            and (v > 0 or not positive)
            for v in value
        )
    )


def _floats(value: Any) -> tuple[float, float, float]:
    return (float(value[0]), float(value[1]), float(value[2]))
