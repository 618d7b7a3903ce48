"""`lambo backup PATH`: an online copy of a SQLite store, consistent while a serve writes.

The copy is SQLite's online backup (``Connection.backup``), a few thousand pages per step,
made inside one read transaction opened on the source first: in WAL mode that transaction
is a snapshot, so the copy holds exactly the commits made before it began (every write
whose receipt was applied by then) and none after, and a serve committing meanwhile neither
waits for the copy nor makes it start over. The copy is written to a 600 temporary file
beside PATH, synced, then renamed over PATH, so PATH is never a half-written file.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing, suppress
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConflictError, ParameterError, StoreError
from ..text import show_safely
from .files import PRIVATE_FILE
from .sqlite_connection import BUSY_TIMEOUT_MS

#: pages copied per step (16 MiB at the default 4 KiB page): progress redraws between steps
PAGES_PER_STEP = 4096
#: characters of a path a message quotes
SHOWN_PATH_CHARS = 400

#: progress(pages_done, pages_total), after each step
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class BackupReport:
    path: Path
    sessions: int
    concepts: int
    edges: int
    pages: int
    bytes: int
    elapsed_s: float


def _shown(path: Path) -> str:
    """A path as a message quotes it: no control bytes reach the terminal."""
    return show_safely(str(path), SHOWN_PATH_CHARS)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (b.exists() and os.path.samefile(a, b))
    except OSError:
        return False


def check_target(store: Path, target: Path, *, force: bool) -> None:
    """Refuse a PATH the backup must not write: the store itself (or its WAL files), a
    directory, a missing directory, or an existing file without --force."""
    for own in (store, store.with_name(store.name + "-wal"), store.with_name(store.name + "-shm")):
        if _same_file(own, target):
            raise ParameterError(
                f"PATH is the store itself ({_shown(store)}); a backup must be written elsewhere"
            )
    if target.is_dir():
        raise ParameterError(f"PATH {_shown(target)} is a directory; name the file to write")
    if not target.parent.is_dir():
        raise ParameterError(f"PATH's directory {_shown(target.parent)} does not exist")
    if target.exists() and not force:
        raise ParameterError(f"PATH {_shown(target)} exists; add --force to replace it")


def backup_sqlite(
    store: Path,
    target: Path,
    *,
    force: bool = False,
    progress: Progress | None = None,
    pages_per_step: int = PAGES_PER_STEP,
) -> BackupReport:
    """Copy the store file ``store`` to ``target`` (see the module docstring)."""
    started = time.monotonic()
    if not store.is_file():
        raise ConflictError(
            f"the store {_shown(store)} does not exist yet; there is nothing to back up"
        )
    check_target(store, target, force=force)
    temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    except OSError as exc:
        raise StoreError(
            f"the backup's temporary file could not be created in {_shown(target.parent)}",
            detail=str(exc),
        ) from exc
    os.close(fd)
    try:
        counts, pages = _copy(store, temp, progress, pages_per_step)
        _sync(temp)
        if force:  # a stale WAL beside the old file would be read into the new one
            for leftover in (target.name + "-wal", target.name + "-shm"):
                with suppress(FileNotFoundError):
                    (target.parent / leftover).unlink()
        os.replace(temp, target)
        _sync_dir(target.parent)
    except BaseException:
        for stale in (temp, temp.with_name(temp.name + "-journal")):
            with suppress(OSError):
                stale.unlink()
        raise
    sessions, concepts, edges = counts
    return BackupReport(
        path=target,
        sessions=sessions,
        concepts=concepts,
        edges=edges,
        pages=pages,
        bytes=target.stat().st_size,
        elapsed_s=time.monotonic() - started,
    )


def _copy(
    store: Path, temp: Path, progress: Progress | None, pages_per_step: int
) -> tuple[tuple[int, int, int], int]:
    """The copy, inside one read transaction of the source: (sessions, concepts, edges) as
    of that snapshot, and the pages copied."""
    try:
        source = sqlite3.connect(store, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    except sqlite3.Error as exc:
        raise StoreError("the store file could not be opened", detail=str(exc)) from exc
    with closing(source):
        try:
            source.execute("PRAGMA query_only = ON")
            source.execute("BEGIN")
            # the first read starts the snapshot: every commit before it is in the copy
            sessions = source.execute("SELECT count(*) FROM sessions").fetchone()[0]
            concepts = source.execute("SELECT count(*) FROM concepts").fetchone()[0]
            edges = source.execute("SELECT count(*) FROM edges").fetchone()[0]
            total = source.execute("PRAGMA page_count").fetchone()[0]
            with closing(sqlite3.connect(temp, isolation_level=None)) as copy:

                def step(status: int, remaining: int, pages: int) -> None:
                    if progress is not None:
                        progress(pages - remaining, pages)

                source.backup(copy, pages=pages_per_step, progress=step)
            source.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StoreError(
                "the store could not be copied; nothing was written at PATH", detail=str(exc)
            ) from exc
    return (int(sessions), int(concepts), int(edges)), int(total)


def _sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_dir(path: Path) -> None:
    with suppress(OSError):  # not every filesystem syncs a directory
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
