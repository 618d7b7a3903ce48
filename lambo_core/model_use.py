"""`lambo model use NAME`: make an installed model the default, in the lambo.toml in effect.

The file written is the one the settings were read from, else the user config file
(where `lambo config init` writes), so `lambo model verify` and `lambo serve` use the
model with no hand editing. Sessions already stamped with another embedding contract
are named: a serve refuses them under the new model (see ``session.Session.open``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .config import Config
from .config_write import set_string
from .embed.base import EmbeddingContract
from .embed.installed import InstalledModel, check_name, list_models
from .embed.manifest import ModelManifest
from .errors import ConfigError, LamboError


@dataclass(frozen=True)
class UseReport:
    name: str
    file: Path
    created: bool
    comments_kept: bool
    contract: EmbeddingContract
    warnings: list[str] = field(default_factory=list)


def _installed_list(models: list[InstalledModel]) -> str:
    good = [m.path.name for m in models if m.problem is None]
    return ", ".join(good) if good else "none"


def check_usable(name: str, models_dir: Path) -> ModelManifest:
    """The manifest of installed model ``name``, whose files are all there at their size;
    a refusal names the model and lists the installed ones."""
    check_name(name, "NAME")
    models = list_models(models_dir)
    found = next((m for m in models if m.path.name == name), None)
    if found is None:
        raise ConfigError(
            f"no installed model is called {name} (installed: {_installed_list(models)}); "
            "`lambo model pull` downloads a catalog model, `lambo model import` registers a "
            "local one, `lambo model list` shows what is installed"
        )
    if found.problem is not None:
        raise ConfigError(
            f"installed model {name} is broken ({found.problem}); pull or import it again "
            f"(usable: {_installed_list(models)})"
        )
    manifest = ModelManifest.read(found.path, name)
    for fname, rec in manifest.files.items():
        fpath = found.path / fname
        if not fpath.is_file() or fpath.stat().st_size != rec.size:
            raise ConfigError(
                f"installed model {name} is broken: its file {fname} is missing or of another "
                f"size; pull or import it again (usable: {_installed_list(models)})"
            )
    return manifest


def _contract_warnings(config: Config, contract: EmbeddingContract) -> list[str]:
    """Sessions of the configured store stamped with another contract, named."""
    from .session import contracts_equal, describe_contract
    from .store_reports import open_existing_store

    if config.store_kind == "memory":
        return []
    if config.store_kind == "sqlite" and not config.store_path.is_file():
        return []
    try:
        store = open_existing_store(config)
        try:
            records = store.list_sessions()
        finally:
            store.close()
    except LamboError as exc:
        return [f"the store's sessions could not be read to compare contracts ({exc.message})"]
    others: dict[str, list[str]] = {}
    for record in records:
        stamped = record.embedding_contract
        if stamped and not contracts_equal(dict(stamped), dict(contract)):
            others.setdefault(describe_contract(dict(stamped)), []).append(record.name)
    out = []
    for described, names in sorted(others.items()):
        shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
        out.append(
            f"session(s) {shown} were written with embedding contract {described}, not this "
            f"model's {describe_contract(dict(contract))}: `lambo serve` refuses to open them "
            "(vectors of different models cannot be compared) unless started with "
            "--allow-embedding-mismatch, which relabels such a session to the new contract"
        )
    return out


def use_model(config: Config, name: str) -> UseReport:
    """Write ``[embedder] model = name`` into the lambo.toml in effect; say what would
    still keep the model from being used."""
    manifest = check_usable(name, config.paths.models_dir)
    target = config.file or config.paths.user_config_file
    written = set_string(target, "embedder", "model", name)
    warnings: list[str] = []
    source = config.source("embedder.model")
    if source.startswith(("env ", "flag ")):
        what = source.split(" ", 1)[1]
        warnings.append(
            f"{what} is set and overrides the file: this shell still uses "
            f"{config.get('embedder.model')}; unset it to use {name}"
        )
    if config.get("embedder.kind") == "none":
        warnings.append(
            f"embedder.kind is none ({config.source('embedder.kind')}): no model is loaded "
            f'until it is "onnx"'
        )
    warnings += _contract_warnings(config, manifest.contract())
    return UseReport(
        name, written.path, written.created, written.comments_kept, manifest.contract(), warnings
    )
