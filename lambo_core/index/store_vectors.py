"""A session's vectors kept in the store and searched there (PostgreSQL's pgvector).

``StoreVectors`` answers what recall, writes and canonization ask of ``VectorMatrix``
(``top_k``, ``get``, the width, whether any vector exists) with the store's
``vector_top_k`` / ``vector_of``, so a session's vectors never load into the hub's RAM.
What stays here: a bounded cache of rows already fetched or just written (the rows a
recall compares pairwise are the ones it just found), and whether the session holds a
vector at all. Mutations need no copy: the store already holds the rows when
``SessionIndex.apply`` runs, so they only refresh the cache.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from ..model import Concept, Vector
from .vectors import VectorMatrix

CACHE_ROWS = 4096  # 16 MB at 1024-d: a few recalls' hits and the latest writes


class VectorStore(Protocol):
    """What ``StoreVectors`` needs of a store whose ``vector_in_store`` is True."""

    def vector_top_k(
        self,
        session: str,
        dim: int,
        query: Vector,
        k: int,
        exclude_statuses: Sequence[str] = (),
    ) -> list[tuple[str, float]]: ...

    def vector_of(self, session: str, ids: Iterable[str]) -> dict[str, Vector]: ...

    def vector_count(self, session: str, dim: int, at_most: int | None = None) -> int: ...

    def concepts(self, session: str, *, vectors: bool = True) -> Iterator[Concept]: ...


def as_query(query: npt.ArrayLike, dim: int) -> Vector:
    """A ``dim``-wide finite non-zero float query at unit length (``VectorMatrix``'s rules)."""
    arr = np.asarray(query)
    if arr.ndim != 1 or arr.shape[0] != dim:
        raise ValueError(f"vector must have shape ({dim},), got {arr.shape}")
    if not np.issubdtype(arr.dtype, np.floating):
        raise ValueError(f"vector must be floating point, got {arr.dtype}")
    q = arr.astype(np.float32, copy=False)
    norm = float(np.linalg.norm(q))
    if not np.isfinite(norm) or norm == 0.0:
        raise ValueError("query vector must be finite and non-zero")
    return q if abs(norm - 1.0) <= 1e-4 else q / np.float32(norm)


class StoreVectors:
    """``VectorMatrix``'s interface over the store's vectors of one session and width.

    Thread-safe: ``_lock`` guards the cache and counters only; store calls run without
    it. A fetch started before a mutation never caches its (possibly older) rows: the
    mutation bumps ``_epoch`` and the fetch checks it.
    """

    def __init__(
        self, store: VectorStore, session: str, dim: int, cache_rows: int = CACHE_ROWS
    ) -> None:
        if dim <= 0:
            raise ValueError(f"vector dim must be positive, got {dim}")
        self.store = store
        self.session = session
        self.dim = dim
        self._cache_rows = cache_rows
        self._cache: OrderedDict[str, Vector | None] = OrderedDict()  # None: holds no vector
        self._lock = threading.Lock()
        self._epoch = 0
        self._count: int | None = None  # exact, when known
        self._nonempty = False  # a vector of this width is known to be stored

    # -- size -----------------------------------------------------------------
    def __len__(self) -> int:
        """How many of the session's concepts hold a vector of this width (asks the store
        when unknown: after a removal, or before the first call)."""
        with self._lock:
            if self._count is not None:
                return self._count
            epoch = self._epoch
        count = self.store.vector_count(self.session, self.dim)
        with self._lock:
            if epoch == self._epoch:
                self._count = count
                self._nonempty = count > 0
        return count

    def __bool__(self) -> bool:
        """Any vector to search: no store call once one is known (recall asks every time);
        else the store looks for one row, not a count of them all."""
        with self._lock:
            if self._nonempty or self._count is not None:
                return self._nonempty
            epoch = self._epoch
        found = self.store.vector_count(self.session, self.dim, at_most=1) > 0
        with self._lock:
            if epoch == self._epoch and found:
                self._nonempty = True
        return found

    def __contains__(self, node_id: object) -> bool:
        return isinstance(node_id, str) and self.get(node_id) is not None

    # -- reads ----------------------------------------------------------------
    def top_k(
        self, query: npt.ArrayLike, k: int, exclude: set[str] | None = None
    ) -> list[tuple[str, float]]:
        """The store's ``k`` nearest rows to ``query`` as ``(node_id, cosine)``, best first."""
        q = as_query(query, self.dim)
        if k <= 0:
            return []
        dropped = exclude or set()
        found = self.store.vector_top_k(self.session, self.dim, q, k + len(dropped))
        return [(node_id, score) for node_id, score in found if node_id not in dropped][:k]

    def get(self, node_id: str) -> Vector | None:
        """The row stored for ``node_id`` (read-only), or None: one store call on a miss."""
        with self._lock:
            if node_id in self._cache:
                self._cache.move_to_end(node_id)
                return self._cache[node_id]
        self.prefetch([node_id])
        with self._lock:
            if node_id in self._cache:
                return self._cache[node_id]
        return self._fetch([node_id]).get(node_id)  # evicted at once by a tiny cache

    def prefetch(self, node_ids: Iterable[str]) -> None:
        """Fetch, in one store call, the rows of ``node_ids`` not cached yet, so the
        ``get`` calls that follow (under the index lock) make none."""
        with self._lock:
            missing = sorted({n for n in node_ids if n not in self._cache})
            epoch = self._epoch
        if not missing:
            return
        rows = self._fetch(missing)
        with self._lock:
            if epoch == self._epoch:
                for node_id in missing:
                    self._keep(node_id, rows.get(node_id))

    def _fetch(self, node_ids: Sequence[str]) -> dict[str, Vector]:
        rows = self.store.vector_of(self.session, node_ids)
        out: dict[str, Vector] = {}
        for node_id, row in rows.items():
            if row.ndim == 1 and row.shape[0] == self.dim:  # another width is not searched
                kept = row.astype(np.float32, copy=False)
                kept.flags.writeable = False
                out[node_id] = kept
        return out

    def _keep(self, node_id: str, row: Vector | None) -> None:
        """Under ``_lock``."""
        self._cache[node_id] = row
        self._cache.move_to_end(node_id)
        while len(self._cache) > self._cache_rows:
            self._cache.popitem(last=False)

    # -- mutation: the store already holds the rows ----------------------------
    def add_many(self, ids: Sequence[str], matrix: npt.ArrayLike) -> None:
        """Rows the store has just committed: cached, as a recall soon asks for them."""
        rows = np.asarray(matrix)
        if rows.ndim != 2 or rows.shape != (len(ids), self.dim):
            raise ValueError(f"matrix must have shape ({len(ids)}, {self.dim}), got {rows.shape}")
        if not np.issubdtype(rows.dtype, np.floating):
            raise ValueError(f"matrix must be floating point, got {rows.dtype}")
        with self._lock:
            self._epoch += 1
            for node_id, row in zip(ids, rows.astype(np.float32), strict=True):
                row.flags.writeable = False
                self._keep(node_id, row)
            self._count = None  # new ids or overwrites: unknown without a store call
            self._nonempty = self._nonempty or bool(ids)

    def remove(self, node_id: str) -> bool:
        """Forget a row the store has deleted. False: the store is not asked whether it
        held one (``SessionIndex.remove_concepts`` ignores the answer)."""
        with self._lock:
            self._epoch += 1
            self._cache.pop(node_id, None)
            self._count = None
            self._nonempty = False
        return False

    # -- a copy in RAM, for offline tools ---------------------------------------
    def in_ram(self) -> VectorMatrix:
        """Every row of this width read into a ``VectorMatrix``: one scan of the session,
        for a tool that compares all pairs (``lambo session suspected``), never a hub."""
        ids: list[str] = []
        rows: list[Vector] = []
        for concept in self.store.concepts(self.session, vectors=True):
            vec = concept.vector
            if vec is not None and vec.ndim == 1 and vec.shape[0] == self.dim:
                ids.append(concept.id)
                rows.append(vec)
        matrix = VectorMatrix(self.dim, len(ids))
        if ids:
            matrix.add_many(ids, np.stack(rows))
        return matrix
