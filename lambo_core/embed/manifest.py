"""``lambo-model.json``: how to run the model in one installed model directory.

Written by `lambo model pull` and `lambo model import`, read by the embedder and
by `lambo model list`; every field is checked on reading, and a refusal names the
field and its rule, never the file's text. Its contract is the embedding space the
spec's lambo_stats reports as ``embedding_contract``, its ``modalities`` what it
embeds (lambo_stats' ``embedding_modalities``).

The top-level model fields are the text tower. A two-tower (CLIP-style) model adds
``vision`` ({model_file, input, output, preprocess}: the vision graph, its pixel input,
its pooled ``[b, dim]`` output, the image preprocessing of ``preprocess.py``) and
``modalities: ["text", "image"]``; a manifest with neither is a text model (every
manifest written before images were embedded reads as ``["text"]``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .base import EmbeddingContract, make_contract
from .catalog import DEFAULT_MODEL
from .preprocess import ImagePreprocess

MANIFEST_NAME = "lambo-model.json"
MANIFEST_FORMAT = 1
KIND = "onnx"
TEXT_ONLY = ("text",)
TEXT_AND_IMAGE = ("text", "image")


@dataclass(frozen=True)
class FileRecord:
    size: int
    sha256: str


def plain_name(name: object) -> bool:
    """A relative path that stays inside the model directory."""
    if not isinstance(name, str) or not name or name.startswith(("/", "\\")):
        return False
    parts = name.replace("\\", "/").split("/")
    return all(p not in ("", ".", "..") for p in parts)


class _Fields:
    """The manifest's JSON object, read one checked field at a time."""

    def __init__(self, data: dict[str, Any], where: str) -> None:
        self.data = data
        self.where = where

    def bad(self, fieldname: str, rule: str) -> ConfigError:
        return ConfigError(f"{MANIFEST_NAME} of model {self.where}: {fieldname} {rule}")

    def text(self, key: str) -> str:
        value = self.data.get(key)
        if not isinstance(value, str) or not value:
            raise self.bad(key, "must be a non-empty string")
        return value

    def integer(self, key: str, low: int) -> int:
        value = self.data.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise self.bad(key, f"must be an integer of at least {low}")
        return value

    def flag(self, key: str) -> bool:
        value = self.data.get(key)
        if not isinstance(value, bool):
            raise self.bad(key, "must be true or false")
        return value

    def inside(self, key: str, value: str) -> None:
        if not plain_name(value):
            raise self.bad(key, "must name a file inside the model directory")

    def pooling(self) -> str:
        pooling = self.text("pooling")
        if pooling not in ("cls", "mean"):
            raise self.bad("pooling", "must be cls or mean")
        return pooling

    def output(self) -> str | int:
        output = self.data.get("output")
        if isinstance(output, bool) or not isinstance(output, str | int) or output == "":
            raise self.bad("output", "must be an output name or index")
        if isinstance(output, int) and output < 0:
            raise self.bad("output", "must be an output name or index")
        return output

    def merge_threshold(self) -> float | None:
        threshold = self.data.get("merge_threshold")
        if threshold is None:
            return None
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, int | float)
            or not 0.0 < threshold <= 1.0
        ):
            raise self.bad("merge_threshold", "must be null or a number in (0, 1]")
        return float(threshold)

    def files(self) -> dict[str, FileRecord]:
        raw_files = self.data.get("files", {})
        if not isinstance(raw_files, dict):
            raise self.bad("files", "must be an object")
        files: dict[str, FileRecord] = {}
        for fname, rec in raw_files.items():
            if not plain_name(fname):
                raise self.bad("files", "must name files inside the model directory")
            if (
                not isinstance(rec, dict)
                or not isinstance(rec.get("size"), int)
                or not isinstance(rec.get("sha256"), str)
            ):
                raise self.bad(f"files.{fname}", "must be {size, sha256}")
            files[fname] = FileRecord(int(rec["size"]), str(rec["sha256"]))
        return files

    def vision(self) -> VisionTower | None:
        """The vision tower, and ``modalities`` agreeing with it (absent: a text model)."""
        raw_modalities = self.data.get("modalities", list(TEXT_ONLY))
        if raw_modalities not in (list(TEXT_ONLY), list(TEXT_AND_IMAGE)):
            raise self.bad("modalities", 'must be ["text"] or ["text", "image"]')
        raw = self.data.get("vision")
        if raw is None:
            if raw_modalities != list(TEXT_ONLY):
                raise self.bad("modalities", 'is ["text", "image"] but there is no vision tower')
            return None
        if not isinstance(raw, dict):
            raise self.bad("vision", "must be an object {model_file, input, output, preprocess}")
        if raw_modalities != list(TEXT_AND_IMAGE):
            raise self.bad("modalities", 'must be ["text", "image"] beside a vision tower')
        model_file = raw.get("model_file")
        if not isinstance(model_file, str) or not plain_name(model_file):
            raise self.bad("vision.model_file", "must name a file inside the model directory")
        names: dict[str, str] = {}
        for key in ("input", "output"):
            value = raw.get(key)
            if not isinstance(value, str) or not value:
                raise self.bad(f"vision.{key}", "must be a graph input/output name")
            names[key] = value
        preprocess = ImagePreprocess.from_json(raw.get("preprocess"), self.bad)
        return VisionTower(model_file, names["input"], names["output"], preprocess)

    def source(self) -> dict[str, Any]:
        source = self.data.get("source", {})
        if not isinstance(source, dict):
            raise self.bad("source", "must be an object")
        return source


