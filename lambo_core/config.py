"""lambo.toml + LAMBO_* variables + flags -> one frozen ``Config``, each value with its source.

The file is ``--config``, else ``LAMBO_CONFIG``, else ``./lambo.toml``, else the user config
dir's; a flag beats its variable, which beats the file, which beats the default. The keys
and their rules are ``config_schema.py``'s; unknown ones are refused at start, by name.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from .config_key import Value
from .config_schema import KEYS, KEYS_BY_DOTTED, SECTIONS, coerce
from .credentials import CredentialEntry
from .errors import ConfigError
from .paths import Paths, resolve_paths
from .store.postgres.dsn import mask_dsn


@dataclass(frozen=True)
class Setting:
    value: Value
    source: str  # "default", "file <path>", "env LAMBO_X", "flag --x"


@dataclass(frozen=True)
class Config:
    """Every effective setting, where the file came from, and the resolved paths."""

    settings: Mapping[str, Setting]
    file: Path | None
    paths: Paths = field(default_factory=resolve_paths)

    def get(self, dotted: str) -> Any:
        return self.settings[dotted].value

    def source(self, dotted: str) -> str:
        return self.settings[dotted].source

    # Shorthands for the values most code reads.
    @property
    def store_kind(self) -> str:
        return str(self.get("store.kind"))

    @property
    def store_dsn(self) -> str:
        """The database DSN of a postgres/cockroach store ("" when unset); show it only
        through ``mask_dsn``."""
        setting = self.settings.get("store.dsn")  # a Config built by hand may leave it out
        return "" if setting is None else str(setting.value)

    @property
    def store_path(self) -> Path:
        raw = str(self.get("store.path"))
        return Path(raw).expanduser() if raw else self.paths.default_store


def find_config_file(
    flag_path: str | None, env: Mapping[str, str], paths: Paths, cwd: Path | None = None
) -> Path | None:
    """The file to read, by the documented order; a named file must exist."""
    if flag_path:
        path = Path(flag_path).expanduser()
        if not path.is_file():
            raise ConfigError("the file given with --config does not exist or is not a file")
        return path
    env_path = env.get("LAMBO_CONFIG")
    if env_path:
        path = Path(env_path).expanduser()
        if not path.is_file():
            raise ConfigError("the file named by LAMBO_CONFIG does not exist or is not a file")
        return path
    local = (cwd or Path.cwd()) / "lambo.toml"
    if local.is_file():
        return local
    if paths.user_config_file.is_file():
        return paths.user_config_file
    return None


def _read_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path.name} is not valid TOML ({exc})") from None
    except OSError:
        raise ConfigError(f"{path.name} could not be read") from None


def load_config(
    *,
    config_path: str | None = None,
    flags: Mapping[str, object] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Config:
    """Resolve every setting. ``flags`` maps dotted keys to values given on the command line."""
    env = os.environ if env is None else env
    paths = resolve_paths(env)
    file = find_config_file(config_path, env, paths, cwd)
    data = _read_file(file) if file else {}

    settings: dict[str, Setting] = {k.dotted: Setting(k.default, "default") for k in KEYS}
    if file is not None:
        origin = f"file {file}"
        for section, table in data.items():
            if section not in SECTIONS:
                raise ConfigError(
                    f"unknown section [{section}] in {file.name}; known sections: "
                    f"{', '.join(SECTIONS)}"
                )
            if not isinstance(table, dict):
                raise ConfigError(f"[{section}] in {file.name} must be a table")
            for name, raw in table.items():
                key = KEYS_BY_DOTTED.get(f"{section}.{name}")
                if key is None:
                    known = ", ".join(k.name for k in KEYS if k.section == section)
                    raise ConfigError(
                        f"unknown key {section}.{name} in {file.name}; [{section}] takes: {known}"
                    )
                if key.secret:
                    raise ConfigError(
                        f"{key.dotted} in {file.name}: a token never goes in lambo.toml; set "
                        f"{key.env} instead, or add a [[serve.credential]] with token_env, "
                        "token_file or token_sha256"
                    )
                settings[key.dotted] = Setting(coerce(key, raw, origin), origin)
    for key in KEYS:
        names = [n for n in (key.env, *key.also_env) if n and env.get(n) not in (None, "")]
        if len(names) > 1 and len({env[n] for n in names}) > 1:
            raise ConfigError(
                f"{' and '.join(names)} are both set, to different values; each sets "
                f"{key.dotted}: set one"
            )
        if names:
            origin = f"env {names[0]}"
            settings[key.dotted] = Setting(coerce(key, env[names[0]], origin), origin)
    for dotted, raw in (flags or {}).items():
        if raw is None:
            continue
        key = KEYS_BY_DOTTED[dotted]
        origin = f"flag {_flag_name(dotted)}"
        settings[dotted] = Setting(coerce(key, raw, origin), origin)
    return Config(settings=settings, file=file, paths=paths)


def _flag_name(dotted: str) -> str:
    return FLAG_NAMES.get(dotted, "--" + dotted.split(".", 1)[1].replace("_", "-"))


# Flags whose name is not simply --<key>.
FLAG_NAMES: dict[str, str] = {"store.path": "--store", "store.kind": "--store"}


def store_flags(store: str | None) -> dict[str, object]:
    """``--store PATH`` or ``--store memory`` as dotted flag values."""
    if store is None:
        return {}
    if store == "memory":
        return {"store.kind": "memory"}
    return {"store.kind": "sqlite", "store.path": store}


def render_show(config: Config) -> str:
    """Every effective value and where it came from, one per line, grouped by section."""
    lines = [f"# config file: {config.file if config.file else '(none found)'}"]
    lines.append(f"# data dir:    {config.paths.data_dir}")
    lines.append(f"# cache dir:   {config.paths.cache_dir}")
    lines.append(f"# runtime dir: {config.paths.runtime_dir}")
    if config.store_kind in ("postgres", "cockroach"):
        lines.append(f"# store dsn:   {mask_dsn(config.store_dsn) or '(none set)'}")
    else:
        lines.append(f"# store file:  {config.store_path}")
    for section in SECTIONS:
        lines.append(f"[{section}]")
        for key in (k for k in KEYS if k.section == section):
            setting = config.settings[key.dotted]
            literal = _literal(key.dotted, setting.value)
            lines.append(f"{key.name} = {literal}  # {setting.source}")
    return "\n".join(lines) + "\n"


def _literal(dotted: str, value: Value) -> str:
    """One value as TOML, a secret shown only as set."""
    if dotted == "serve.auth_token" and value:
        return "(set)"
    if dotted == "store.dsn" and isinstance(value, str):
        return _inline(mask_dsn(value))
    if isinstance(value, tuple):
        shown = [e.shown() if isinstance(e, CredentialEntry) else e for e in value]
        return _inline(shown)
    return _inline(value)


def _inline(value: object) -> str:
    """A value as a one-line TOML literal (tomli_w writes lists over several lines and a
    list of tables as ``[[...]]`` blocks, which would break the one-line-per-key listing)."""
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_inline(v) for v in value) + "]"
    if isinstance(value, dict):
        fields = ", ".join(f"{k} = {_inline(v)}" for k, v in value.items())
        return "{ " + fields + " }" if fields else "{}"
    return tomli_w.dumps({"v": value}).strip()[4:]


def render_default_file() -> str:
    """A commented lambo.toml holding every key at its default."""
    out = [
        "# lambo.toml: every setting at its default. Delete what you do not change.",
        "# A LAMBO_* variable overrides the file; a command-line flag overrides both.",
        "",
    ]
    for section in SECTIONS:
        out.append(f"[{section}]")
        for key in (k for k in KEYS if k.section == section):
            out.append(f"# {key.doc}")
            if key.env:
                names = " or ".join((key.env, *key.also_env))
                out.append(f"# (variable: {names})")
            if key.parse is not None:  # an array of tables: shown after every section
                continue
            if key.secret:  # never in the file: say where it comes from instead
                out.append(f"# {key.name}: set {key.env}, never here")
                continue
            default = list(key.default) if isinstance(key.default, tuple) else key.default
            out.append(tomli_w.dumps({key.name: default}).strip())
        out.append("")
    # A [[table]] header ends the section above it, so its example comes last.
    for key in (k for k in KEYS if k.parse is not None):
        out.append(f"# {key.doc}")
        out.append(f"# [[{key.dotted}]]")
        out.append('# name = "ci"')
        out.append('# sessions = ["*"]')
        out.append('# token_env = "LAMBO_CI_TOKEN"')
        out.append("")
    text = "\n".join(out)
    tomllib.loads(text)  # the file we write must read back
    return text
