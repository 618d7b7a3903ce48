"""The embedder seen from the rest of lambo: a protocol, its contract, a query cache.

An ``Embedder`` turns text into float32 unit vectors; one whose ``modalities`` are
``["text", "image"]`` (a two-tower model, ``two_tower.py``) also turns images into
vectors of the same space, through ``embed_images`` (``embeds_images`` says which). Everything that
compares vectors (semantic merge, the vector leg of recall) holds the
embedder to its ``contract``, ``{kind, model, dim}``: two vectors are
comparable only when their contracts are equal, so a session is stamped with
the contract at its first write and a serve with another one refuses it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Protocol, TypedDict, TypeGuard, runtime_checkable

import numpy as np

from ..model import Vector

# The merge threshold of a model nobody calibrated: high, because a false
# merge loses a concept while a missed one only leaves a near-duplicate.
DEFAULT_MERGE_THRESHOLD = 0.85

# Bounded so a long session of distinct queries cannot grow memory without end:
# 1024 entries x 1024 float32 is 4 MiB for bge-m3.
QUERY_CACHE_SIZE = 1024


class EmbeddingContract(TypedDict):
    """The embedding space vectors are in. ``model`` is null for the default model."""

    kind: str
    model: str | None
    dim: int


def make_contract(kind: str, model: str | None, dim: int) -> EmbeddingContract:
    return {"kind": kind, "model": model, "dim": int(dim)}


@runtime_checkable
class Embedder(Protocol):
    """Text in, unit-length float32 vectors out."""

    @property
    def contract(self) -> EmbeddingContract:
        """``{kind, model, dim}``; a fresh dict each call, so callers may keep or change it."""
        ...

    @property
    def modalities(self) -> list[str]:
        """What the embedder embeds: ``["text"]`` or ``["text", "image"]``."""
        ...

    @property
    def dim(self) -> int: ...

    @property
    def merge_threshold(self) -> float:
        """Cosine at which a new concept merges into an existing one, calibrated per model."""
        ...

    def embed(self, texts: Sequence[str]) -> Vector:
        """A ``[len(texts), dim]`` float32 matrix whose rows have unit L2 norm, in input order."""
        ...

    def embed_query(self, text: str) -> Vector:
        """One ``[dim]`` unit vector, served from a bounded cache; read-only."""
        ...


@runtime_checkable
class ImageEmbedder(Embedder, Protocol):
    """An embedder whose modalities include ``"image"``."""

    def embed_images(self, images: Sequence[bytes]) -> Vector:
        """A ``[len(images), dim]`` float32 matrix of unit rows, in input order, from PNG,
        JPEG or WebP bytes already checked by ``image_input.check_image``."""
        ...


def embeds_images(embedder: object) -> TypeGuard[ImageEmbedder]:
    """Whether ``embedder`` embeds images: it says so and has ``embed_images`` (a bool)."""
    modalities = getattr(embedder, "modalities", None)
    return (
        isinstance(modalities, list | tuple)
        and "image" in modalities
        and callable(getattr(embedder, "embed_images", None))
    )


def normalize_rows(matrix: Vector) -> Vector:
    """L2-normalize each row as float32; an all-zero row stays zero instead of turning NaN."""
    out = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    result: Vector = (out / np.maximum(norms, np.float32(1e-12))).astype(np.float32, copy=False)
    return result


class QueryCache:
    """A thread-safe LRU of query text -> vector.

    ``embed_one`` runs outside the lock, so a slow embedding never blocks hits
    for other texts; two threads missing the same text may both compute it,
    which is harmless. Cached vectors are made read-only because every caller
    shares them. A serve keeps one per session (the spec says a text query's
    embedding is cached per session); an embedder keeps one for itself.
    """

    def __init__(self, embed_one: Callable[[str], Vector], maxsize: int = QUERY_CACHE_SIZE) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self._embed_one = embed_one
        self._maxsize = maxsize
        self._entries: OrderedDict[str, Vector] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def maxsize(self) -> int:
        return self._maxsize

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def get(self, text: str) -> Vector:
        with self._lock:
            found = self._entries.get(text)
            if found is not None:
                self._entries.move_to_end(text)
                self.hits += 1
                return found
            self.misses += 1
        vector = np.array(self._embed_one(text), dtype=np.float32, copy=True)
        vector.setflags(write=False)
        with self._lock:
            self._entries[text] = vector
            self._entries.move_to_end(text)
            while len(self._entries) > self._maxsize:
                self._entries.popitem(last=False)
        return vector

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
