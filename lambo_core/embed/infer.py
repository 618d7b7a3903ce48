"""What `lambo model import` reads from the files beside a model, each value with its source.

A Hugging Face / sentence-transformers directory says how the model was meant to be run
in several places; each function here looks in them in a fixed order and returns the value
with the file it came from (``Inferred.line`` is what the import prints), or None when no
file says, so the importer can refuse and name the flag that supplies it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError

# tokenizer_config.json's model_max_length is a huge sentinel (1e30) when it is unset.
_UNSET_LENGTH = 1_000_000
# Pad tokens of the common tokenizer families, tried when no file names one.
_PAD_TOKENS = ("<pad>", "[PAD]", "<|padding|>", "<|endoftext|>")
# sentence-transformers' Pooling modes lambo can run, and the ones it cannot.
_MODES = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean"}
_OTHER_MODES = {
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
# Model families whose pooling is known when only config.json names the model.
_KNOWN_POOLING = {"bge-m3": "cls", "all-minilm-l6-v2": "mean", "all-minilm-l12-v2": "mean"}


@dataclass(frozen=True)
class Inferred:
    """One setting of the import and where it came from (a file, a flag, the graph)."""

    field: str
    value: object
    source: str

    def line(self) -> str:
        shown = self.value
        if isinstance(shown, tuple):  # the pad: (id, token)
            shown = f"{shown[1]} (id {shown[0]})"
        return f"{self.field}: {shown} (from {self.source})"


def read_json(path: Path) -> Any:
    """A JSON file's value, or None when it is missing or not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def _object(path: Path) -> dict[str, Any]:
    data = read_json(path)
    return data if isinstance(data, dict) else {}


def _rel(root: Path, path: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return path.name


def _modules(root: Path) -> list[dict[str, Any]]:
    data = read_json(root / "modules.json")
    return [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []


def _pooling_config(root: Path) -> Path | None:
    """The Pooling module's config: the folder modules.json names, else 1_Pooling/."""
    for module in _modules(root):
        folder = module.get("path")
        if str(module.get("type", "")).endswith(".Pooling") and isinstance(folder, str):
            candidate: Path = root / folder / "config.json"
            if candidate.is_file() and candidate.resolve().is_relative_to(root.resolve()):
                return candidate
    default = root / "1_Pooling" / "config.json"
    return default if default.is_file() else None


def _mode_of(config: dict[str, Any], where: str) -> str | None:
    mode = config.get("pooling_mode")  # the newer single-key form
    if isinstance(mode, str):
        mode = {"cls_token": "cls", "mean_tokens": "mean"}.get(mode, mode)
        if mode in ("cls", "mean"):
            return mode
        raise ConfigError(
            f"{where} pools by {mode}, which lambo does not run (it pools by cls or mean); "
            "importing it with --pooling would give other vectors than the model's own"
        )
    for key, name in _MODES.items():
        if config.get(key) is True:
            return name
    for key, name in _OTHER_MODES.items():
        if config.get(key) is True:
            raise ConfigError(
                f"{where} pools by {name}, which lambo does not run (it pools by cls or "
                "mean); importing it with --pooling would give other vectors than the model's "
                "own"
            )
    return None


def infer_pooling(root: Path) -> Inferred | None:
    """sentence-transformers' Pooling config, else a known model config.json names."""
    config_path = _pooling_config(root)
    if config_path is not None:
        where = _rel(root, config_path)
        mode = _mode_of(_object(config_path), where)
        if mode is not None:
            return Inferred("pooling", mode, where)
    named = _object(root / "config.json").get("_name_or_path")
    if isinstance(named, str) and named:
        family = named.rstrip("/").rsplit("/", 1)[-1].lower()
        if family in _KNOWN_POOLING:
            return Inferred(
                "pooling",
                _KNOWN_POOLING[family],
                f"config.json, which names {family}, a model pooled that way",
            )
    return None


def infer_max_length(root: Path, tokenizer_json: dict[str, Any]) -> Inferred | None:
    """The token cap: sentence_bert_config.json's max_seq_length (what sentence-transformers
    runs the model at, e.g. 256 for all-MiniLM-L6-v2 whose tokenizer.json says 128), then
    tokenizer.json's truncation, tokenizer_config.json's model_max_length, config.json's
    positions; capped at the positions the model has."""
    config = _object(root / "config.json")
    positions = config.get("max_position_embeddings")
    cap: int | None = None
    if isinstance(positions, int) and not isinstance(positions, bool) and positions > 2:
        # RoBERTa-style position ids start after the padding index.
        cap = positions - (2 if str(config.get("model_type", "")).endswith("roberta") else 0)
    found: Inferred | None = None
    truncation = tokenizer_json.get("truncation")
    candidates: list[tuple[object, str]] = [
        (
            _object(root / "sentence_bert_config.json").get("max_seq_length"),
            "sentence_bert_config.json",
        ),
        (truncation.get("max_length") if isinstance(truncation, dict) else None, "tokenizer.json"),
        (_object(root / "tokenizer_config.json").get("model_max_length"), "tokenizer_config.json"),
    ]
    for value, source in candidates:
        if isinstance(value, int) and not isinstance(value, bool) and 2 <= value < _UNSET_LENGTH:
            found = Inferred("max length", value, source)
            break
    if found is None:
        return None if cap is None else Inferred("max length", cap, "config.json")
    if cap is not None and int(str(found.value)) > cap:
        return Inferred("max length", cap, f"config.json's positions; {found.source} says more")
    return found


def _pad_named(value: object) -> str | None:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def infer_pad(root: Path, tokenizer: Any, tokenizer_json: dict[str, Any]) -> Inferred:
    """(pad id, pad token) with its source; any id works under the attention mask, so this
    never refuses: with nothing named it takes id 0 and says so."""
    padding = tokenizer_json.get("padding")
    if isinstance(padding, dict):
        token, pad_id = padding.get("pad_token"), padding.get("pad_id")
        if isinstance(token, str) and tokenizer.token_to_id(token) == pad_id:
            return Inferred("pad", (int(pad_id), token), "tokenizer.json")
    for fname in ("tokenizer_config.json", "special_tokens_map.json"):
        token = _pad_named(_object(root / fname).get("pad_token"))
        found = tokenizer.token_to_id(token) if token else None
        if token and found is not None:
            return Inferred("pad", (int(found), token), fname)
    pad_id = _object(root / "config.json").get("pad_token_id")
    if isinstance(pad_id, int) and not isinstance(pad_id, bool) and pad_id >= 0:
        token = tokenizer.id_to_token(pad_id)
        if token is not None:
            return Inferred("pad", (pad_id, str(token)), "config.json")
    for token in _PAD_TOKENS:
        found = tokenizer.token_to_id(token)
        if found is not None:
            return Inferred("pad", (int(found), token), "the tokenizer's vocabulary")
    return Inferred(
        "pad",
        (0, str(tokenizer.id_to_token(0))),
        "no file names one; any id works under the attention mask",
    )


def infer_normalize(root: Path) -> Inferred:
    """lambo always L2-normalizes; say whether the model's own pipeline does too."""
    types = [str(m.get("type", "")) for m in _modules(root)]
    if any(t.endswith(".Normalize") for t in types):
        return Inferred("normalize", "L2", "modules.json, which ends in a Normalize step")
    if types:
        return Inferred(
            "normalize", "L2", "lambo, which compares unit vectors; modules.json has no Normalize"
        )
    return Inferred("normalize", "L2", "lambo, which compares unit vectors")
