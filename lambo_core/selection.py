"""Duplicate hits: the ``[selection] skip_redundant`` rule of lambo_recall (#181).

A hit repeating one already taken is skipped and named on the hit kept (``also``);
near texts that differ in an identifier, a number, an ordinal, a negation, an opposite or
the order of their shared words are different facts and never repeats (the rules live in
``matching``, shared with the merge guard), and a hit with a warning line of its own is never
skipped (spec: lambo_recall, Duplicate hits).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, NamedTuple

import numpy as np

from .matching import Facts, differ, facts_differ
from .model import EdgeType, Vector, short_id
from .text import visible_nfc

if TYPE_CHECKING:
    from .config import Config
    from .index.graph import SessionGraph

Signal = Literal["same_content", "semantic_edge", "cosine"]
SIGNAL_SAME_CONTENT: Final = "same_content"
SIGNAL_SEMANTIC_EDGE: Final = "semantic_edge"
SIGNAL_COSINE: Final = "cosine"

CHECKED_MAX = 20  # hits checked: min(CHECKED_MAX, CHECKED_PER_HIT * top_k)
CHECKED_PER_HIT = 4
ALSO_SHOWN = 3  # ids the label names before "+N more"

# A pair joined by one of these (either way) is never a repeat: the two must both show.
_NEVER_REPEAT_EDGES = (EdgeType.CONTRADICTS, EdgeType.SUPERSEDES_SUSPECTED)


def same_text_key(text: str) -> str:
    """``text`` with invisible characters dropped and whitespace runs made one space; case kept."""
    return " ".join(visible_nfc(text).split())


def repeat_forbidden(a: str, b: str) -> str | None:
    """Why texts ``a`` and ``b`` are never one hit repeated, or None.

    The merge guards (``matching.facts_differ``: identifiers, numbers, ordinals,
    negations, opposites), plus the order of their shared words: "A depends on B"
    and "B depends on A" are near in every signal and opposite in meaning.
    """
    a, b = same_text_key(a), same_text_key(b)
    if a == b:
        return None
    return facts_differ(a, b, word_order=True)


@dataclass(frozen=True)
class SelectionRules:
    """The ``[selection]`` settings (both off by default)."""

    skip_redundant: bool = False
    similar_signals: bool = False

    @classmethod
    def from_config(cls, config: Config) -> SelectionRules:
        return cls(
            skip_redundant=bool(config.get("selection.skip_redundant")),
            similar_signals=bool(config.get("selection.similar_signals")),
        )


@dataclass(frozen=True)
class Skipped:
    """A hit left out as a repeat of a kept one, and the signal that found it."""

    node_id: str
    signal: Signal


class Selection(NamedTuple):
    """The hits taken (rank order) and, per kept hit that replaced any, what it replaced."""

    taken: list[str]
    skipped: dict[str, list[Skipped]]


def checked_count(top_k: int) -> int:
    """How many of the ranked hits are checked for repeats: min(20, 4 * top_k)."""
    return min(CHECKED_MAX, CHECKED_PER_HIT * top_k)


def select_distinct(
    graph: SessionGraph,
    ranked_ids: Sequence[str],
    top_k: int,
    rules: SelectionRules,
    *,
    has_own_warning: Callable[[str], bool],
    merge_threshold: float | None = None,
    vector_of: Callable[[str], Vector | None] = lambda _node_id: None,
) -> Selection:
    """The first ``top_k`` distinct hits of ``ranked_ids`` (the caller holds the index lock).

    ``has_own_warning`` is true for a hit that must never be skipped: one with
    a warning line of its own, or one recall keeps past top_k for a warning.
    ``merge_threshold`` and ``vector_of`` (unit rows, so cosine is a dot
    product) serve the cosine signal, only with ``similar_signals``; a None
    threshold turns that signal off.

    A hit repeating several taken hits is named after the highest-ranked one;
    a skipped hit is not itself something later hits can repeat. Off, or with
    nothing repeated, the result is ``ranked_ids[:top_k]`` unchanged.
    """
    if not rules.skip_redundant or top_k <= 0:
        return Selection(list(ranked_ids[: max(top_k, 0)]), {})
    checker = _RepeatChecker(
        graph, rules.similar_signals, merge_threshold if rules.similar_signals else None, vector_of
    )
    bound = checked_count(top_k)
    taken: list[str] = []
    skipped: dict[str, list[Skipped]] = {}
    for rank, node_id in enumerate(ranked_ids):
        if len(taken) >= top_k:
            break
        if rank < bound and not has_own_warning(node_id):
            found = checker.first_repeated(node_id, taken)
            if found is not None:
                kept, signal = found
                skipped.setdefault(kept, []).append(Skipped(node_id, signal))
                continue
        taken.append(node_id)
    return Selection(taken, skipped)


class _RepeatChecker:
    """Pairwise repeat tests over one recall's hits, with each hit's text key computed once."""

    def __init__(
        self,
        graph: SessionGraph,
        similar: bool,
        threshold: float | None,
        vector_of: Callable[[str], Vector | None],
    ) -> None:
        self.graph = graph
        self.similar = similar
        self.threshold = threshold
        self.vector_of = vector_of
        self._keys: dict[str, str | None] = {}
        self._facts: dict[str, Facts] = {}  # read from each hit's key once, not once a pair
        self._vectors: dict[str, Vector | None] = {}

    def first_repeated(self, node_id: str, taken: Sequence[str]) -> tuple[str, Signal] | None:
        """The highest-ranked taken hit ``node_id`` repeats, and the signal, or None."""
        key = self._key(node_id)
        if key is None:
            return None
        for other in taken:
            other_key = self._key(other)
            if other_key is None:
                continue
            signal = self._signal(node_id, key, other, other_key)
            if signal is not None and not self._never_repeat(node_id, key, other, other_key):
                return other, signal
        return None

    def _key(self, node_id: str) -> str | None:
        if node_id not in self._keys:
            concept = self.graph.concept(node_id)
            self._keys[node_id] = None if concept is None else same_text_key(concept.content)
        return self._keys[node_id]

    def _vector(self, node_id: str) -> Vector | None:
        if node_id not in self._vectors:
            self._vectors[node_id] = self.vector_of(node_id)
        return self._vectors[node_id]

    def _signal(self, a: str, key_a: str, b: str, key_b: str) -> Signal | None:
        if key_a == key_b:
            return SIGNAL_SAME_CONTENT
        if not self.similar:
            return None
        graph = self.graph
        if graph.edge(a, b, EdgeType.SEMANTIC) or graph.edge(b, a, EdgeType.SEMANTIC):
            return SIGNAL_SEMANTIC_EDGE
        if self.threshold is None:
            return None
        vec_a, vec_b = self._vector(a), self._vector(b)
        if vec_a is None or vec_b is None or vec_a.shape != vec_b.shape:
            return None
        if float(np.dot(vec_a, vec_b)) >= self.threshold:
            return SIGNAL_COSINE
        return None

    def _never_repeat(self, a: str, key_a: str, b: str, key_b: str) -> bool:
        graph = self.graph
        for edge_type in _NEVER_REPEAT_EDGES:
            if graph.edge(a, b, edge_type) or graph.edge(b, a, edge_type):
                return True
        if key_a == key_b:
            return False  # the same text: nothing in it can differ (repeat_forbidden's rule)
        return (
            differ(self._facts_of(a, key_a), self._facts_of(b, key_b), word_order=True) is not None
        )

    def _facts_of(self, node_id: str, key: str) -> Facts:
        if node_id not in self._facts:
            self._facts[node_id] = Facts.of(key)
        return self._facts[node_id]


def also_label(skipped: Sequence[Skipped]) -> str:
    """The label's also-part: ``also 82c3dcb0, 1a2b3c4d, 5e6f7a8b, +2 more``; "" for none."""
    if not skipped:
        return ""
    shown = [short_id(s.node_id) for s in skipped[:ALSO_SHOWN]]
    more = len(skipped) - len(shown)
    if more > 0:
        shown.append(f"+{more} more")
    return "also " + ", ".join(shown)


def skipped_structured(skipped: Sequence[Skipped]) -> list[dict[str, str]]:
    """structuredContent's ``skipped_redundant``: each skipped hit's node_id and signal."""
    return [{"node_id": s.node_id, "signal": s.signal} for s in skipped]
