"""Durable state behind the ``Store`` protocol (see ``base.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError
from .base import KeywordIndex, Store
from .memory import MemoryStore
from .sqlite import SqliteStore

if TYPE_CHECKING:
    from ..config import Config

__all__ = ["KeywordIndex", "MemoryStore", "SqliteStore", "Store", "open_store", "provision_store"]


def open_store(kind: str, path: Path | None) -> Store:
    """Open the store a config names: ``"sqlite"`` (needs ``path``) or ``"memory"``."""
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        if path is None:
            raise ConfigError("store kind sqlite needs a path (store.path)")
        return SqliteStore(path)
    raise ConfigError(f"store.kind must be sqlite or memory, not {kind!r}")


def provision_store(config: Config) -> str:
    """Create or migrate the configured store's schema; one line saying what happened.

    Safe to run twice: the second run applies nothing and says the schema is current.
    """
    kind = config.store_kind
    if kind == "memory":
        return "the memory store keeps nothing on disk: nothing to provision"
    if kind != "sqlite":
        raise ConfigError(f"store.kind must be sqlite or memory, not {kind!r}")
    store = SqliteStore(config.store_path)
    try:
        applied = store.migrations_applied
        version = store.schema_version()
    finally:
        store.close()
    if applied:
        listed = ", ".join(str(v) for v in applied)
        return f"store {config.store_path}: schema version {version} (applied migrations {listed})"
    return f"store {config.store_path}: schema version {version}, already current"
