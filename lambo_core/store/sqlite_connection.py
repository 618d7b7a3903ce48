"""The store file and the two connections a ``SqliteStore`` holds to it.

Every write runs on the write connection, one ``BEGIN IMMEDIATE`` transaction at a
time under a lock (the apply worker, the daemon and the loop all write); every read
runs on a ``query_only`` read connection under its own lock, and WAL lets it read
the last commit while a write is open, so a recall never waits for an apply. A
session's fence is checked inside the write's own transaction (``base.py``).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from ..errors import StoreError
from . import migrations
from .base import Fence, fence_problem, fenced_out
from .files import create_private_file, make_private_dirs
from .rows import refused

BUSY_TIMEOUT_MS = 5000
#: the wal_checkpoint modes lambo runs
CHECKPOINT_MODES = ("PASSIVE", "TRUNCATE")
ROWS_PER_FETCH = 500  # rows fetched per hold of the read lock

READ_FAILED = "the store could not be read; the detail was logged"


def _switch_to_wal(conn: sqlite3.Connection) -> Any:
    """``PRAGMA journal_mode = WAL``, retried while another process holds the file.

    On a brand-new file, serves starting at the same moment race to switch it
    to WAL, and SQLite answers the loser "database is locked" at once rather
    than through the busy handler; the switch is retried for the busy timeout.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            return conn.execute("PRAGMA journal_mode = WAL").fetchone()
        except sqlite3.OperationalError as exc:
            busy = "locked" in str(exc) or "busy" in str(exc)
            if not busy or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


def connect(path: Path, *, write: bool) -> sqlite3.Connection:
    """A connection in autocommit mode (every transaction here is explicit) with the
    store's PRAGMAs: the write one switches the file to WAL, the read one is query-only."""
    try:
        conn = sqlite3.connect(
            path,
            timeout=BUSY_TIMEOUT_MS / 1000,
            isolation_level=None,
            check_same_thread=False,
        )
    except sqlite3.Error as exc:
        raise StoreError("the store file could not be opened", detail=str(exc)) from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys = ON")
        # durable at each checkpoint, and never corrupt, in WAL mode
        conn.execute("PRAGMA synchronous = NORMAL")
        if write:
            mode = _switch_to_wal(conn)
            if mode is None or str(mode[0]).lower() != "wal":
                raise sqlite3.OperationalError(f"journal_mode stayed {mode!r}")
        else:
            conn.execute("PRAGMA query_only = ON")
    except sqlite3.Error as exc:
        conn.close()
        raise StoreError("the store file could not be opened", detail=str(exc)) from exc
    return conn


