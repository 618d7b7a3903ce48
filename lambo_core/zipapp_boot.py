"""The start of the lambo ``.pyz``: pure modules import straight from the zip; a distribution
with a native extension is unpacked once, on its first import, into
``<cache>/pyz/<build id>/<group>/`` (published with one ``os.replace``, so racing starts are
safe). The archive's layout is ``build_zipapp.py``'s; the why is in docs/design.md.

Standard library and ``lambo_core.paths`` only: this runs before anything is unpacked.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TypedDict

NATIVE_PREFIX = "native/"
SITE_DIR = "site"
#: the build's full manifest at the archive's root (build_zipapp.py writes it)
MANIFEST_NAME = "lambo_pyz.json"
# Another build's unpacked directory goes once no archive has started from it for this long.
STALE_BUILD_AGE_S = 30 * 24 * 3600.0


class Manifest(TypedDict):
    format: int
    build_id: str
    version: str
    cache_tag: str
    platform: str
    machine: str
    groups: dict[str, list[str]]
    triggers: dict[str, str]


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    """Where archives unpack: ``<lambo cache dir>/pyz`` (``<LAMBO_HOME>/cache/pyz`` when set)."""
    # Imported here, so a wrong interpreter hears why before platformdirs is loaded.
    from lambo_core.paths import resolve_paths

    return resolve_paths(env).cache_dir / "pyz"


def incompatibility(manifest: Manifest, machine: str | None = None) -> str | None:
    """Why this interpreter cannot run the archive, or None."""
    import platform

    here = (sys.implementation.cache_tag, sys.platform, machine or platform.machine())
    built = (manifest["cache_tag"], manifest["platform"], manifest["machine"])
    if here == built:
        return None
    return (
        f"this lambo archive was built for {built[0]} on {built[1]} {built[2]}; "
        f"this interpreter is {here[0]} on {here[1]} {here[2]}. "
        "Run it with that Python, or build one here with `python build_zipapp.py`."
    )


class NativeUnpacker:
    """A ``sys.meta_path`` finder that unpacks a native group on the first import of one of
    its top-level names, puts the group's directory on ``sys.path`` and lets the normal path
    finder import from there."""

    def __init__(self, archive: str, manifest: Manifest, root: Path) -> None:
        self.archive = archive
        self.site = os.path.join(archive, SITE_DIR)
        self.base = root / manifest["build_id"]
        self.triggers = dict(manifest["triggers"])
        self.groups = dict(manifest["groups"])
        # group -> "cached" (already on disk), "unpacked" (this process wrote it) or
        # "raced" (another process published it first; this copy was discarded)
        self.outcomes: dict[str, str] = {}
        self._active: set[str] = set()
        self._lock = threading.Lock()
        self._group_locks: dict[str, threading.Lock] = {}
        self._zip: Any = None

    # -- the finder ------------------------------------------------------------------------
    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> None:
        if path is None:
            group = self.triggers.get(fullname)
            if group is not None and group not in self._active:
                self.activate(group)
        return None

    def activate(self, group: str) -> Path:
        """Unpack ``group`` if needed and put its directory on ``sys.path``, after ``site/``."""
        final = self.ensure(group)
        with self._lock:
            if group not in self._active:
                entry = str(final)
                try:
                    at = sys.path.index(self.site) + 1
                except ValueError:
                    at = 0
                sys.path.insert(at, entry)
                sys.path_importer_cache.pop(entry, None)
                self._active.add(group)
        return final

    # -- unpacking -------------------------------------------------------------------------
    def ensure(self, group: str) -> Path:
        """``<cache>/pyz/<build id>/<group>``, complete, unpacking it when it is not there."""
        final = self.base / group
        if final.is_dir():
            self.outcomes.setdefault(group, "cached")
            return final
        with self._lock:
            lock = self._group_locks.setdefault(group, threading.Lock())
        with lock:
            if not final.is_dir():
                self.outcomes[group] = self._unpack(group, final)
        return final

    def _archive_zip(self) -> Any:
        import zipfile

        with self._lock:
            if self._zip is None:
                self._zip = zipfile.ZipFile(self.archive)
            return self._zip

    def _unpack(self, group: str, final: Path) -> str:
        import shutil
        import tempfile

        archive = self._archive_zip()
        prefix = f"{NATIVE_PREFIX}{group}/"
        self.base.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{group}.", suffix=".part", dir=self.base))
        try:
            for info in archive.infolist():
                name: str = info.filename
                if not name.startswith(prefix) or name.endswith("/"):
                    continue
                rel = name[len(prefix) :]
                parts = rel.split("/")
                if rel.startswith("/") or ".." in parts:
                    raise ImportError(f"lambo archive: refusing member path {name!r}")
                dest = tmp.joinpath(*parts)
                dest.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(info) as src, open(dest, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
                mode = (info.external_attr >> 16) & 0o777
                if mode:
                    os.chmod(dest, mode)
            try:
                os.replace(tmp, final)
            except OSError:
                if not final.is_dir():
                    raise
                return "raced"
            self.prune_stale_builds()
            return "unpacked"
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def touch(self) -> None:
        """Mark this build's directory used now (one ``utime`` per start)."""
        self.base.mkdir(parents=True, exist_ok=True)
        os.utime(self.base)

    def prune_stale_builds(self, max_age_s: float = STALE_BUILD_AGE_S) -> list[str]:
        """Remove other builds' directories no archive has started from for ``max_age_s``
        (each start touches its own), so upgrades do not pile up unpacked copies. Runs when
        this process unpacked something, i.e. rarely."""
        import re
        import shutil
        import time

        cutoff = time.time() - max_age_s
        removed = []
        for entry in self.base.parent.iterdir():
            if entry.name == self.base.name or not re.fullmatch(r"[0-9a-f]{20}", entry.name):
                continue
            try:
                if entry.stat().st_mtime < cutoff:
                    shutil.rmtree(entry, ignore_errors=True)
                    removed.append(entry.name)
            except OSError:
                continue
        return removed


