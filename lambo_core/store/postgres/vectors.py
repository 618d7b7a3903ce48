"""The vector leg in PostgreSQL: pgvector HNSW (cosine) over ``concepts.embedding``.

``embedding`` is an untyped ``vector`` column beside ``vector_dim``, so one table holds
sessions of any width. An HNSW index needs a fixed width, so there is one partial index
per width, on the expression ``(embedding::vector(D))`` ``WHERE vector_dim = D``; a
search names the same expression and predicate (D written as a literal, since the planner
matches a partial index's predicate at plan time) and the planner picks that index. The
session is a filter on the index scan: ``hnsw.iterative_scan = relaxed_order`` keeps the
scan going until enough of the session's rows came out (a small session in a big table
is otherwise starved by ``ef_search``), and the relaxed order is undone by an exact sort
of the candidates here. The scan still gives up at ``hnsw.max_scan_tuples`` (20,000 by
default; raising it made a miss slower, not found: see ``_search``): a session that came
back short of its own row count is then searched exactly, a second round trip. Every
value from a caller travels as a parameter.

HNSW indexes ``vector`` up to 2000 dimensions; a wider session is searched exactly (a
scan of its rows in the database, correct but slower), see ``indexable``.

CockroachDB (``dialect="cockroach"``, untested here): its vector index wants a typed
``VECTOR(n)`` column, which one table of every width does not have, so no index is made
there and the same statement, without pgvector's settings, scans the session's rows.

``VectorLeg`` is what ``PostgresStore`` calls: the pool, errors as ``StoreError``, and
each width's index built concurrently after its first vector or contract, until valid.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import numpy.typing as npt
from psycopg import Error, ProgrammingError, sql
from psycopg.adapt import PyFormat
from psycopg.pq import TransactionStatus

from ...errors import StoreError
from .connection import vector_from_text

if TYPE_CHECKING:
    from .connection import Database

log = logging.getLogger(__name__)

MAX_DIM = 16_000  # pgvector's widest vector
MAX_INDEXED_DIM = 2_000  # HNSW over vector: wider columns cannot be indexed
EF_SEARCH = 100  # candidates the graph walk keeps; recall@10 measured in tests/bench/pg_vectors.py
MAX_EF_SEARCH = 1_000  # pgvector's ceiling
EXTRA_CANDIDATES = 10  # asked beyond k: relaxed order may hand a true top-k row in late
# one advisory lock key space for index creation, so two hubs creating the same
# width's index wait for each other instead of racing on the catalog
_INDEX_LOCK_CLASS = 0x4C18
RETRY_AFTER_S = 30.0  # a width whose index build failed is tried again after this
# A concurrent build waits for every older transaction on the table, anyone's (a pg_dump,
# a report): the write that asked for the index waits with it, so the wait is bounded and
# the build is tried again RETRY_AFTER_S later (the width is searched exactly meanwhile).
INDEX_LOCK_TIMEOUT = "2s"


class VectorHit(NamedTuple):
    node_id: str
    cosine: float


def check_dim(dim: object) -> int:
    """``dim`` as a valid vector width, or a ValueError naming the rule."""
    if isinstance(dim, bool) or not isinstance(dim, int) or not 0 < dim <= MAX_DIM:
        raise ValueError(f"vector dim must be an integer from 1 to {MAX_DIM}")
    return dim


def indexable(dim: int) -> bool:
    return check_dim(dim) <= MAX_INDEXED_DIM


def index_name(dim: int) -> str:
    return f"concepts_hnsw_{check_dim(dim)}"


def vector_text(vec: npt.ArrayLike, dim: int | None = None) -> str:
    """pgvector's text form ``[x,y,...]`` of a finite float vector (exact for float32)."""
    arr = np.asarray(vec)
    if arr.ndim != 1 or (dim is not None and arr.shape[0] != dim):
        raise ValueError(f"vector must have shape ({dim if dim is not None else 'n'},)")
    if not np.issubdtype(arr.dtype, np.floating) or not np.all(np.isfinite(arr)):
        raise ValueError("vector must hold finite floating point numbers")
    # a float32 widened to a Python float prints (repr) a decimal that parses back to it
    return "[" + ",".join(map(repr, arr.astype(np.float32).tolist())) + "]"


def from_send(raw: bytes) -> npt.NDArray[np.float32]:
    """A vector from ``vector_send(embedding)``: int16 dim, int16 unused, big-endian float4s."""
    dim = int.from_bytes(raw[:2], "big")
    if len(raw) != 4 + 4 * dim:
        raise ValueError("malformed vector_send bytes")
    return np.frombuffer(raw, dtype=">f4", offset=4).astype(np.float32)


def _expr(dim: int) -> sql.Composable:
    return sql.SQL("(embedding::vector({}))").format(sql.Literal(dim))