class Connections:
    """The write and read connections to one store file, their locks, and the fences
    each session's writes are checked against."""

    def __init__(self, write: sqlite3.Connection, read: sqlite3.Connection) -> None:
        self.write_conn = write
        self.read_conn = read
        self._write_lock = threading.Lock()
        # Re-entrant: an abandoned row iterator may be finalised (closing its
        # cursor) by the garbage collector while this thread holds the lock.
        self._read_lock = threading.RLock()
        self._fences: dict[str, Fence] = {}
        self._closed = False

    @classmethod
    def open(cls, path: Path) -> tuple[Connections, list[int]]:
        """Create the file 600 if need be, migrate it, and connect; also the migrations
        this open applied."""
        try:
            make_private_dirs(path.parent)
            create_private_file(path)  # 600 before SQLite makes it (and its -wal, -shm)
        except OSError as exc:
            raise StoreError("the store's file could not be created", detail=str(exc)) from exc
        write = connect(path, write=True)
        try:
            applied = migrations.migrate(write)
            read = connect(path, write=False)
        except BaseException:
            write.close()
            raise
        return cls(write, read), applied

    @contextmanager
    def write(
        self, session: str | None = None, *, secure_delete: bool = False
    ) -> Iterator[sqlite3.Connection]:
        """One BEGIN IMMEDIATE transaction on the write connection, or nothing.

        With ``session``, the transaction first checks the session's fence, so the
        check and the write commit together or not at all; ``BEGIN IMMEDIATE`` also
        holds off another process's ``acquire_lease`` meanwhile. Any exception rolls
        back; a driver error comes out as StoreError. ``secure_delete``: the
        transaction's deleted and rewritten cells are overwritten with zeros (forget),
        not left in free space; the other writes keep the cheaper default.
        """
        with self._write_lock:
            conn = self.write_conn
            # this build's own default (Debian's SQLite zeroes already) comes back after
            previous = conn.execute("PRAGMA secure_delete").fetchone()[0] if secure_delete else 0
            if secure_delete:
                conn.execute("PRAGMA secure_delete = ON")
            try:
                conn.execute("BEGIN IMMEDIATE")
                if session is not None:
                    self.check_fence(conn, session)
                yield conn
                conn.execute("COMMIT")
            except BaseException as exc:
                # the original failure is the one worth reporting, not the rollback's
                with suppress(sqlite3.Error):
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise refused(str(exc)) from exc
                raise
            finally:
                if secure_delete:
                    with suppress(sqlite3.Error):
                        conn.execute(f"PRAGMA secure_delete = {int(previous)}")

    def checkpoint(self, mode: str = "PASSIVE") -> tuple[int, int, int]:
        """``PRAGMA wal_checkpoint(mode)`` on the write connection: (busy, WAL frames,
        frames copied). PASSIVE copies what no reader still needs and never waits;
        TRUNCATE also resets the WAL, waiting behind readers up to the busy timeout
        (busy 1 when one kept it from that)."""
        if mode not in CHECKPOINT_MODES:
            raise ValueError(f"checkpoint mode must be one of {CHECKPOINT_MODES}")
        with self._write_lock:
            try:
                row = self.write_conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
            except sqlite3.Error as exc:
                raise refused(str(exc)) from exc
        return int(row[0]), int(row[1]), int(row[2])

    @contextmanager
    def schema(self) -> Iterator[sqlite3.Connection]:
        """The write connection outside any transaction (migrations make their own)."""
        with self._write_lock:
            yield self.write_conn

    def check_fence(self, conn: sqlite3.Connection, session: str) -> None:
        fence = self._fences.get(session)
        if fence is None:
            return
        row = conn.execute(
            "SELECT token, expires_at FROM session_leases WHERE session = ?", (session,)
        ).fetchone()
        problem = fence_problem(fence, None if row is None else (int(row[0]), float(row[1])))
        if problem is not None:
            raise fenced_out(session, fence, problem)

    def fence(self, session: str, fence: Fence | None) -> None:
        with self._write_lock:
            if fence is None:
                self._fences.pop(session, None)
            else:
                self._fences[session] = fence

    def read(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._read_lock:
            try:
                return self.read_conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(READ_FAILED, detail=str(exc)) from exc

    def read_iter(self, sql: str, params: tuple[Any, ...]) -> Iterator[tuple[Any, ...]]:
        """Rows in chunks, holding the read lock only while fetching each chunk."""
        with self._read_lock:
            try:
                cursor = self.read_conn.execute(sql, params)
            except sqlite3.Error as exc:
                raise StoreError(READ_FAILED, detail=str(exc)) from exc
        try:
            while True:
                with self._read_lock:
                    try:
                        chunk = cursor.fetchmany(ROWS_PER_FETCH)
                    except sqlite3.Error as exc:
                        raise StoreError(READ_FAILED, detail=str(exc)) from exc
                if not chunk:
                    return
                yield from chunk
        finally:
            with self._read_lock, suppress(sqlite3.Error):
                cursor.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._write_lock, self._read_lock:
            for conn in (self.read_conn, self.write_conn):
                with suppress(sqlite3.Error):
                    conn.close()
