"""The schema of lambo.toml: every key with its type, default, variable and rule, and the
check of one raw value against its key. ``config.py`` resolves them into a ``Config``;
``lambo config init`` writes them out (spec: "Configuration").
"""

from __future__ import annotations

from collections.abc import Callable

from .config_key import Key, Value
from .config_serve import SERVE_KEYS
from .errors import ConfigError
from .store.postgres.dsn import dsn_problem

# [recall] layer_relevance_floor's doc; its default is measured by tests/bench/layer_floor.py
_LAYER_FLOOR = (
    "the relevance (cosine to the question, else the share of its words; at least the share of "
    "its exact names) a layer's hit needs to enter a merged recall"
)


# The whole schema. Later capabilities add their keys here, in their section.
KEYS: tuple[Key, ...] = (
    # [store]
    Key(
        "store",
        "kind",
        "sqlite",
        "where memory lives: sqlite (a file), memory (RAM, gone at exit), postgres or "
        "cockroach (a database server, at store.dsn)",
        env="LAMBO_STORE",
        choices=("sqlite", "memory", "postgres", "cockroach"),
    ),
    Key(
        "store",
        "path",
        "",
        "the SQLite file; empty means <data dir>/lambo.db",
        env="LAMBO_SQLITE_PATH",
    ),
    # A DSN with a password is masked wherever lambo shows it; better, leave the password
    # out and let libpq find it (PGPASSWORD, ~/.pgpass).
    Key(
        "store",
        "dsn",
        "",
        "the database of kind postgres or cockroach: a postgresql:// URI or libpq key=value "
        "string (LAMBO_COCKROACH_DSN also sets it)",
        env="LAMBO_POSTGRES_DSN",
        also_env=("LAMBO_COCKROACH_DSN",),
        parse=lambda raw, origin: _as_dsn(raw, origin),
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
        "a catalog name (bge-m3, minilm, clip-vit-b32), a name given to `lambo model import`, "
        "or a directory",
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
    # The operator's decision: lambo checks a client vector's contract, width and values,
    # but cannot check that it really came from the model the contract names.
    Key(
        "embedder",
        "accept_client_vectors",
        False,
        "accept vectors a client computed itself (lambo_derive_image's vector, lambo_recall's "
        "query_vector) when their declared contract is exactly the session's; lambo cannot "
        "verify they came from that model, so they are off unless you trust your clients",
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
    Key("recall", "layer_relevance_floor", 0.375, _LAYER_FLOOR, minimum=0.0, maximum=1.0),
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
    Key(
        "fusion",
        "standing",
        "tiebreak",
        "what a concept's standing (use, recency, density, Canonical) does to its score: "
        "tiebreak (adds at most 0.1, so the question decides) or half (0.5 x standing + "
        "0.5 x relevance, Canonical hits first: the spec system's formula)",
        choices=("tiebreak", "half"),
    ),
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
    # Gate numbers the spec leaves open start from 0.2.2's (see lambo_core/canon/rules.py).
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
    # [writes]; 32 one-concept derives fill one model run of embedder.batch_size's default
    Key(
        "writes",
        "embed_batch",
        32,
        "most queued writes the apply worker embeds in one embedder call (their texts at most "
        "64 KiB together), each then applied in its turn; 1 embeds each write alone",
        minimum=1,
        maximum=1024,
    ),
    # [serve]: its own module, the longest section
    *SERVE_KEYS,
)

KEYS_BY_DOTTED: dict[str, Key] = {k.dotted: k for k in KEYS}
SECTIONS: tuple[str, ...] = tuple(dict.fromkeys(k.section for k in KEYS))


def coerce(key: Key, raw: object, origin: str) -> Value:
    """Check one value against its key's type and rule; ``origin`` names where it came from."""
    if key.parse is not None:
        return key.parse(raw, origin)
    value = _PARSERS.get(key.kind, _as_string)(key, raw, origin)
    if key.choices is not None and value not in key.choices:
        raise ConfigError(f"{key.dotted} ({origin}) must be one of {', '.join(key.choices)}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if key.minimum is not None and value < key.minimum:
            raise ConfigError(f"{key.dotted} ({origin}) must be at least {_number(key.minimum)}")
        if key.maximum is not None and value > key.maximum:
            raise ConfigError(f"{key.dotted} ({origin}) must be at most {_number(key.maximum)}")
    return value


def _as_dsn(raw: object, origin: str) -> Value:
    """A DSN libpq reads as one (or ""); a refusal never shows the value, which may hold a
    password."""
    if not isinstance(raw, str):
        raise ConfigError(f"store.dsn ({origin}) must be a string")
    problem = dsn_problem(raw) if raw.strip() else None
    if problem is not None:
        raise ConfigError(f"store.dsn ({origin}) {problem}")
    return raw


def _number(bound: float) -> str:
    """A bound as a person writes it: 4194304, not 4.1943e+06; 0.1 stays 0.1."""
    return str(int(bound)) if float(bound).is_integer() else f"{bound:g}"


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _as_bool(key: Key, raw: object, origin: str) -> Value:
    if isinstance(raw, bool):
        return raw
    word = raw.strip().lower() if isinstance(raw, str) else None
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ConfigError(f"{key.dotted} ({origin}) must be true or false")


def _as_int(key: Key, raw: object, origin: str) -> Value:
    refusal = ConfigError(f"{key.dotted} ({origin}) must be an integer")
    if isinstance(raw, bool):  # a bool is an int to Python, never to lambo.toml
        raise refusal
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str):
        try:
            return int(raw.strip())
        except ValueError:
            raise refusal from None
    raise refusal


def _as_float(key: Key, raw: object, origin: str) -> Value:
    refusal = ConfigError(f"{key.dotted} ({origin}) must be a number")
    if isinstance(raw, bool):
        raise refusal
    if isinstance(raw, int | float):
        return float(raw)
    if isinstance(raw, str):
        try:
            return float(raw.strip())
        except ValueError:
            raise refusal from None
    raise refusal


def _as_string(key: Key, raw: object, origin: str) -> Value:
    if not isinstance(raw, str):
        raise ConfigError(f"{key.dotted} ({origin}) must be a string")
    return raw


def _as_strings(key: Key, raw: object, origin: str) -> Value:
    """A TOML array of strings; from a variable, comma-separated; from flags, a tuple."""
    if isinstance(raw, str):
        raw = [part.strip() for part in raw.split(",") if part.strip()]
    if not isinstance(raw, list | tuple) or not all(isinstance(v, str) and v for v in raw):
        raise ConfigError(f"{key.dotted} ({origin}) must be a list of non-empty strings")
    return tuple(raw)


_PARSERS: dict[type, Callable[[Key, object, str], Value]] = {
    tuple: _as_strings,
    bool: _as_bool,
    int: _as_int,
    float: _as_float,
}