def installed_unpacker() -> NativeUnpacker | None:
    """The unpacker ``install`` put on ``sys.meta_path``: set only when this process runs
    from a lambo archive."""
    for finder in sys.meta_path:
        if isinstance(finder, NativeUnpacker):
            return finder
    return None


def running_archive() -> str | None:
    """The absolute path of the archive this process runs from, or None (an installed lambo)."""
    unpacker = installed_unpacker()
    return None if unpacker is None else os.path.abspath(unpacker.archive)


def archive_manifest(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """An archive's full manifest (``lambo_pyz.json``), or None when the file is not a lambo
    archive (no zip, no manifest, not JSON)."""
    import json
    import zipfile

    try:
        with zipfile.ZipFile(path) as zf:
            data = json.loads(zf.read(MANIFEST_NAME))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None
    return data if isinstance(data, dict) else None


def install(
    archive: str, manifest: Manifest, env: Mapping[str, str] | None = None
) -> NativeUnpacker:
    """Put the archive's ``site/`` first on ``sys.path`` (and its root, for the dist-infos)
    and the unpacker first on ``sys.meta_path``. A second call returns the first unpacker."""
    installed = installed_unpacker()
    if installed is not None:
        return installed
    site = os.path.join(archive, SITE_DIR)
    if site not in sys.path:
        sys.path.insert(0, site)
    if archive not in sys.path:
        sys.path.insert(sys.path.index(site) + 1, archive)
    unpacker = NativeUnpacker(archive, manifest, cache_root(env))
    sys.meta_path.insert(0, unpacker)
    return unpacker


def boot(archive: str, manifest: Manifest) -> int:
    """The archive's start: check the interpreter and install the unpacker. 0 when the CLI
    may run (the archive's ``__main__`` then imports it, so this module never imports the
    CLI), else the exit status, said on stderr."""
    problem = incompatibility(manifest)
    if problem:
        print(f"lambo: {problem}", file=sys.stderr)
        return 2
    unpacker = install(archive, manifest)
    try:
        unpacker.touch()
    except OSError as exc:
        print(
            f"lambo: cannot create {unpacker.base} to unpack native extensions into "
            f"({exc.strerror}); set LAMBO_HOME to a writable directory",
            file=sys.stderr,
        )
        return 1
    return 0
