"""One session's embedding vectors as a float32 matrix, searched by brute force.

Why brute force: at the sizes a session reaches (up to ~1M rows) a single
BLAS gemv over a contiguous float32 matrix is memory-bandwidth bound and
beats every approximate index we can ship in pure Python (see
``notes/embeddings.md``). So the layout is chosen for that one gemv:

- rows live in one preallocated C-contiguous ``[capacity, dim]`` matrix; the
  live rows are always the prefix ``[:n]``, so a query reads a view, never a
  copy;
- growth doubles the capacity (amortised O(1) appends, one copy per doubling);
- ``remove`` moves the last row into the hole (O(1)), keeping the prefix dense.

Rows must already be unit length (the embedder normalises); the matrix does
not renormalise them, so a dot product is the cosine. Queries are normalised
defensively because that costs one ``dim``-sized operation.

Threading: callers hold the session index lock for every mutation (the
matrix has no lock of its own). ``top_k`` and ``get`` may run without the lock
while the single writer mutates: they read a consistent snapshot through a
sequence counter (a seqlock) and retry if a mutation overlapped them, so the
long gemv never runs under the lock.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

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


class VectorMatrix:
    """Unit float32 rows keyed by node id, with exact cosine top-k."""

    def __init__(self, dim: int, capacity: int = 0) -> None:
        if dim <= 0:
            raise ValueError(f"vector dim must be positive, got {dim}")
        self.dim = dim
        self._mat: npt.NDArray[np.float32] = np.empty(
            (capacity_for(capacity), dim), dtype=np.float32
        )
        self._ids: list[str] = []  # row -> node id; len == n
        self._rows: dict[str, int] = {}  # node id -> row
        # seqlock: odd while a mutation is in progress; readers retry on change
        self._seq = 0

    # -- size -----------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._rows

    @property
    def capacity(self) -> int:
        return int(self._mat.shape[0])

    def ids(self) -> list[str]:
        """A copy of the ids in row order."""
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
    def _begin(self) -> None:
        self._seq += 1

    def _end(self) -> None:
        self._seq += 1

    def reserve(self, rows: int) -> None:
        """Make room for ``rows`` rows in total, growing by doubling."""
        if rows <= self.capacity:
            return
        grown = np.empty((capacity_for(rows), self.dim), dtype=np.float32)
        n = len(self._ids)
        grown[:n] = self._mat[:n]
        # publishing the new buffer is one reference swap; a reader holding the
        # old one still sees valid rows and re-checks the sequence afterwards
        self._mat = grown

    def add(self, node_id: str, vec: npt.ArrayLike) -> None:
        """Add a row, or overwrite the row already stored for ``node_id``."""
        row = self._as_row(vec)
        self._begin()
        try:
            at = self._rows.get(node_id)
            if at is None:
                self.reserve(len(self._ids) + 1)
                at = len(self._ids)
                self._ids.append(node_id)
                self._rows[node_id] = at
            self._mat[at] = row
        finally:
            self._end()

    def add_many(self, ids: Sequence[str], matrix: npt.ArrayLike) -> None:
        """Add (or overwrite) one row per id; ``matrix`` is ``[len(ids), dim]``."""
        rows = self._as_rows(matrix, len(ids))
        if len(set(ids)) != len(ids):
            raise ValueError("add_many ids must be distinct")
        self._begin()
        try:
            fresh = [i for i, node_id in enumerate(ids) if node_id not in self._rows]
            self.reserve(len(self._ids) + len(fresh))
            if len(fresh) == len(ids):
                # the common case (all new): one slice copy
                start = len(self._ids)
                self._mat[start : start + len(ids)] = rows
                for offset, node_id in enumerate(ids):
                    self._rows[node_id] = start + offset
                self._ids.extend(ids)
                return
            for i, node_id in enumerate(ids):
                at = self._rows.get(node_id)
                if at is None:
                    at = len(self._ids)
                    self._ids.append(node_id)
                    self._rows[node_id] = at
                self._mat[at] = rows[i]
        finally:
            self._end()

    def remove(self, node_id: str) -> bool:
        """Drop a row by moving the last row into its place. False if absent."""
        at = self._rows.get(node_id)
        if at is None:
            return False
        self._begin()
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
            self._end()
        return True

    def remove_many(self, node_ids: Iterable[str]) -> int:
        """Remove each id present; returns how many were removed."""
        return sum(1 for node_id in node_ids if self.remove(node_id))

    # -- reads (lock-free, seqlock-checked) -----------------------------------
    def get(self, node_id: str) -> Vector | None:
        """A copy of the row stored for ``node_id``, or None."""
        while True:
            seq = self._seq
            if not seq & 1:
                try:
                    at = self._rows.get(node_id)
                    out = None if at is None else self._mat[at].copy()
                except IndexError:  # a concurrent mutation; the seq check retries
                    out = None
                if self._seq == seq:
                    return out
            time.sleep(0)  # a mutation is mid-flight: let the writer finish

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
        while True:
            seq = self._seq
            if not seq & 1:
                try:
                    result = self._top_k_snapshot(q, k, exclude)
                except (IndexError, KeyError, RuntimeError):
                    result = None  # raced a mutation; the seq check below retries
                if result is not None and self._seq == seq:
                    return result
            time.sleep(0)  # a mutation is mid-flight: let the writer finish

    def _top_k_snapshot(
        self, q: npt.NDArray[np.float32], k: int, exclude: set[str] | None
    ) -> list[tuple[str, float]]:
        # read the buffer, n and the id list once: everything below uses them
        mat, ids, rows = self._mat, self._ids, self._rows
        n = min(len(ids), mat.shape[0])
        if n == 0:
            return []
        scores: npt.NDArray[np.float32] = mat[:n] @ q  # a view: no copy of the matrix
        live = n
        if exclude:
            found = (rows.get(node_id) for node_id in exclude)
            drop = [r for r in found if r is not None and r < n]
            if drop:
                scores[drop] = -np.inf
                live -= len(drop)
        k = min(k, live)
        if k <= 0:
            return []
        # every row tied with the k-th score is kept, so the tie-break by id
        # below sees all of them and not whichever a partition kept
        cand = top_rows(scores, k) if k < n else np.arange(n)
        picked = sorted(
            ((float(scores[r]), ids[r]) for r in cand.tolist() if scores[r] != -np.inf),
            key=lambda pair: (-pair[0], pair[1]),
        )[:k]
        return [(node_id, score) for score, node_id in picked]

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