@dataclass(frozen=True)
class VisionTower:
    """A two-tower model's image side: its graph, pixel input, pooled output, preprocessing."""

    model_file: str
    input: str
    output: str
    preprocess: ImagePreprocess

    def to_json(self) -> dict[str, Any]:
        return {
            "model_file": self.model_file,
            "input": self.input,
            "output": self.output,
            "preprocess": self.preprocess.to_json(),
        }


@dataclass(frozen=True)
class ModelManifest:
    """``lambo-model.json``: how to run the model in this directory."""

    name: str
    model_file: str
    tokenizer_file: str
    pooling: str  # "cls" | "mean"; used when the output is per-token
    output: str | int  # an output name, or its index among the graph's outputs
    dim: int
    max_length: int
    token_type_ids: bool
    pad_id: int
    pad_token: str
    normalize: bool = True
    merge_threshold: float | None = None
    quantization: str = "unknown"
    files: dict[str, FileRecord] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)
    vision: VisionTower | None = None

    @property
    def modalities(self) -> list[str]:
        """``["text"]``, or ``["text", "image"]`` for a two-tower model."""
        return list(TEXT_ONLY if self.vision is None else TEXT_AND_IMAGE)

    def to_json(self) -> dict[str, Any]:
        tower = {} if self.vision is None else {"vision": self.vision.to_json()}
        return {
            "format": MANIFEST_FORMAT,
            "name": self.name,
            "model_file": self.model_file,
            "tokenizer_file": self.tokenizer_file,
            "pooling": self.pooling,
            "output": self.output,
            "normalize": self.normalize,
            "dim": self.dim,
            "max_length": self.max_length,
            "token_type_ids": self.token_type_ids,
            "pad_id": self.pad_id,
            "pad_token": self.pad_token,
            "merge_threshold": self.merge_threshold,
            "quantization": self.quantization,
            "files": {k: {"size": v.size, "sha256": v.sha256} for k, v in self.files.items()},
            "source": self.source,
            "modalities": self.modalities,
            **tower,
        }

    @classmethod
    def from_json(cls, data: object, where: str) -> ModelManifest:
        """Check every field; a refusal names the field and the rule, never the file's text."""
        if not isinstance(data, dict):
            raise _Fields({}, where).bad("the file", "must hold a JSON object")
        fields = _Fields(data, where)
        if data.get("format") != MANIFEST_FORMAT:
            raise fields.bad("format", f"must be {MANIFEST_FORMAT}")
        # Checked in this order, so a manifest with several faults names the same one.
        pooling = fields.pooling()
        output = fields.output()
        if not fields.flag("normalize"):
            raise fields.bad("normalize", "must be true: lambo compares unit vectors")
        threshold = fields.merge_threshold()
        files = fields.files()
        model_file = fields.text("model_file")
        tokenizer_file = fields.text("tokenizer_file")
        fields.inside("model_file", model_file)
        fields.inside("tokenizer_file", tokenizer_file)
        source = fields.source()
        vision = fields.vision()
        quantization = data.get("quantization", "unknown")
        return cls(
            name=fields.text("name"),
            model_file=model_file,
            tokenizer_file=tokenizer_file,
            pooling=pooling,
            output=output,
            normalize=True,
            dim=fields.integer("dim", 1),
            max_length=fields.integer("max_length", 2),
            token_type_ids=fields.flag("token_type_ids"),
            pad_id=fields.integer("pad_id", 0),
            pad_token=fields.text("pad_token"),
            merge_threshold=threshold,
            quantization=quantization if isinstance(quantization, str) else "unknown",
            files=files,
            source=source,
            vision=vision,
        )

    @classmethod
    def read(cls, model_dir: Path, where: str | None = None) -> ModelManifest:
        where = where or model_dir.name
        path = model_dir / MANIFEST_NAME
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(
                f"model {where} has no {MANIFEST_NAME}; register the directory with "
                "`lambo model import DIR --name NAME`"
            ) from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(
                f"{MANIFEST_NAME} of model {where} could not be read as JSON", detail=repr(exc)
            ) from None
        return cls.from_json(data, where)

    def write(self, model_dir: Path) -> None:
        path = model_dir / MANIFEST_NAME
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            json.dump(self.to_json(), fh, indent=2, sort_keys=False)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)

    def contract(self) -> EmbeddingContract:
        # The spec: model is null for the embedder's default model.
        return make_contract(KIND, None if self.name == DEFAULT_MODEL else self.name, self.dim)
