"""Durable state behind the ``Store`` protocol (see ``base.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError
from .base import KeywordIndex, Store
from .memory import MemoryStore
from .postgres.dsn import dsn_identity
from .sqlite import SqliteStore

if TYPE_CHECKING:
    from ..config import Config

__all__ = [
    "KeywordIndex",
    "MemoryStore",
    "SqliteStore",
    "Store",
    "open_config_store",
    "open_store",
    "provision_store",
    "store_location",
]

KINDS = ("sqlite", "memory", "postgres", "cockroach")
#: the variable that sets a server kind's DSN, named in its refusals
DSN_VARIABLES = {"postgres": "LAMBO_POSTGRES_DSN", "cockroach": "LAMBO_COCKROACH_DSN"}


def _kind_refusal(kind: str) -> ConfigError:
    return ConfigError(f"store.kind must be one of {', '.join(KINDS)}, not {kind!r}")


def _no_dsn(kind: str) -> ConfigError:
    return ConfigError(
        f"store kind {kind} needs a DSN: set store.dsn in lambo.toml or {DSN_VARIABLES[kind]}"
    )


def open_store(kind: str, path: Path | None, dsn: str | None = None) -> Store:
    """Open a store: ``"sqlite"`` (needs ``path``), ``"memory"``, or ``"postgres"`` /
    ``"cockroach"`` (need ``dsn``; psycopg is imported only then)."""
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        if path is None:
            raise ConfigError("store kind sqlite needs a path (store.path)")
        return SqliteStore(path)
    if kind in DSN_VARIABLES:
        if not dsn:
            raise _no_dsn(kind)
        from .postgres.store import PostgresStore

        return PostgresStore(dsn, dialect=kind)
    raise _kind_refusal(kind)


def open_config_store(config: Config) -> Store:
    """The store a config names (the one place that maps a Config to a store)."""
    kind = config.store_kind
    return open_store(kind, config.store_path if kind == "sqlite" else None, config.store_dsn)


def store_location(config: Config) -> str:
    """Where the configured store lives, as text safe to show and to name sockets by: the
    SQLite path, ``dsn_identity`` of the DSN (no password), or "memory"."""
    kind = config.store_kind
    if kind == "sqlite":
        return str(config.store_path)
    if kind == "memory":
        return "memory"
    if kind not in DSN_VARIABLES:
        raise _kind_refusal(kind)
    if not config.store_dsn:
        raise _no_dsn(kind)
    return dsn_identity(config.store_dsn)


def provision_store(config: Config) -> str:
    """Create or migrate the configured store's schema; one line saying what happened.

    Safe to run twice: the second run applies nothing and says the schema is current.
    """
    kind = config.store_kind
    if kind == "memory":
        return "the memory store keeps nothing on disk: nothing to provision"
    if kind not in KINDS:
        raise _kind_refusal(kind)
    where = store_location(config)
    store = open_config_store(config)
    try:
        applied: list[int] = getattr(store, "migrations_applied", [])
        version = store.schema_version()
    finally:
        store.close()
    if applied:
        listed = ", ".join(str(v) for v in applied)
        return f"store {where}: schema version {version} (applied migrations {listed})"
    return f"store {where}: schema version {version}, already current"
