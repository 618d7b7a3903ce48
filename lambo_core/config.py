"""lambo.toml + LAMBO_* variables + flags -> one frozen ``Config``.

Where the file comes from, first match wins: the global ``--config PATH``,
then ``LAMBO_CONFIG``, then ``./lambo.toml``, then ``lambo.toml`` in the user
config dir. A path named by ``--config`` or ``LAMBO_CONFIG`` must exist.

Precedence for each key: a flag beats its variable, which beats the file,
which beats the default. Every effective value remembers where it came from,
so ``lambo config show`` can say why a value is what it is.

Unknown sections and keys are refused at start-up, naming them, so a typo
fails instead of quietly leaving the default in force.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from .errors import ConfigError
from .paths import Paths, resolve_paths

Value = str | int | float | bool


@dataclass(frozen=True)
class Key:
    """One setting: its section, name, type, default, variable and rule."""

    section: str
    name: str
    default: Value
    doc: str
    env: str | None = None
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None

    @property
    def dotted(self) -> str:
        return f"{self.section}.{self.name}"

    @property
    def kind(self) -> type:
        return type(self.default)


# The whole schema. Later capabilities add their keys here, in their section.
KEYS: tuple[Key, ...] = (
    # [store]
    Key(
        "store",
        "kind",
        "sqlite",
        "where memory lives: sqlite (a file) or memory (RAM, gone at exit)",
        env="LAMBO_STORE",
        choices=("sqlite", "memory"),
    ),
    Key(
        "store",
        "path",
        "",
        "the SQLite file; empty means <data dir>/lambo.db",
        env="LAMBO_SQLITE_PATH",
    ),
    # [embedder]
    Key(
        "embedder",
        "kind",
        "onnx",
        "onnx: a local ONNX model through onnxruntime; none: no embedder",
        env="LAMBO_EMBEDDER",
        choices=("onnx", "none"),
    ),
    Key(
        "embedder",
        "model",
        "bge-m3",
        "a catalog name (bge-m3, minilm), a name given to `lambo model import`, or a directory",
        env="LAMBO_EMBEDDER_MODEL",
    ),
    Key(
        "embedder",
        "dim",
        0,
        "expected vector width; 0 takes the model's own",
        env="LAMBO_EMBED_DIM",
        minimum=0,
        maximum=65536,
    ),
    Key(
        "embedder",
        "threads",
        0,
        "onnxruntime intra-op threads; 0 uses every core",
        minimum=0,
        maximum=1024,
    ),
    Key("embedder", "batch_size", 32, "texts per embedding batch", minimum=1, maximum=4096),
    Key(
        "embedder",
        "max_length",
        0,
        "token cap per text; 0 takes the model's own",
        minimum=0,
        maximum=1_000_000,
    ),
    Key(
        "embedder",
        "match_strategy",
        "hybrid",
        "hybrid: every concept is embedded (the default); canonical: keyword-only, no embedder",
        choices=("hybrid", "canonical"),
    ),
    Key(
        "embedder",
        "merge_threshold",
        0.0,
        "cosine at which a new concept merges into an existing one; 0 takes the model's "
        "calibrated value",
        minimum=0.0,
        maximum=1.0,
    ),
    Key(
        "embedder",
        "suspected_supersession_line",
        "auto",
        "show the possibly-superseded line: auto (only where measured), on, off",
        choices=("auto", "on", "off"),
    ),
    Key(
        "embedder",
        "hub_url",
        "https://huggingface.co",
        "base URL `lambo model pull` downloads from",
        env="LAMBO_HUB_URL",
    ),
    # [recall]
    Key("recall", "top_k", 5, "hits returned when a call does not say", minimum=1, maximum=100),
    Key(
        "recall",
        "max_tokens",
        500,
        "context budget when a call does not say",
        minimum=1,
        maximum=100_000,
    ),
    Key(
        "recall",
        "traversal_depth",
        2,
        "graph expansion depth when a call does not say",
        minimum=0,
        maximum=5,
    ),
    Key(
        "recall",
        "pillar_threshold",
        5,
        "blast radius at which a hit carries the load-bearing pillar line",
        minimum=1,
        maximum=1_000_000,
    ),
    Key(
        "recall",
        "model_wait_ms",
        3000,
        "how long a recall made while the embedding model is still loading waits for it "
        "before answering without the vector leg (and saying so)",
        minimum=0,
        maximum=60_000,
    ),
    # [fusion]
    Key(
        "fusion",
        "method",
        "sum",
        "how leg scores combine: sum (the legs' rescaled scores added; measured best), "
        "max (the highest leg score) or rrf (reciprocal rank fusion)",
        choices=("max", "rrf", "sum"),
    ),
    Key("fusion", "rrf_k", 60, "the k of reciprocal rank fusion", minimum=1, maximum=10_000),
    # [selection]
    Key("selection", "skip_redundant", False, "skip a hit that repeats one already taken"),
    Key(
        "selection",
        "similar_signals",
        False,
        "with skip_redundant, also treat semantic matches as repeats",
    ),
    # [canonization]
    Key(
        "canonization",
        "promotion_policy",
        "swarm",
        "swarm (the default) or solo",
        env="LAMBO_PROMOTION_POLICY",
        choices=("swarm", "solo"),
    ),
    Key(
        "canonization",
        "cycle_interval_s",
        60.0,
        "seconds between daemon cycles",
        minimum=0.001,
        maximum=86_400,
    ),
    Key(
        "canonization",
        "edge_min_age_s",
        60.0,
        "canonization_edge_min_age: evidence counts once this old",
        minimum=0.0,
        maximum=86_400 * 365,
    ),
    Key(
        "canonization",
        "supersede",
        False,
        "canonization_supersede: newer contradicting support can demote a Canonical concept",
    ),
    Key(
        "canonization",
        "canonical_budget",
        1000,
        "most Canonical concepts a session keeps",
        minimum=1,
        maximum=10_000_000,
    ),
    # Gate numbers the spec leaves open start from 0.2.2's (see lambo_core/canon.py).
    Key(
        "canonization",
        "candidate_min_interactions",
        1,
        "stage 1 (-> Candidate): dependents from at least this many other interactions",
        minimum=0,
        maximum=1_000_000,
    ),
    Key(
        "canonization",
        "venerable_min_interactions",
        3,
        "stage 2 (-> Venerable): dependents from at least this many other interactions",
        minimum=0,
        maximum=1_000_000,
    ),
    Key(
        "canonization",
        "min_agents",
        2,
        "stage 2 under swarm: dependents from at least this many agents besides the writer",
        minimum=0,
        maximum=1_000_000,
    ),
    Key(
        "canonization",
        "canonical_min_blast_radius",
        5,
        "stage 3 (-> Canonical): blast radius (edges past the age floor) must exceed this",
        minimum=0,
        maximum=1_000_000,
    ),
    Key(
        "canonization",
        "demotion_cooldown_s",
        300.0,
        "stage 3 waits this long after the concept's last demotion",
        minimum=0.0,
        maximum=86_400 * 365,
    ),
    Key(
        "canonization",
        "batch",
        50,
        "most concepts a cycle promotes per stage (stage 2: looks at, round-robin)",
        minimum=1,
        maximum=1_000_000,
    ),
    Key(
        "canonization",
        "solo_min_concepts",
        20,
        "stage 1 under solo: the session holds at least this many non-canonical concepts",
        minimum=0,
        maximum=10_000_000,
    ),
    Key(
        "canonization",
        "solo_min_gc_survived",
        3,
        "stage 1 under solo: garbage-collection sweeps the concept has survived",
        minimum=0,
        maximum=1_000_000,
    ),
    Key(
        "canonization",
        "solo_percentile",
        90.0,
        "stages 1 and 2 under solo: score above this percentile of the session's scores",
        minimum=0.0,
        maximum=100.0,
    ),
    Key(
        "canonization",
        "supersede_min_interactions",
        3,
        "supersede: the contradicting concept's newer support from this many other interactions",
        minimum=1,
        maximum=1_000_000,
    ),
    Key(
        "canonization",
        "contradiction_budget",
        10_000,
        "most contradicted concepts the daemon lists for recall's warnings (#196)",
        minimum=0,
        maximum=10_000_000,
    ),
    # [gc]
    Key(
        "gc",
        "mutations_per_sweep",
        10_000,
        "garbage collection sweeps once this many mutations (concepts and edges written) "
        "have accumulated since the last sweep",
        minimum=1,
        maximum=1_000_000_000,
    ),
    Key(
        "gc",
        "elapsed_s",
        3600.0,
        "garbage collection also sweeps once this many seconds have passed since the last sweep",
        minimum=0.001,
        maximum=86_400 * 365,
    ),
    Key(
        "gc",
        "per_sweep_cap",
        2_000,
        "most concepts one sweep collects; the rest wait for the next sweep",
        minimum=1,
        maximum=10_000_000,
    ),
    Key(
        "gc",
        "score_floor",
        0.12,
        "a concept whose base score is below this divided by its type's resistance is collected",
        minimum=0.0,
        maximum=10.0,
    ),
    Key(
        "gc",
        "min_age_s",
        3600.0,
        "a concept younger than this (from when it was written) is never collected",
        minimum=0.0,
        maximum=86_400 * 365,
    ),
    Key(
        "gc",
        "survivor_bumps_per_sweep",
        100_000,
        "most gc_survived increments one sweep writes; the rest are owed to the next drain",
        minimum=1,
        maximum=100_000_000,
    ),
    # [serve]
    Key("serve", "transport", "stdio", "stdio or http", choices=("stdio", "http")),
    Key("serve", "bind", "127.0.0.1", "HTTP bind address"),
    Key("serve", "port", 7700, "HTTP port", minimum=1, maximum=65535),
    Key("serve", "agent", "lambo", "the id this process holds the session lease under"),
    Key("serve", "auth_token", "", "bearer token for HTTP off loopback", env="LAMBO_AUTH_TOKEN"),
    Key(
        "serve",
        "lease_ttl_s",
        45.0,
        "session lease time to live (the holder heartbeats every third of it)",
        minimum=1.0,
        maximum=3600.0,
    ),
    Key(
        "serve",
        "forward_timeout_s",
        30.0,
        "how long a call forwarded to the session's hub waits for its answer, beyond the "
        "call's own wait_ms; a hub silent that long counts as gone",
        minimum=0.1,
        maximum=3600.0,
    ),
    Key(
        "serve",
        "shutdown_budget_s",
        15.0,
        "how long a clean stop may take in all (finish the write being applied, flush, hand "
        "the rest on as durable intents); kept below the lease TTL",
        minimum=1.0,
        maximum=3600.0,
    ),
)

KEYS_BY_DOTTED: dict[str, Key] = {k.dotted: k for k in KEYS}
SECTIONS: tuple[str, ...] = tuple(dict.fromkeys(k.section for k in KEYS))


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


def _coerce(key: Key, raw: object, origin: str) -> Value:
    """Check one value against its key's type and rule; ``origin`` names where it came from."""
    want = key.kind
    value: Value
    if want is bool:
        if isinstance(raw, bool):
            value = raw
        elif isinstance(raw, str) and raw.strip().lower() in ("1", "true", "yes", "on"):
            value = True
        elif isinstance(raw, str) and raw.strip().lower() in ("0", "false", "no", "off"):
            value = False
        else:
            raise ConfigError(f"{key.dotted} ({origin}) must be true or false")
    elif want is int:
        if isinstance(raw, bool):
            raise ConfigError(f"{key.dotted} ({origin}) must be an integer")
        if isinstance(raw, int):
            value = raw
        elif isinstance(raw, str):
            try:
                value = int(raw.strip())
            except ValueError:
                raise ConfigError(f"{key.dotted} ({origin}) must be an integer") from None
        else:
            raise ConfigError(f"{key.dotted} ({origin}) must be an integer")
    elif want is float:
        if isinstance(raw, bool):
            raise ConfigError(f"{key.dotted} ({origin}) must be a number")
        if isinstance(raw, int | float):
            value = float(raw)
        elif isinstance(raw, str):
            try:
                value = float(raw.strip())
            except ValueError:
                raise ConfigError(f"{key.dotted} ({origin}) must be a number") from None
        else:
            raise ConfigError(f"{key.dotted} ({origin}) must be a number")
    else:
        if not isinstance(raw, str):
            raise ConfigError(f"{key.dotted} ({origin}) must be a string")
        value = raw
    if key.choices is not None and value not in key.choices:
        raise ConfigError(f"{key.dotted} ({origin}) must be one of {', '.join(key.choices)}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if key.minimum is not None and value < key.minimum:
            raise ConfigError(f"{key.dotted} ({origin}) must be at least {key.minimum:g}")
        if key.maximum is not None and value > key.maximum:
            raise ConfigError(f"{key.dotted} ({origin}) must be at most {key.maximum:g}")
    return value


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
                settings[key.dotted] = Setting(_coerce(key, raw, origin), origin)
    for key in KEYS:
        if key.env and env.get(key.env) not in (None, ""):
            origin = f"env {key.env}"
            settings[key.dotted] = Setting(_coerce(key, env[key.env], origin), origin)
    for dotted, raw in (flags or {}).items():
        if raw is None:
            continue
        key = KEYS_BY_DOTTED[dotted]
        origin = f"flag {_flag_name(dotted)}"
        settings[dotted] = Setting(_coerce(key, raw, origin), origin)
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
    lines.append(f"# store file:  {config.store_path}")
    for section in SECTIONS:
        lines.append(f"[{section}]")
        for key in (k for k in KEYS if k.section == section):
            setting = config.settings[key.dotted]
            shown = "(set)" if key.dotted == "serve.auth_token" and setting.value else None
            literal = shown or tomli_w.dumps({"v": setting.value}).strip()[4:]
            lines.append(f"{key.name} = {literal}  # {setting.source}")
    return "\n".join(lines) + "\n"


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
                out.append(f"# (variable: {key.env})")
            out.append(tomli_w.dumps({key.name: key.default}).strip())
        out.append("")
    text = "\n".join(out)
    tomllib.loads(text)  # the file we write must read back
    return text
