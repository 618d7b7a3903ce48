"""``TwoTowerEmbedder``: a CLIP-style model, a text tower and a vision tower in one space.

The text tower is an ``OnnxEmbedder`` on the manifest's top-level fields (a CLIP text
export's ``text_embeds [b, d]`` is already pooled, which it takes as it is), so text is
tokenized, batched, cached and pooled exactly as for a text model. The vision tower is
an onnxruntime session on ``vision.model_file``: each image is decoded by Pillow and
preprocessed as ``preprocessor_config.json`` said (``preprocess.py``), the images are
run in batches of at most ``batch_size``, and the pooled output is L2-normalized. One
image is decoded at a time into its small pixel array, so a batch of big images never
holds more than one decoded image.

Note: a dynamic-int8 graph quantizes activations per run, so an image's vector can move
in the last digits with what it was batched beside (as a text's does in an int8 text
model); the test model is float, so its vectors do not.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import ConfigError, InternalError
from ..model import Vector
from .base import QUERY_CACHE_SIZE, EmbeddingContract, normalize_rows
from .manifest import ModelManifest, VisionTower
from .onnx import MAX_BATCH_TOKENS, OnnxEmbedder, open_session
from .preprocess import decode_image


class TwoTowerEmbedder:
    """Text and images into one space (see the module docstring)."""

    def __init__(
        self,
        model_dir: Path,
        *,
        threads: int = 0,
        batch_size: int = 32,
        max_length: int = 0,
        max_batch_tokens: int = MAX_BATCH_TOKENS,
        merge_threshold: float | None = None,
        expected_dim: int = 0,
        query_cache_size: int = QUERY_CACHE_SIZE,
    ) -> None:
        self.text = OnnxEmbedder(
            model_dir,
            threads=threads,
            batch_size=batch_size,
            max_length=max_length,
            max_batch_tokens=max_batch_tokens,
            merge_threshold=merge_threshold,
            expected_dim=expected_dim,
            query_cache_size=query_cache_size,
        )
        manifest = self.text.manifest
        if manifest.vision is None:
            raise ConfigError(f"model {manifest.name} has no vision tower in its manifest")
        self.vision: VisionTower = manifest.vision
        self.batch_size = batch_size
        self._session, _ = open_session(
            self.text.model_dir / self.vision.model_file, manifest.name, threads
        )
        _check_vision_graph(self._session, manifest, self.vision)
        self._lock = threading.Lock()
        # The batch size of every vision run in the last embed_images() call.
        self.last_image_batches: list[int] = []

    # --- the protocol

    @property
    def manifest(self) -> ModelManifest:
        return self.text.manifest

    @property
    def contract(self) -> EmbeddingContract:
        return self.text.contract

    @property
    def modalities(self) -> list[str]:
        return self.manifest.modalities

    @property
    def dim(self) -> int:
        return self.text.dim

    @property
    def merge_threshold(self) -> float:
        return self.text.merge_threshold

    @property
    def name(self) -> str:
        return self.text.name

    def embed(self, texts: Sequence[str]) -> Vector:
        return self.text.embed(texts)

    def embed_query(self, text: str) -> Vector:
        return self.text.embed_query(text)

    def embed_images(self, images: Sequence[bytes]) -> Vector:
        """One unit float32 row per image (PNG, JPEG or WebP bytes), in input order."""
        if isinstance(images, bytes | bytearray):
            raise TypeError("embed_images takes a sequence of images, not one image")
        items = list(images)
        out = np.empty((len(items), self.dim), dtype=np.float32)
        batches: list[int] = []
        for start in range(0, len(items), self.batch_size):
            rows = range(start, min(start + self.batch_size, len(items)))
            arrays = [self.pixels(items[i], f"images[{i}]") for i in rows]
            for first, group in _same_shape_runs(arrays):
                pooled = self._run(np.stack(group))
                out[start + first : start + first + len(group)] = self._finish(
                    pooled, start + first
                )
                batches.append(len(group))
        self.last_image_batches = batches
        return out

    # --- what the tests look at

    def pixels(self, data: bytes, field: str = "image") -> npt.NDArray[np.float32]:
        """The ``[3, H, W]`` array one image is fed as."""
        return self.vision.preprocess.pixels(decode_image(data, field), field)

    def raw_image_output(self, pixel_values: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """The vision graph's output for ``[b, 3, H, W]`` pixels, before normalizing."""
        return self._run(pixel_values)

    # --- internals

    def _run(self, pixel_values: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        # One run at a time, as for text: onnxruntime already uses every thread it has.
        with self._lock:
            try:
                (result,) = self._session.run(
                    [self.vision.output], {self.vision.input: pixel_values}
                )
            except Exception as exc:
                raise InternalError(
                    f"the embedder failed on a batch of {pixel_values.shape[0]} images",
                    detail=repr(exc),
                ) from None
        return np.asarray(result, dtype=np.float32)

    def _finish(self, pooled: npt.NDArray[np.float32], first: int) -> Vector:
        if pooled.ndim != 2 or pooled.shape[1] != self.dim:
            raise ConfigError(
                f"model {self.name}: vision output {self.vision.output} has shape "
                f"{list(pooled.shape)}; lambo takes [batch, {self.dim}]"
            )
        norms = np.linalg.norm(pooled, axis=1)
        for k, norm in enumerate(norms):
            if not np.isfinite(norm) or norm == 0.0:
                raise InternalError(
                    f"the embedder made no usable vector for images[{first + k}] "
                    "(zero or not finite)"
                )
        return normalize_rows(pooled)


def _same_shape_runs(
    arrays: list[npt.NDArray[np.float32]],
) -> list[tuple[int, list[npt.NDArray[np.float32]]]]:
    """Consecutive arrays of one shape, each with its offset: a batch must be one shape
    (a config without a center crop gives each image its own)."""
    runs: list[tuple[int, list[npt.NDArray[np.float32]]]] = []
    for i, array in enumerate(arrays):
        if runs and runs[-1][1][0].shape == array.shape:
            runs[-1][1].append(array)
        else:
            runs.append((i, [array]))
    return runs


def _check_vision_graph(session: Any, manifest: ModelManifest, vision: VisionTower) -> None:
    """The graph takes one float pixel input of the manifest's name and has its output."""
    inputs = {str(i.name): i for i in session.get_inputs()}
    outputs = [str(o.name) for o in session.get_outputs()]
    if vision.input not in inputs or len(inputs) != 1:
        raise ConfigError(
            f"model {manifest.name}: the vision graph's inputs are {', '.join(inputs)}; lambo "
            f"feeds it one input, {vision.input} [batch, 3, height, width]"
        )
    meta = inputs[vision.input]
    shape = list(meta.shape)
    if meta.type != "tensor(float)" or len(shape) != 4 or shape[1] not in (3, "3"):
        raise ConfigError(
            f"model {manifest.name}: vision input {vision.input} must be float "
            "[batch, 3, height, width]"
        )
    fixed = vision.preprocess.fixed_size
    static = isinstance(shape[2], int) and isinstance(shape[3], int)
    if static and fixed != (shape[2], shape[3]):
        gives = "images of any size" if fixed is None else f"{fixed[0]}x{fixed[1]}"
        raise ConfigError(
            f"model {manifest.name}: the vision graph takes {shape[2]}x{shape[3]} pixels "
            f"but its preprocessing gives {gives}"
        )
    if vision.output not in outputs:
        raise ConfigError(
            f"model {manifest.name} has no vision output {vision.output}; it has "
            + ", ".join(outputs)
        )