def index_valid(conn: Any, dim: int) -> bool | None:
    """Width ``dim``'s index: True when it is there and valid, False when it is there but
    invalid (what a failed concurrent build leaves), None when there is none."""
    row = conn.execute(
        "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", (index_name(dim),)
    ).fetchone()
    return None if row is None else bool(row[0])


def ensure_vector_index(conn: Any, dim: int, dialect: str = "postgres") -> bool:
    """Create width ``dim``'s HNSW index if missing; True once it exists and is valid.
    False when none can be made here (too wide, or CockroachDB), or another hub is
    building it right now (a later call sees it done).

    ``conn`` must be autocommit and outside any transaction: CREATE INDEX CONCURRENTLY
    takes no lock that stops writes, but cannot run in a transaction. It waits for the
    transactions writing ``concepts`` to end, so a caller runs it after its own commit.
    A session-level advisory lock, tried without waiting (a waiting hub's statement would
    hold a snapshot the build itself waits for), keeps two hubs from racing; an invalid
    index left by a failed build is dropped and built again.
    """
    if dialect == "cockroach" or not indexable(dim):
        return False
    if index_valid(conn, dim):
        return True
    if not conn.autocommit or conn.info.transaction_status != TransactionStatus.IDLE:
        raise ValueError("a vector index is built on an idle autocommit connection")
    name = sql.Identifier(index_name(dim))
    locked = conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (_INDEX_LOCK_CLASS, dim))
    if not locked.fetchone()[0]:
        return False
    try:
        state = index_valid(conn, dim)
        if state is False:
            conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(name))
        if not state:
            _build(conn, dim, name)
        return bool(index_valid(conn, dim))
    finally:
        with contextlib.suppress(Error):  # a lost connection took its lock with it
            conn.execute("SELECT pg_advisory_unlock(%s, %s)", (_INDEX_LOCK_CLASS, dim))


def _build(conn: Any, dim: int, name: sql.Identifier) -> None:
    """CREATE INDEX CONCURRENTLY, its waits bounded by INDEX_LOCK_TIMEOUT unless the
    caller set a lock_timeout of its own."""
    row = conn.execute("SELECT current_setting('lock_timeout')").fetchone()
    bounded = row is not None and row[0] in ("0", "")
    if bounded:
        conn.execute("SELECT set_config('lock_timeout', %s, false)", (INDEX_LOCK_TIMEOUT,))
    try:
        conn.execute(
            sql.SQL(
                "CREATE INDEX CONCURRENTLY {name} ON concepts "
                "USING hnsw ({expr} vector_cosine_ops) WHERE vector_dim = {dim}"
            ).format(name=name, expr=_expr(dim), dim=sql.Literal(dim))
        )
    finally:
        if bounded:
            with contextlib.suppress(Error):  # a lost connection took its setting with it
                conn.execute("SELECT set_config('lock_timeout', '0', false)")


def unit_query(query: npt.ArrayLike, dim: int) -> npt.NDArray[np.float32]:
    """``query`` checked to be ``dim`` wide, finite and non-zero, scaled to unit length."""
    arr = np.asarray(query)
    if arr.ndim != 1 or arr.shape[0] != dim:
        raise ValueError(f"query vector must have shape ({dim},), got {arr.shape}")
    if not np.issubdtype(arr.dtype, np.floating):
        raise ValueError(f"query vector must be floating point, got {arr.dtype}")
    q = arr.astype(np.float32)
    norm = float(np.linalg.norm(q))
    if not np.isfinite(norm) or norm == 0.0:
        raise ValueError("query vector must be finite and non-zero")
    return q if abs(norm - 1.0) <= 1e-4 else q / np.float32(norm)


def top_k(
    conn: Any,
    session: str,
    dim: int,
    query: npt.ArrayLike,
    k: int,
    *,
    exclude_ids: Iterable[str] = (),
    exclude_statuses: Iterable[str] = (),
    ef_search: int = EF_SEARCH,
    dialect: str = "postgres",
) -> list[VectorHit]:
    """The ``k`` concepts of ``session`` (width ``dim``) nearest ``query`` by cosine, best first.

    On an idle autocommit connection (the store's pool) one round trip: the transaction,
    its two SET LOCALs, the search and a count go out as one pipeline (a second when the
    index scan comes back short and the session is searched exactly); inside a caller's
    transaction, a savepoint of it. Ties are broken by node id, as ``VectorMatrix.top_k``.
    """
    dim = check_dim(dim)
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError("k must be a non-negative integer")
    q = unit_query(query, dim)
    if k == 0:
        return []
    excluded = sorted(set(exclude_ids))
    statuses = sorted(set(exclude_statuses))
    limit = k + len(excluded) + EXTRA_CANDIDATES
    ef = max(1, min(MAX_EF_SEARCH, max(ef_search, limit)))
    rows = _search(
        conn, session, dim, _query_param(conn, q), limit, excluded, statuses, ef, dialect
    )
    hits = [VectorHit(str(node_id), float(cosine)) for node_id, cosine in rows]
    hits.sort(key=lambda h: (-h.cosine, h.node_id))
    return hits[:k]


