"""One session's read-side indices, bundled: graph, vectors, keywords, their lock and caches.

``SessionIndex.open`` rebuilds the graph and the vector matrix from the store in one
pass; the keyword index is the store's own. A store that searches vectors itself
(``vector_in_store``: PostgreSQL) keeps them: the open reads no vector and ``vectors`` is
a ``StoreVectors`` view over the store. After each committed batch the apply
worker calls ``SessionIndex.apply`` so the RAM copies follow the store. ``lock``
guards every mutation and graph traversal: take it after embedding, never around it.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from ..canon.solo_table import ScoreTable
from ..model import EdgeType, Vector, WriteBatch
from ..store.base import KeywordIndex, Store
from .caches import EdgeSummaries, LegCache
from .graph import SessionGraph
from .store_vectors import StoreVectors, VectorStore
from .vectors import SessionVectors, VectorMatrix, capacity_for

log = logging.getLogger(__name__)

_CHUNK_ROWS = 4096  # 16 MB per chunk at 1024-d


class _RowCollector:
    """Collects vectors during the open scan, then builds the matrix in one allocation.

    Why chunks: the store's iterator hands out one small array per concept.
    Copying each into a fixed-size chunk at once lets those arrays be freed as
    the scan goes; at the end the final matrix is allocated once from the
    count and filled chunk by chunk, freeing each chunk after its copy, so the
    peak stays near one copy of the vectors (plus one chunk), not two.
    """

    def __init__(self, dim: int | None) -> None:
        self.dim = dim
        self.ids: list[str] = []
        self.skipped = 0
        self._chunks: list[npt.NDArray[np.float32]] = []
        self._fill = _CHUNK_ROWS  # rows used in the last chunk (full: start a new one)

    def append(self, node_id: str, vec: Vector) -> None:
        if self.dim is None:
            self.dim = int(vec.shape[0]) if vec.ndim == 1 else -1
        if vec.ndim != 1 or vec.shape[0] != self.dim or self.dim <= 0:
            self.skipped += 1
            return
        if self._fill == _CHUNK_ROWS:
            self._chunks.append(np.empty((_CHUNK_ROWS, self.dim), dtype=np.float32))
            self._fill = 0
        self._chunks[-1][self._fill] = vec
        self._fill += 1
        self.ids.append(node_id)

    def build(self) -> VectorMatrix | None:
        if self.dim is None or self.dim <= 0:
            return None
        n = len(self.ids)
        matrix = np.empty((capacity_for(n), self.dim), dtype=np.float32)
        start = 0
        while self._chunks:
            chunk = self._chunks.pop(0)
            rows = min(_CHUNK_ROWS, n - start)
            matrix[start : start + rows] = chunk[:rows]
            start += rows
            del chunk  # release it before touching the next part of the matrix
        return VectorMatrix.from_rows(self.dim, self.ids, matrix)


_HUGEPAGE_LOCK = threading.Lock()


def _madvise_switch() -> Callable[[bool], bool] | None:
    for name in ("numpy._core.multiarray", "numpy.core.multiarray"):
        with contextlib.suppress(ImportError):
            switch = getattr(importlib.import_module(name), "_set_madvise_hugepage", None)
            if callable(switch):
                return switch  # type: ignore[no-any-return]
    return None


@contextlib.contextmanager
def _no_hugepage_advice() -> Iterator[None]:
    """Stop numpy asking for transparent huge pages while the open allocates.

    Why: numpy madvises every large array for huge pages. Where THP defrag is
    "madvise" (the common default), first touching those pages can stall in
    kernel compaction: filling the 410 MB matrix of 100k x 1024 measured
    0.05-0.9 s here with the advice and a steady ~0.2 s without, while the
    streaming gemv ran at the same speed either way.
    """
    switch = _madvise_switch()
    if switch is None:
        yield
        return
    with _HUGEPAGE_LOCK:
        previous = switch(False)
        try:
            yield
        finally:
            switch(previous)


def _contract_dim(contract: dict[str, Any] | None) -> int | None:
    if not contract:
        return None
    dim = contract.get("dim")
    return dim if isinstance(dim, int) and dim > 0 else None


class SessionIndex:
    """The graph, vector matrix and keyword index of one session, and the lock over them."""

    def __init__(
        self,
        session: str,
        graph: SessionGraph,
        vectors: SessionVectors | None,
        keywords: KeywordIndex,
        *,
        vector_search: bool = True,
        vector_store: VectorStore | None = None,
    ) -> None:
        self.session = session
        self.graph = graph
        self.vectors = vectors  # None: no vector search here, or no dim known yet
        self.keywords = keywords
        self.vector_search = vector_search
        self.vector_store = vector_store  # set: vectors live (and are searched) there
        self.lock = threading.RLock()
        self.skipped_vectors = 0  # stored vectors whose width did not match (left out)
        self.score_table: ScoreTable | None = None  # canonization's Solo bar (canon/solo.py)
        # caches of this graph, gone with it
        self.leg_cache = LegCache()  # recall's raw leg results
        self.summaries = EdgeSummaries()  # each concept's edge summary (scoring.EdgeView)
        # inspect's largest blast radii: (graph version, ids), replaced whole under ``lock``
        self.pillars: tuple[int, list[str]] | None = None

    @classmethod
    def open(cls, store: Store, session: str) -> SessionIndex:
        """Rebuild one session's indices from the store: one scan of concepts, one of edges."""
        record = store.get_session(session)
        dim = _contract_dim(record.embedding_contract if record else None)
        want_vectors = bool(store.has_vector_search)
        if want_vectors and store.vector_in_store:
            return cls._open_in_store(store, session, dim)
        graph = SessionGraph(session)
        rows = _RowCollector(dim)
        with _no_hugepage_advice():
            for concept in store.concepts(session):
                vec = concept.vector
                graph.adopt_concept(concept)  # drops concept.vector: it lives in the matrix
                if want_vectors and vec is not None:
                    rows.append(concept.id, vec)
            vectors = rows.build() if want_vectors else None
        graph.load_edges(store.edges(session))
        for interaction in store.interactions(session):
            graph.add_interaction(interaction.id)

        index = cls(
            session, graph, vectors, store.keyword_index(session), vector_search=want_vectors
        )
        index.skipped_vectors = rows.skipped
        if rows.skipped:
            log.warning(
                "session %s: %d stored vectors do not have the session's width %s; "
                "those concepts are searchable by keyword only",
                session,
                rows.skipped,
                rows.dim,
            )
        return index

    @classmethod
    def _open_in_store(cls, store: Store, session: str, dim: int | None) -> SessionIndex:
        """The graph from a scan without vectors; vectors stay in the store."""
        held = cast(VectorStore, store)  # vector_in_store: it answers the vector calls
        graph = SessionGraph(session)
        for concept in store.concepts(session, vectors=False):
            graph.adopt_concept(concept)
        graph.load_edges(store.edges(session))
        for interaction in store.interactions(session):
            graph.add_interaction(interaction.id)
        vectors = StoreVectors(held, session, dim) if dim is not None else None
        keywords = store.keyword_index(session)
        return cls(session, graph, vectors, keywords, vector_store=held)

    # -- mutation ---------------------------------------------------------------
    def ensure_vectors(self, dim: int) -> SessionVectors:
        """The session's matrix, created at ``dim`` if none exists yet.

        Raises ValueError if a matrix of another width already exists, or if this
        store has no vector search.
        """
        if not self.vector_search:
            raise ValueError("this store has no vector search")
        with self.lock:
            if self.vectors is None:
                self.vectors = (
                    VectorMatrix(dim)
                    if self.vector_store is None
                    else StoreVectors(self.vector_store, self.session, dim)
                )
            elif self.vectors.dim != dim:
                raise ValueError(
                    f"vector width {dim} does not match the session's {self.vectors.dim}"
                )
            return self.vectors

    def apply(self, batch: WriteBatch) -> None:
        """Mirror a batch the store has just committed.

        Vector widths are checked before anything changes, so a bad batch
        leaves the indices as they were.
        """
        # last one wins if a batch carries one id twice
        rows: dict[str, Vector] = (
            {c.id: c.vector for c in batch.concepts if c.vector is not None}
            if self.vector_search
            else {}
        )
        with self.lock:
            matrix: SessionVectors | None = None
            if rows:
                first = next(iter(rows.values()))
                dim = self.vectors.dim if self.vectors is not None else int(first.shape[-1])
                for node_id, vec in rows.items():
                    if vec.ndim != 1 or vec.shape[0] != dim:
                        raise ValueError(
                            f"vector of concept {node_id} has shape {vec.shape}; "
                            f"the session's width is {dim}"
                        )
                matrix = self.ensure_vectors(dim)
            if batch.interaction is not None:
                self.graph.add_interaction(batch.interaction.id)
            for concept in batch.concepts:
                self.graph.add_concept(concept)  # a copy without the vector
            if matrix is not None:
                matrix.add_many(list(rows), np.stack(list(rows.values())))
            for edge in batch.edges:
                self.graph.add_edge(edge)

    def remove_edges(self, edges: Iterable[tuple[str, str, EdgeType]]) -> int:
        """Drop edges (src, dst, edge_type) the store has deleted; how many the graph held.

        Their ends stay, with their vectors. One hold of the lock for the lot.
        """
        removed = 0
        with self.lock:
            for src, dst, edge_type in edges:
                if self.graph.remove_edge(src, dst, edge_type) is not None:
                    removed += 1
        return removed

    def remove_concepts(self, node_ids: Iterable[str]) -> None:
        """Drop concepts (and their edges and vectors) the store has deleted."""
        with self.lock:
            for node_id in node_ids:
                self.graph.remove_concept(node_id)
                if self.vectors is not None:
                    self.vectors.remove(node_id)
