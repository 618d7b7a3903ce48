"""`lambo model verify`: an installed model's files against its manifest, then a probe run
(a probe text, and for a two-tower model a probe image too)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError
from .base import EmbeddingContract, embeds_images
from .install_dir import file_hashes
from .installed import resolve_model
from .loader import open_embedder
from .manifest import ModelManifest
from .preprocess import probe_image
from .two_tower import TwoTowerEmbedder


@dataclass(frozen=True)
class VerifyReport:
    name: str
    contract: EmbeddingContract
    quantization: str
    files_checked: int
    load_seconds: float
    first_embed_ms: float
    embed_ms: float  # median of five runs after the first
    feeds: list[str]
    output: str
    max_length: int
    threads: int
    merge_threshold: float
    notes: list[str] = field(default_factory=list)
    modalities: list[str] = field(default_factory=lambda: ["text"])


PROBE_TEXT = "lambo verify: a short sentence to embed."


def verify_model(
    model: str, models_dir: Path, *, threads: int = 0, check_files: bool = True
) -> VerifyReport:
    """Check an installed model's files against its manifest, load it, embed a probe text."""
    import numpy as np

    path = resolve_model(model, models_dir)
    manifest = ModelManifest.read(path, model)
    checked = 0
    if check_files:
        for fname, rec in manifest.files.items():
            fpath = path / fname
            if not fpath.is_file():
                raise ConfigError(f"model {model} is missing its file {fname}")
            sha256, _ = file_hashes(fpath, fpath.stat().st_size)
            if sha256 != rec.sha256 or fpath.stat().st_size != rec.size:
                raise ConfigError(
                    f"model {model}: {fname} does not match the sha256 in its manifest; pull or "
                    "import it again"
                )
            checked += 1
    started = time.perf_counter()
    embedder = open_embedder(path, threads=threads, batch_size=1)
    loaded = time.perf_counter() - started
    text = embedder.text if isinstance(embedder, TwoTowerEmbedder) else embedder
    started = time.perf_counter()
    vector = embedder.embed([PROBE_TEXT])
    first = (time.perf_counter() - started) * 1000
    runs: list[float] = []
    for _ in range(5):
        started = time.perf_counter()
        again = embedder.embed([PROBE_TEXT])
        runs.append((time.perf_counter() - started) * 1000)
    notes: list[str] = []
    norm = float(np.linalg.norm(vector[0]))
    if abs(norm - 1.0) > 1e-3:
        raise ConfigError(f"model {model} made a vector of length {norm:.4f}, not 1")
    if float(np.dot(vector[0], again[0])) < 0.9999:
        notes.append("the same text embedded twice gave different vectors")
    if embeds_images(embedder):
        started = time.perf_counter()
        image = embedder.embed_images([probe_image()])
        image_ms = (time.perf_counter() - started) * 1000
        if abs(float(np.linalg.norm(image[0])) - 1.0) > 1e-3:
            raise ConfigError(f"model {model} made an image vector whose length is not 1")
        notes.append(f"embeds images too: a probe image in {image_ms:.1f} ms")
    if manifest.quantization == "int8-weight-only":
        notes.append("weight-only int8 (float matmuls): may be slower than a dynamic-int8 export")
    return VerifyReport(
        name=manifest.name,
        contract=embedder.contract,
        quantization=manifest.quantization,
        files_checked=checked,
        load_seconds=loaded,
        first_embed_ms=first,
        embed_ms=sorted(runs)[len(runs) // 2],
        feeds=text.feeds,
        output=text.output_name,
        max_length=text.max_length,
        threads=text.threads,
        merge_threshold=embedder.merge_threshold,
        notes=notes,
        modalities=manifest.modalities,
    )
