"""The graph's by-path index of repository-scoped concepts (spec: "Repository-scoped paths").

A scoped concept is found by its repository and its path's key (``repo_scope.ScopedKey``), so
``src/main.rs:12`` and ``src/main.rs`` of one repository land on one concept, and by the path
alone, across repositories, for the reads that must not pick one quietly (an inspect focus, a
dependency question). Unscoped concepts are not in it: a session that never saw a repo_scope
keeps this index empty, and every lookup through it costs one dict miss.
"""

from __future__ import annotations

from ..model import Concept
from ..repo_scope import ScopedKey, concept_scoped_key
from .names import MultiIndex, multi_add, multi_get, multi_remove


class PathIndex:
    """(repository, path key) -> node ids, and path key -> node ids across repositories."""

    def __init__(self) -> None:
        self._by_scoped: dict[ScopedKey, str | dict[str, None]] = {}
        self._by_path: MultiIndex = {}

    def __len__(self) -> int:
        return len(self._by_scoped)

    def add(self, concept: Concept) -> None:
        key = concept_scoped_key(concept)
        if key is None:
            return
        held = self._by_scoped.get(key)
        if held is None or held == concept.id:
            self._by_scoped[key] = concept.id
        elif isinstance(held, str):
            self._by_scoped[key] = {held: None, concept.id: None}
        else:
            held[concept.id] = None
        multi_add(self._by_path, key.path, concept.id)

    def remove(self, concept: Concept) -> None:
        key = concept_scoped_key(concept)
        if key is None:
            return
        held = self._by_scoped.get(key)
        if isinstance(held, dict):
            held.pop(concept.id, None)
            if len(held) == 1:
                self._by_scoped[key] = next(iter(held))
        elif held == concept.id:
            del self._by_scoped[key]
        multi_remove(self._by_path, key.path, concept.id)

    def ids(self, key: ScopedKey) -> list[str]:
        """The concepts of ``key.repo`` whose path is ``key.path`` (one, unless a store
        written by hand holds two)."""
        held = self._by_scoped.get(key)
        if held is None:
            return []
        return [held] if isinstance(held, str) else list(held)

    def ids_with_path(self, path: str) -> list[str]:
        """Every scoped concept whose path key is ``path``, in any repository."""
        return multi_get(self._by_path, path)
