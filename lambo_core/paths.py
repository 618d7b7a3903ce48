"""Where lambo keeps things: data (the store), cache (models), runtime (sockets), config.

platformdirs gives data, cache and config their per-user homes; the runtime
dir follows the spec's socket-directory rule (``socket_dir``); ``LAMBO_HOME=DIR`` moves all four
under one root (the tests always set it, so they never touch the user's
real memory). The socket-directory rules of the hub live in ``hub/socket_dir.py``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import platformdirs

APP = "lambo"


@dataclass(frozen=True)
class Paths:
    data_dir: Path
    cache_dir: Path
    runtime_dir: Path
    config_dir: Path

    @property
    def default_store(self) -> Path:
        return self.data_dir / "lambo.db"

    @property
    def models_dir(self) -> Path:
        return self.cache_dir / "models"

    @property
    def user_config_file(self) -> Path:
        return self.config_dir / "lambo.toml"


def socket_dir(env: Mapping[str, str]) -> Path:
    """The private per-user socket directory: $XDG_RUNTIME_DIR/lambo, else /tmp/lambo-<uid>.

    Only these two, never TMPDIR: some MCP clients pass TMPDIR to the servers
    they spawn and some scrub it, and two serves of one session must agree.
    """
    xdg = env.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg) / APP
    return Path(f"/tmp/{APP}-{os.getuid()}")


def resolve_paths(env: Mapping[str, str] | None = None) -> Paths:
    env = os.environ if env is None else env
    home = env.get("LAMBO_HOME")
    if home:
        root = Path(home).expanduser()
        return Paths(
            data_dir=root / "data",
            cache_dir=root / "cache",
            runtime_dir=root / "run",
            config_dir=root / "config",
        )
    return Paths(
        data_dir=Path(platformdirs.user_data_dir(APP)),
        cache_dir=Path(platformdirs.user_cache_dir(APP)),
        runtime_dir=socket_dir(env),
        config_dir=Path(platformdirs.user_config_dir(APP)),
    )
