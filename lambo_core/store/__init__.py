"""Durable state behind the ``Store`` protocol (see ``base.py``)."""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from .base import KeywordIndex, Store
from .memory import MemoryStore
from .sqlite import SqliteStore

__all__ = ["KeywordIndex", "MemoryStore", "SqliteStore", "Store", "open_store"]


def open_store(kind: str, path: Path | None) -> Store:
    """Open the store a config names: ``"sqlite"`` (needs ``path``) or ``"memory"``."""
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        if path is None:
            raise ConfigError("store kind sqlite needs a path (store.path)")
        return SqliteStore(path)
    raise ConfigError(f"store.kind must be sqlite or memory, not {kind!r}")
