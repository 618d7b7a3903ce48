"""What the commands that read a store without its lease need: the store opened only if
it exists, a session that must be there, the store's sessions, and the merge threshold
the write path would use (for `lambo canon suspected`; spec: "Possibly superseded, not
declared").

Nothing here writes, so these reads run beside a serve that holds the session.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .config import Config
from .errors import ConfigError, ParameterError
from .matching import resolve_merge_threshold
from .store import open_config_store
from .store.base import Store
from .text import format_rfc3339


def open_existing_store(config: Config) -> Store:
    """The configured store, for reading: a SQLite file that does not exist is refused, not
    created."""
    if config.store_kind == "sqlite" and not config.store_path.is_file():
        raise ConfigError(f"no store at {config.store_path}; nothing was read")
    return open_config_store(config)


def require_session(store: Store, name: str) -> None:
    if store.get_session(name) is None:
        known = ", ".join(r.name for r in store.list_sessions()[:10]) or "none"
        raise ParameterError(f"no session named {name!r} in this store (sessions: {known})")


def merge_threshold(config: Config) -> tuple[float, str]:
    """The threshold the write path would use, and where it came from."""
    configured = float(config.get("embedder.merge_threshold"))
    if configured > 0:
        return resolve_merge_threshold(configured, None, None)
    from .embed.installed import resolve_model_dir
    from .embed.manifest import ModelManifest

    try:
        manifest = ModelManifest.read(resolve_model_dir(config))
    except Exception:  # no model installed: the uncalibrated default, said so
        manifest = None
    if manifest is None:
        return resolve_merge_threshold(configured, None, None)
    return resolve_merge_threshold(configured, manifest.merge_threshold, manifest.name)


def list_sessions(store: Store, now: float) -> list[dict[str, Any]]:
    out = []
    for record in store.list_sessions():
        lease = store.get_lease(record.name)
        held = lease is not None and lease.expires_at > now
        row: dict[str, Any] = {
            "session": record.name,
            "created_at": format_rfc3339(record.created_at),
            "embedding_contract": dict(record.embedding_contract)
            if record.embedding_contract
            else None,
            "held_by": lease.holder if held and lease is not None else None,
            "lease_expires_at": format_rfc3339(lease.expires_at)
            if held and lease is not None
            else None,
            "last_gc_at": format_rfc3339(record.last_gc_at) if record.last_gc_at else None,
            "mutation_count": record.mutation_count,
        }
        out.append(row)
    return out


def render_list(rows: Iterable[dict[str, Any]]) -> str:
    lines = []
    for row in rows:
        contract = row["embedding_contract"]
        stamped = (
            f"{contract.get('kind')}/{contract.get('model')}/{contract.get('dim')}"
            if contract
            else "not stamped"
        )
        held = f"held by {row['held_by']}" if row["held_by"] else "not held"
        lines.append(
            f"{row['session']}: created {row['created_at']}, embedding {stamped}, {held}, "
            f"{row['mutation_count']} mutations, last gc {row['last_gc_at'] or 'never'}"
        )
    return "\n".join(lines) if lines else "no sessions in this store"
