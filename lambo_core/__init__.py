"""lambo: agentic graph memory for AI agents.

What a library user may import from ``lambo_core`` is ``__all__``: the settings, the
stores, the service that answers the MCP tools, and the errors it raises. A name is
imported from its module on first use, so ``import lambo_core`` (and ``lambo --version``)
stays cheap; everything else in the package is internal and may move.

    from lambo_core import ServeOptions, load_config, open_service, open_store, stop_service

    config = load_config()
    service = open_service(open_store("memory", None), config, ServeOptions(session="notes"))
    result = await service.call("lambo_recall", {"agent_id": "me", "query": "..."})
    stop_service(service)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .version import __version__

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ imports them
    from .config import Config, load_config
    from .embed.base import Embedder, EmbeddingContract
    from .embed.loader import LoadedModels
    from .errors import (
        ConfigError,
        ConflictError,
        DownloadError,
        ErrorKind,
        ForbiddenError,
        InternalError,
        LamboError,
        ParameterError,
        ReferenceRefused,
        StoreError,
    )
    from .serve import ServeOptions, StopOutcome, open_service, stop_service
    from .service import MemoryService, ToolResult
    from .store import MemoryStore, SqliteStore, open_store
    from .store.base import Store

# name -> the module (relative to this package) that defines it
_PUBLIC = {
    "Config": ".config",
    "load_config": ".config",
    "Store": ".store.base",
    "open_store": ".store",
    "SqliteStore": ".store",
    "MemoryStore": ".store",
    "MemoryService": ".service",
    "ToolResult": ".service",
    "ServeOptions": ".serve",
    "StopOutcome": ".serve",
    "open_service": ".serve",
    "stop_service": ".serve",
    "Embedder": ".embed.base",
    "EmbeddingContract": ".embed.base",
    "LoadedModels": ".embed.loader",
    "LamboError": ".errors",
    "ErrorKind": ".errors",
    "ParameterError": ".errors",
    "ReferenceRefused": ".errors",
    "StoreError": ".errors",
    "ConfigError": ".errors",
    "ConflictError": ".errors",
    "ForbiddenError": ".errors",
    "InternalError": ".errors",
    "DownloadError": ".errors",
}

__all__ = [
    "Config",
    "ConfigError",
    "ConflictError",
    "DownloadError",
    "Embedder",
    "EmbeddingContract",
    "ErrorKind",
    "ForbiddenError",
    "InternalError",
    "LamboError",
    "LoadedModels",
    "MemoryService",
    "MemoryStore",
    "ParameterError",
    "ReferenceRefused",
    "ServeOptions",
    "SqliteStore",
    "StopOutcome",
    "Store",
    "StoreError",
    "ToolResult",
    "__version__",
    "load_config",
    "open_service",
    "open_store",
    "stop_service",
]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'lambo_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
