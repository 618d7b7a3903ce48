"""The connection pool of a ``PostgresStore`` and its fenced write transactions.

Every write is one transaction on a pooled connection: ``write(session, body)``
first reads the session's lease row ``FOR SHARE`` and checks the writer's Fence
against it, so a takeover (an ``UPDATE`` of that row) waits for the write to
commit, and a write that starts after the takeover sees the new token and is
refused (``base.py``). Reads run on their own pooled connections in autocommit,
so a recall never waits for an apply. Driver errors come out as ``StoreError``
with a caller-safe message; the driver text goes to ``detail``, with the DSN's
password masked, and no message ever carries the DSN.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import psycopg
from psycopg import errors as pg_errors
from psycopg.adapt import Buffer, Dumper, Loader
from psycopg.pq import Format
from psycopg.types import TypeInfo
from psycopg_pool import ConnectionPool, PoolTimeout

from ...errors import StoreError
from ..base import Fence, fence_problem, fenced_out
from ..rows import refused
from . import schema
from .dsn import scrub

T = TypeVar("T")

CONNECT_TIMEOUT_S = 10
POOL_MAX = 8
POOL_WAIT_S = 30.0
#: how often a write that lost a serialization race (CockroachDB, mostly) is tried again
WRITE_ATTEMPTS = 5
# A holder paused (SIGSTOP) inside a transaction keeps the lease row share-locked, and a
# takeover would wait on it for ever: the server ends such a session after this long, well
# under the 45 s lease, so the lock goes and the paused writer's transaction rolls back.
IDLE_IN_TRANSACTION_S = 10
DIALECTS = ("postgres", "cockroach")

READ_FAILED = "the store could not be read; the detail was logged"
UNREACHABLE = "the PostgreSQL store could not be reached; the detail was logged"
_RETRIED = (pg_errors.SerializationFailure, pg_errors.DeadlockDetected)


# -- vectors on the wire: pgvector's binary form (PostgreSQL), its text form (CockroachDB) --


class _VectorBinaryDumper(Dumper):
    format = Format.BINARY

    def dump(self, obj: Any) -> Buffer:
        values = np.ascontiguousarray(obj, dtype=">f4").ravel()
        return struct.pack(">HH", values.size, 0) + values.tobytes()


class _VectorBinaryLoader(Loader):
    format = Format.BINARY

    def load(self, data: Buffer) -> np.ndarray[Any, np.dtype[np.float32]]:
        dim = struct.unpack_from(">H", data)[0]
        return np.frombuffer(data, dtype=">f4", count=dim, offset=4).astype(np.float32)


class _VectorTextDumper(Dumper):
    def dump(self, obj: Any) -> Buffer:
        # repr of the float64 each float32 widens to: exact, so the server parses it back
        values = np.asarray(obj, dtype=np.float32).ravel().astype(np.float64)
        return ("[" + ",".join(map(repr, values.tolist())) + "]").encode()


def vector_from_text(text: str) -> np.ndarray[Any, np.dtype[np.float32]]:
    """A float32 array from a vector's text form ``[1,2.5,...]``."""
    inner = text.strip().strip("[]").strip()
    return np.array(inner.split(",") if inner else [], dtype=np.float32)


class _VectorTextLoader(Loader):
    def load(self, data: Buffer) -> np.ndarray[Any, np.dtype[np.float32]]:
        return vector_from_text(bytes(data).decode())


def register_vector(conn: psycopg.Connection[Any], *, binary: bool) -> None:
    """Send numpy arrays as ``vector`` and read ``vector`` columns as float32 arrays."""
    info = TypeInfo.fetch(conn, "vector")
    if info is None:  # a server that names no vector type: text, its type left to the server
        conn.adapters.register_dumper(np.ndarray, _VectorTextDumper)
        return
    dumper: type[Dumper] = _VectorBinaryDumper if binary else _VectorTextDumper
    named = type(dumper.__name__, (dumper,), {"oid": info.oid})
    conn.adapters.register_dumper(np.ndarray, named)
    conn.adapters.register_loader(info.oid, _VectorTextLoader)
    if binary:
        conn.adapters.register_loader(info.oid, _VectorBinaryLoader)


def _driver_text(exc: BaseException, dsn: str) -> str:
    return scrub(f"{type(exc).__name__}: {exc}", dsn)


def connect(dsn: str) -> psycopg.Connection[Any]:
    """One autocommit connection, its failure a StoreError without the DSN or password."""
    try:
        return psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
    except (psycopg.Error, ValueError) as exc:  # ValueError: a DSN libpq cannot parse
        raise StoreError(UNREACHABLE, detail=_driver_text(exc, dsn)) from None