def _query_param(conn: Any, q: npt.NDArray[np.float32]) -> Any:
    """The query as the connection sends it best: the array itself where the store's
    connections have a ``vector`` dumper for numpy (binary: no decimal text, and a
    millisecond less at 1024-d), else pgvector's text form."""
    try:
        conn.adapters.get_dumper(np.ndarray, PyFormat.AUTO)
    except ProgrammingError:
        return vector_text(q)
    return q


def search_sql(
    dim: int, *, exclude_ids: bool = False, exclude_statuses: bool = False, exact: bool = False
) -> Any:
    """The search statement for width ``dim``; parameters q, session, limit (and excluded,
    statuses when asked for). Its expression and ``vector_dim = D`` match the index's;
    ``exact`` orders by the similarity instead, which no index can serve."""
    dim = check_dim(dim)
    distance = sql.SQL("{expr} <=> %(q)s::vector({dim})").format(
        expr=_expr(dim), dim=sql.Literal(dim)
    )
    order = sql.SQL("2 DESC") if exact else distance
    return sql.SQL(
        "SELECT id, 1 - ({distance}) FROM concepts "
        "WHERE vector_dim = {dim} AND session = %(session)s{filters} "
        "ORDER BY {order} LIMIT %(limit)s"
    ).format(
        distance=distance,
        dim=sql.Literal(dim),
        filters=_filters(exclude_ids, exclude_statuses),
        order=order,
    )


def count_sql(dim: int, *, exclude_ids: bool = False, exclude_statuses: bool = False) -> Any:
    """How many rows the search can give at most, counted no further than its limit."""
    return sql.SQL(
        "SELECT count(*) FROM (SELECT 1 FROM concepts "
        "WHERE vector_dim = {dim} AND session = %(session)s{filters} LIMIT %(limit)s) AS found"
    ).format(dim=sql.Literal(check_dim(dim)), filters=_filters(exclude_ids, exclude_statuses))


def _filters(exclude_ids: bool, exclude_statuses: bool) -> sql.Composable:
    filters = []
    if exclude_ids:
        filters.append(sql.SQL(" AND id <> ALL(%(excluded)s)"))
    if exclude_statuses:
        filters.append(sql.SQL(" AND status <> ALL(%(statuses)s)"))
    return sql.SQL("").join(filters)


def _search(
    conn: Any,
    session: str,
    dim: int,
    q: Any,
    limit: int,
    excluded: Sequence[str],
    statuses: Sequence[str],
    ef: int,
    dialect: str,
) -> list[tuple[Any, Any]]:
    params: dict[str, Any] = {"q": q, "session": session, "limit": limit}
    if excluded:
        params["excluded"] = list(excluded)
    if statuses:
        params["statuses"] = list(statuses)
    exclusions = {"exclude_ids": bool(excluded), "exclude_statuses": bool(statuses)}
    statement = search_sql(dim, **exclusions)
    if dialect == "cockroach":  # no pgvector settings there, no index: already exact
        return list(conn.execute(statement, params).fetchall())
    # SET LOCAL, as set_config(..., true): the settings end with the transaction
    settings = (
        "SELECT set_config('hnsw.ef_search', %s, true), "
        "set_config('hnsw.iterative_scan', 'relaxed_order', true)",
        (str(ef),),
    )
    # fewer rows back than the session has (to the limit) means the index scan gave up
    rows, (available,) = _run(
        conn, settings, (statement, params), (count_sql(dim, **exclusions), params)
    )
    if len(rows) >= min(limit, int(available)):
        return list(rows)
    # The session is a filter on an index of every session's rows: the iterative scan
    # stops at hnsw.max_scan_tuples, so a small session among a big one's neighbours
    # comes back short (or empty). Its rows, scanned exactly, are the answer: ordered by
    # the similarity, which the vector index cannot serve.
    no_index = ("SELECT set_config('enable_indexscan', 'off', true)", None)
    return list(_run(conn, no_index, (search_sql(dim, exact=True, **exclusions), params))[0])


def _run(conn: Any, settings: tuple[str, Any], *statements: tuple[Any, Any]) -> list[Any]:
    """``statements`` after ``settings`` in one transaction: the rows of the first, the
    first row of each other. On an idle autocommit connection one round trip; inside a
    caller's transaction, a savepoint of it."""
    if conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE:
        cursors = _one_trip(conn, settings, statements)
    else:
        with conn.transaction():
            conn.execute(*settings)
            cursors = [conn.execute(*statement) for statement in statements]
    return [list(cursors[0].fetchall()), *(cur.fetchone() for cur in cursors[1:])]


