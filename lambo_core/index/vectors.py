"""One session's embedding vectors as a float32 matrix, searched by brute force.

One BLAS gemv over a contiguous ``[capacity, dim]`` matrix whose live rows are the
prefix ``[:n]``: growth doubles the capacity, ``remove`` moves the last row into the
hole. Rows are unit length (the embedder normalises), so a dot product is the cosine.
Why brute force, and the locking: docs/design.md, recall.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from ..model import Vector

_MIN_CAPACITY = 64


def capacity_for(rows: int) -> int:
    """The smallest power of two >= rows (and >= the minimum).

    Untouched capacity costs address space, not RSS: numpy's large buffers are
    mmap'd and pages are committed only when a row is written.
    """
    cap = _MIN_CAPACITY
    while cap < rows:
        cap *= 2
    return cap


class SessionVectors(Protocol):
    """What recall, writes and canonization use of a session's vectors: a
    ``VectorMatrix`` in RAM, or ``StoreVectors`` over a store that searches them itself."""

    dim: int

    def __len__(self) -> int: ...

    def __contains__(self, node_id: object) -> bool: ...

    def top_k(
        self, query: npt.ArrayLike, k: int, exclude: set[str] | None = None
    ) -> list[tuple[str, float]]: ...

    def get(self, node_id: str) -> Vector | None: ...

    def prefetch(self, node_ids: Iterable[str]) -> None: ...

    def add_many(self, ids: Sequence[str], matrix: npt.ArrayLike) -> None: ...

    def remove(self, node_id: str) -> bool: ...

    def in_ram(self) -> VectorMatrix: ...


class VectorMatrix:
    """Unit float32 rows keyed by node id, with exact cosine top-k.

    Callers hold the session index lock for every mutation. ``_lock`` guards the
    bookkeeping (buffer, ids, rows); ``top_k`` takes it only to read a snapshot and to
    name the rows it picked, and runs the gemv without it. Appending writes rows past
    every scan's snapshot, so it never waits; a mutation that changes a row a scan may
    be reading (an overwrite or a remove) waits until no scan is in flight, and new
    scans wait behind it.
    """

    def __init__(self, dim: int, capacity: int = 0) -> None:
        if dim <= 0:
            raise ValueError(f"vector dim must be positive, got {dim}")
        self.dim = dim
        self._mat: npt.NDArray[np.float32] = np.empty(
            (capacity_for(capacity), dim), dtype=np.float32
        )
        self._ids: list[str] = []  # row -> node id; len == n
        self._rows: dict[str, int] = {}  # node id -> row
        self._lock = threading.Lock()
        self._no_scans = threading.Condition(self._lock)  # notified when _scans drops to 0
        self._scans = 0  # top_k calls reading rows [:n] without the lock
        self._rewriting = False  # a mutation of live rows waits for the scans to finish

    # -- size -----------------------------------------------------------------
    def __len__(self) -> int:
        with self._lock:
            return len(self._ids)

    def __contains__(self, node_id: object) -> bool:
        with self._lock:
            return node_id in self._rows

    @property
    def capacity(self) -> int:
        return int(self._mat.shape[0])

    def ids(self) -> list[str]:
        """A copy of the ids in row order."""
        with self._lock:
            return list(self._ids)

    def rows(self) -> npt.NDArray[np.float32]:
        """The live rows ``[n, dim]`` as a read-only view (no copy).

        Valid only until the next mutation; hold the index lock while using it.
        """
        view = self._mat[: len(self._ids)]
        view.flags.writeable = False
        return view

    # -- validation -----------------------------------------------------------
    def _as_row(self, vec: npt.ArrayLike) -> npt.NDArray[np.float32]:
        arr = np.asarray(vec)
        if arr.ndim != 1 or arr.shape[0] != self.dim:
            raise ValueError(f"vector must have shape ({self.dim},), got {arr.shape}")
        if not np.issubdtype(arr.dtype, np.floating):
            raise ValueError(f"vector must be floating point, got {arr.dtype}")
        return arr.astype(np.float32, copy=False)

    def _as_rows(self, matrix: npt.ArrayLike, count: int) -> npt.NDArray[np.float32]:
        arr = np.asarray(matrix)
        if arr.ndim != 2 or arr.shape != (count, self.dim):
            raise ValueError(f"matrix must have shape ({count}, {self.dim}), got {arr.shape}")
        if not np.issubdtype(arr.dtype, np.floating):
            raise ValueError(f"matrix must be floating point, got {arr.dtype}")
        return arr.astype(np.float32, copy=False)

    # -- mutation (caller holds the index lock) -------------------------------
    def _rewrite_live_rows(self) -> None:
        """Under ``_lock``: wait until no scan reads the live rows; new scans wait too."""
        self._rewriting = True
        while self._scans:
            self._no_scans.wait()

    def _done_rewriting(self) -> None:
        self._rewriting = False
        self._no_scans.notify_all()

    def reserve(self, rows: int) -> None:
        """Make room for ``rows`` rows in total, growing by doubling."""
        with self._lock:
            self._reserve(rows)

    def _reserve(self, rows: int) -> None:
        if rows <= self.capacity:
            return
        grown = np.empty((capacity_for(rows), self.dim), dtype=np.float32)
        n = len(self._ids)
        grown[:n] = self._mat[:n]
        self._mat = grown  # a scan still reading the old buffer sees its rows unchanged

    def _append(self, ids: Sequence[str], rows: npt.NDArray[np.float32]) -> None:
        """Under ``_lock``: new ids' rows, written past every scan's snapshot."""
        self._reserve(len(self._ids) + len(ids))
        start = len(self._ids)
        self._mat[start : start + len(ids)] = rows
        for offset, node_id in enumerate(ids):
            self._rows[node_id] = start + offset
        self._ids.extend(ids)

    def add(self, node_id: str, vec: npt.ArrayLike) -> None:
        """Add a row, or overwrite the row already stored for ``node_id``."""
        self.add_many([node_id], self._as_row(vec)[None, :])

    def add_many(self, ids: Sequence[str], matrix: npt.ArrayLike) -> None:
        """Add (or overwrite) one row per id; ``matrix`` is ``[len(ids), dim]``."""
        rows = self._as_rows(matrix, len(ids))
        if len(set(ids)) != len(ids):
            raise ValueError("add_many ids must be distinct")
        with self._lock:
            if not any(node_id in self._rows for node_id in ids):
                self._append(ids, rows)  # the common case (all new): one slice copy
                return
            self._rewrite_live_rows()
            try:
                fresh = [i for i, node_id in enumerate(ids) if node_id not in self._rows]
                for i, node_id in enumerate(ids):
                    at = self._rows.get(node_id)
                    if at is not None:
                        self._mat[at] = rows[i]
                self._append([ids[i] for i in fresh], rows[fresh])
            finally:
                self._done_rewriting()

    def remove(self, node_id: str) -> bool:
        """Drop a row by moving the last row into its place. False if absent."""
        with self._lock:
            at = self._rows.get(node_id)
            if at is None:
                return False
            self._rewrite_live_rows()
            try:
                last = len(self._ids) - 1
                if at != last:
                    moved = self._ids[last]
                    self._mat[at] = self._mat[last]
                    self._ids[at] = moved
                    self._rows[moved] = at
                self._ids.pop()
                del self._rows[node_id]
            finally:
                self._done_rewriting()
        return True

    def remove_many(self, node_ids: Iterable[str]) -> int:
        """Remove each id present; returns how many were removed."""
        return sum(1 for node_id in node_ids if self.remove(node_id))

    # -- reads ----------------------------------------------------------------
    def get(self, node_id: str) -> Vector | None:
        """A copy of the row stored for ``node_id``, or None."""
        with self._lock:
            at = self._rows.get(node_id)
            return None if at is None else self._mat[at].copy()

    def prefetch(self, node_ids: Iterable[str]) -> None:
        """Nothing to fetch: every row is here (``StoreVectors`` fetches)."""

    def in_ram(self) -> VectorMatrix:
        return self

    def top_k(
        self, query: npt.ArrayLike, k: int, exclude: set[str] | None = None
    ) -> list[tuple[str, float]]:
        """The ``k`` rows most similar to ``query`` as ``(node_id, cosine)``, best first.

        Ties are broken by node id (ascending), so results are deterministic
        whatever the row order. ``exclude`` drops ids before ranking; ``k``
        larger than the row count returns every (non-excluded) row.
        """
        q = self._as_row(query)
        norm = float(np.linalg.norm(q))
        if not np.isfinite(norm) or norm == 0.0:
            raise ValueError("query vector must be finite and non-zero")
        if abs(norm - 1.0) > 1e-4:
            q = q / np.float32(norm)
        if k <= 0:
            return []
        with self._lock:
            while self._rewriting:
                self._no_scans.wait()
            mat, n = self._mat, len(self._ids)
            drop = [self._rows[x] for x in exclude or () if x in self._rows]
            self._scans += 1
        try:
            picked = self._top_rows(mat[:n], q, k, drop)  # the gemv, without the lock
            with self._lock:  # rows [:n] kept their ids while this scan was counted
                named = [(score, self._ids[r]) for score, r in picked]
        finally:
            with self._lock:
                self._scans -= 1
                if not self._scans:
                    self._no_scans.notify_all()
        named.sort(key=lambda pair: (-pair[0], pair[1]))
        return [(node_id, score) for score, node_id in named[:k]]

    @staticmethod
    def _top_rows(
        live: npt.NDArray[np.float32], q: npt.NDArray[np.float32], k: int, drop: list[int]
    ) -> list[tuple[float, int]]:
        """(score, row) of every row that can be among the best ``k``, ties kept."""
        n = live.shape[0]
        if n == 0:
            return []
        scores: npt.NDArray[np.float32] = live @ q  # a view: no copy of the matrix
        if drop:
            scores[drop] = -np.inf
        k = min(k, n - len(drop))
        if k <= 0:
            return []
        # every row tied with the k-th score is kept, so the tie-break by id
        # sees all of them and not whichever a partition kept
        cand = top_rows(scores, k) if k < n else np.arange(n)
        return [(float(scores[r]), r) for r in cand.tolist() if scores[r] != -np.inf]

    # -- bulk construction ----------------------------------------------------
    @classmethod
    def from_rows(cls, dim: int, ids: list[str], matrix: npt.NDArray[np.float32]) -> VectorMatrix:
        """Adopt a prebuilt ``[capacity >= len(ids), dim]`` float32 buffer without copying.

        Used by ``SessionIndex.open``, which fills the buffer in one pass.
        """
        if matrix.dtype != np.float32 or matrix.ndim != 2 or matrix.shape[1] != dim:
            raise ValueError(f"matrix must be float32 [rows, {dim}]")
        if matrix.shape[0] < len(ids) or not matrix.flags.c_contiguous:
            raise ValueError("matrix must be C-contiguous with a row per id")
        if len(set(ids)) != len(ids):
            raise ValueError("ids must be distinct")
        vm = cls(dim)
        vm._mat = matrix
        vm._ids = ids
        vm._rows = {node_id: i for i, node_id in enumerate(ids)}
        return vm


SELECT_BLOCK = 256  # rows per block when bounding the k-th score by block maxima


def top_rows(scores: npt.NDArray[np.float32], k: int) -> npt.NDArray[np.intp]:
    """The rows scoring at or above the k-th largest of ``scores`` (1 <= k < len), ties kept.

    A partition of the whole array costs about a millisecond at 100k rows,
    an eighth of the scan itself. The k-th largest of the block maxima is a
    lower bound (k blocks each hold a score at or above it), so only the rows
    at or above it, usually a few dozen, need partitioning.
    """
    n = len(scores)
    whole = n - n % SELECT_BLOCK
    if whole // SELECT_BLOCK <= k:
        kth = np.partition(scores, n - k)[n - k]
        return np.flatnonzero(scores >= kth)
    maxima = scores[:whole].reshape(-1, SELECT_BLOCK).max(axis=1)
    if whole < n:
        maxima = np.append(maxima, scores[whole:].max())
    bound = np.partition(maxima, len(maxima) - k)[len(maxima) - k]
    rows = np.flatnonzero(scores >= bound)
    above = scores[rows]
    kth = np.partition(above, len(above) - k)[len(above) - k]
    kept: npt.NDArray[np.intp] = rows[above >= kth]
    return kept