class Database:
    """The pool to one PostgreSQL database, and the fences each session's writes are
    checked against."""

    def __init__(self, dsn: str, dialect: str) -> None:
        if dialect not in DIALECTS:
            raise ValueError(f"dialect must be one of {DIALECTS}, not {dialect!r}")
        self._dsn = dsn
        self.dialect = dialect
        self._fences: dict[str, Fence] = {}
        self._fence_lock = threading.Lock()
        self._closed = False
        # Migrate on a plain connection first: its errors say what went wrong, where a
        # pool's wait would only time out; and the vector type exists before the pool
        # registers it on each connection.
        conn = connect(dsn)
        try:
            self.migrations_applied = schema.migrate(conn, dialect)
        finally:
            conn.close()
        self.pool: ConnectionPool[Any] = ConnectionPool(
            dsn,
            min_size=1,
            max_size=POOL_MAX,
            kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S},
            configure=self._configure,
            timeout=POOL_WAIT_S,
            open=False,
            name="lambo-store",
        )
        try:
            self.pool.open(wait=True, timeout=POOL_WAIT_S)
        except PoolTimeout as exc:
            self.pool.close()
            raise StoreError(UNREACHABLE, detail=_driver_text(exc, dsn)) from None

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute(
            "SELECT set_config('idle_in_transaction_session_timeout', %s, false)",
            (f"{IDLE_IN_TRANSACTION_S * 1000}",),
        )
        if self.dialect == "cockroach":
            # FOR SHARE takes a real shared lock under SERIALIZABLE only with this on
            conn.execute("SET enable_shared_locking_for_serializable = on")
        register_vector(conn, binary=self.dialect == "postgres")

    def schema_version(self) -> int:
        try:
            with self.pool.connection() as conn:
                done = schema.applied_versions(conn)
        except psycopg.Error as exc:  # the pool's own failure, PoolTimeout among them
            raise refused(_driver_text(exc, self._dsn)) from None
        return done[-1] if done else 0

    # -- fences --------------------------------------------------------------------

    def fence(self, session: str, fence: Fence | None) -> None:
        with self._fence_lock:
            if fence is None:
                self._fences.pop(session, None)
            else:
                self._fences[session] = fence

    def check_fence(self, cur: psycopg.Cursor[Any], session: str) -> None:
        """In the caller's transaction: the fenced writer of ``session`` still holds its
        live lease; the lease row stays share-locked until the transaction ends."""
        with self._fence_lock:
            fence = self._fences.get(session)
        if fence is None:
            return
        row = cur.execute(
            "SELECT token, expires_at FROM leases WHERE session = %s FOR SHARE", (session,)
        ).fetchone()
        problem = fence_problem(fence, None if row is None else (int(row[0]), float(row[1])))
        if problem is not None:
            raise fenced_out(session, fence, problem)

    # -- transactions and reads ------------------------------------------------------

    def write(self, session: str | None, body: Callable[[psycopg.Cursor[Any]], T]) -> T:
        """Run ``body`` in one transaction (after the session's fence check), or nothing.

        A serialization failure or deadlock runs it again from the start, up to
        WRITE_ATTEMPTS times; any other driver error is the caller-safe refusal.
        """
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
                    if session is not None:
                        self.check_fence(cur, session)
                    return body(cur)
            except _RETRIED as exc:
                if attempt == WRITE_ATTEMPTS:
                    raise refused(_driver_text(exc, self._dsn)) from None
            except PoolTimeout as exc:
                raise StoreError(UNREACHABLE, detail=_driver_text(exc, self._dsn)) from None
            except psycopg.Error as exc:
                raise refused(_driver_text(exc, self._dsn)) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def read(self, sql: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> list[Any]:
        """All rows of one statement. PostgreSQL answers in binary: a vector comes back
        bit-exact, with no decimal text in between."""
        try:
            with (
                self.pool.connection() as conn,
                conn.cursor(binary=self.dialect == "postgres") as cur,
            ):
                rows: list[Any] = cur.execute(sql, params).fetchall()
                return rows
        except psycopg.Error as exc:
            raise StoreError(READ_FAILED, detail=_driver_text(exc, self._dsn)) from None

    def reading(self, body: Callable[[psycopg.Connection[Any]], T]) -> T:
        """``body`` on a pooled connection (autocommit: it opens any transaction it
        needs), its driver errors the caller-safe read refusal."""
        try:
            with self.pool.connection() as conn:
                return body(conn)
        except PoolTimeout as exc:
            raise StoreError(UNREACHABLE, detail=_driver_text(exc, self._dsn)) from None
        except psycopg.Error as exc:
            raise StoreError(READ_FAILED, detail=_driver_text(exc, self._dsn)) from None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.pool.close()