def _one_trip(conn: Any, settings: tuple[str, Any], statements: Sequence[Any]) -> list[Any]:
    """BEGIN, the settings, the statements and COMMIT sent as one pipeline: one round trip
    (a ``transaction()`` block waits for its BEGIN, and each statement, apart)."""
    try:
        with conn.pipeline():
            conn.execute("BEGIN")
            conn.execute(*settings)
            cursors = [conn.execute(*statement) for statement in statements]
            conn.execute("COMMIT")
        return cursors
    except BaseException:
        # a failed statement skips the COMMIT: leave the connection idle, as found
        if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
            with contextlib.suppress(Error):
                conn.execute("ROLLBACK")
        raise


def vectors_of(
    conn: Any,
    session: str,
    ids: Iterable[str],
    dim: int | None = None,
    dialect: str = "postgres",
) -> dict[str, npt.NDArray[np.float32]]:
    """The stored vectors of those of ``ids`` that have one (of width ``dim`` if given).

    PostgreSQL sends ``vector_send``'s bytes (exact, whatever the connection's
    adapters); CockroachDB, which has no such function, the text form."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    column = "embedding::STRING" if dialect == "cockroach" else "vector_send(embedding)"
    statement = (
        f"SELECT id, {column} FROM concepts "
        "WHERE session = %s AND id = ANY(%s) AND embedding IS NOT NULL"
    )
    params: list[Any] = [session, wanted]
    if dim is not None:
        statement += " AND vector_dim = %s"
        params.append(check_dim(dim))
    rows = conn.execute(statement, params).fetchall()
    if dialect == "cockroach":
        return {str(node_id): vector_from_text(str(raw)) for node_id, raw in rows}
    return {str(node_id): from_send(bytes(raw)) for node_id, raw in rows}


def vector_count(conn: Any, session: str, dim: int, at_most: int | None = None) -> int:
    """How many of the session's concepts hold a vector of width ``dim`` (counting no
    further than ``at_most``: "is there one" stops at the first row)."""
    if at_most is None:
        statement = "SELECT count(*) FROM concepts WHERE session = %s AND vector_dim = %s"
        params: tuple[Any, ...] = (session, check_dim(dim))
    else:
        statement = (
            "SELECT count(*) FROM (SELECT 1 FROM concepts "
            "WHERE session = %s AND vector_dim = %s LIMIT %s) AS found"
        )
        params = (session, check_dim(dim), max(0, at_most))
    row = conn.execute(statement, params).fetchone()
    return int(row[0]) if row else 0


class VectorLeg:
    """``PostgresStore``'s vector calls on its pool; driver errors as ``StoreError``."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._lock = threading.Lock()
        self._done: set[int] = set()  # widths whose index is valid (or cannot be made)
        self._retry_at: dict[int, float] = {}  # a failed width's next try (monotonic)

    def ensure_index(self, dim: int) -> None:
        """Width ``dim``'s index, until it is there and valid; a failure is logged, not
        raised, and tried again RETRY_AFTER_S later: a width without its index is still
        searched, exactly, so no write is refused. Call it outside any write."""
        dialect = self._db.dialect
        with self._lock:
            if dim in self._done or self._retry_at.get(dim, 0.0) > time.monotonic():
                return
            if dialect == "cockroach" or not indexable(dim):
                self._done.add(dim)
                log.info("no vector index for width %d here: it is searched exactly", dim)
                return
        try:
            made = self._db.reading(lambda conn: ensure_vector_index(conn, dim, dialect))
        except StoreError as exc:
            with self._lock:
                self._retry_at[dim] = time.monotonic() + RETRY_AFTER_S
            log.warning(
                "vector index for width %d not made (%s); searched exactly until it is",
                dim,
                exc.detail,
            )
            return
        if made:  # else another hub is building it: looked at again next time
            with self._lock:
                self._done.add(dim)
                self._retry_at.pop(dim, None)

    def top_k(
        self,
        session: str,
        dim: int,
        query: npt.ArrayLike,
        k: int,
        exclude_statuses: Sequence[str] = (),
    ) -> list[tuple[str, float]]:
        dialect = self._db.dialect
        hits = self._db.reading(
            lambda conn: top_k(
                conn, session, dim, query, k, exclude_statuses=exclude_statuses, dialect=dialect
            )
        )
        return [(h.node_id, h.cosine) for h in hits]

    def vectors_of(self, session: str, ids: Iterable[str]) -> dict[str, npt.NDArray[np.float32]]:
        wanted = list(ids)
        dialect = self._db.dialect
        return self._db.reading(lambda conn: vectors_of(conn, session, wanted, dialect=dialect))

    def count(self, session: str, dim: int, at_most: int | None = None) -> int:
        return self._db.reading(lambda conn: vector_count(conn, session, dim, at_most))
