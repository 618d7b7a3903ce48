"""Dependency questions: "what depends on X", "blast radius of X", "safe to delete X".

Finds the concept such a question names so recall can answer with its direct
dependents (spec: lambo_recall, Dependency questions).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..model import ConceptType, short_id
from ..text import fold_case, show_safely
from .legs import FUNCTION_WORDS

if TYPE_CHECKING:
    from ..index.graph import SessionGraph


# Phrases that ask for a concept's dependents, as folded token sequences.
DEPENDENCY_MARKERS: tuple[tuple[str, ...], ...] = tuple(
    tuple(phrase.split())
    for phrase in (
        "what depends on",
        "what depend on",
        "who depends on",
        "which depend on",
        "which depends on",
        "anything depend on",
        "anything depends on",
        "everything that depends on",
        "dependents of",
        "dependent on",
        "blast radius of",
        "blast radius",
        "safe to delete",
        "safe to remove",
        "safe to drop",
        "what uses",
        "who uses",
        "what relies on",
        "who relies on",
        "what breaks if",
        "what would break if",
    )
)
# Every marker phrase contains one of these (a quick test before tokenizing).
_MARKER_HINTS = ("depend", "blast", "safe to", "uses", "relies", "break")
assert all(any(h in " ".join(m) for h in _MARKER_HINTS) for m in DEPENDENCY_MARKERS)
MAX_NAME_TOKENS = 64  # longest name (in tokens) looked for in a question
MAX_OCCURRENCES = 256  # a candidate named more often falls through to ordinary recall
SECURITY_GROUP = ("security", "group")
_SG_ID = re.compile(r"(?<![\w-])sg-[\w-]+")


@dataclass(frozen=True)
class _Token:
    start: int  # offsets into the NFC query
    end: int
    folded: str
    word: bool
    space_before: bool


@dataclass(frozen=True)
class _Occurrence:
    node_id: str
    first: int  # token indices [first, last)
    last: int
    key: str


@dataclass(frozen=True)
class DependencyAnchor:
    node_id: str
    dependents: list[str]
    how: str  # "named" or "security group"


def _is_word_char(ch: str) -> bool:
    return ch == "_" or unicodedata.category(ch)[0] in "LNM"


_DROPPED_INVISIBLES = frozenset("\u034f\u200c\u200d") | {chr(c) for c in range(0xFE00, 0xFE10)}


def question_tokens(text: str) -> list[_Token]:
    """Words (letters, digits, marks, ``_``; a hyphen between word characters joins) and
    single punctuation characters, with offsets into ``text`` and their folded form."""
    tokens: list[_Token] = []
    i, n = 0, len(text)
    space = False
    while i < n:
        ch = text[i]
        if ch.isspace():
            space = True
            i += 1
            continue
        if ch in _DROPPED_INVISIBLES:
            i += 1
            continue
        start = i
        if _is_word_char(ch):
            i += 1
            while i < n:
                c = text[i]
                joins = c == "-" and i + 1 < n and _is_word_char(text[i + 1])
                if _is_word_char(c) or c in _DROPPED_INVISIBLES or joins:
                    i += 1
                else:
                    break
            word = True
        else:
            i += 1
            word = False
        raw = "".join(c for c in text[start:i] if c not in _DROPPED_INVISIBLES)
        folded = unicodedata.normalize("NFC", raw.casefold())
        tokens.append(_Token(start, i, folded, word, space and bool(tokens)))
        space = False
    return tokens


def _span_key(tokens: Sequence[_Token], first: int, last: int) -> str:
    parts = [tokens[first].folded]
    for t in tokens[first + 1 : last]:
        if t.space_before:
            parts.append(" ")
        parts.append(t.folded)
    return "".join(parts)


def _markers(tokens: Sequence[_Token]) -> list[tuple[int, int]]:
    folded = [t.folded for t in tokens]
    found: list[tuple[int, int]] = []
    for i in range(len(folded)):
        for phrase in DEPENDENCY_MARKERS:
            if tuple(folded[i : i + len(phrase)]) == phrase:
                found.append((i, i + len(phrase)))
    return found


def _anchorable(occ: _Occurrence, tokens: Sequence[_Token], query: str) -> bool:
    """Not a function-word-only name (unless written as an uppercase acronym)."""
    words = [t for t in tokens[occ.first : occ.last] if t.word]
    if not words:
        return False
    if all(t.folded in FUNCTION_WORDS for t in words):
        original = query[tokens[occ.first].start : tokens[occ.last - 1].end]
        letters = [c for c in original if c.isalpha()]
        return len(letters) >= 2 and all(c.isupper() for c in letters)
    return True


def find_dependency_anchor(graph: SessionGraph, query: str) -> DependencyAnchor | None:
    """The concept a dependency question asks about, or None for an ordinary query.

    The caller holds the index lock. Rules (spec, "Dependency questions"):
    the question has a marker phrase; a name is a concept's whole text as
    whole words, case ignored after NFC (tokens make the word edges: a hyphen
    between word characters joins, punctuation is its own edge); it names a
    concept with dependents; a name inside a longer name is skipped unless the
    longer one overlaps the marker; marker phrases and function-word-only names
    do not anchor (an uppercase acronym written uppercase does); the name
    starting nearest after a marker wins, then Entity/Resource type, then
    length. A question naming nothing but "security group" takes the security
    group with the most dependents.
    """
    folded = query.casefold()
    if not any(hint in folded for hint in _MARKER_HINTS):
        return None  # no marker phrase can be in it: skip the tokenizer
    text = unicodedata.normalize("NFC", query)
    tokens = question_tokens(text)
    markers = _markers(tokens)
    if not markers:
        return None
    marker_tokens = {i for a, b in markers for i in range(a, b)}
    occurrences: list[_Occurrence] = []
    per_concept: Counter[str] = Counter()
    for first in range(len(tokens)):
        for last in range(first + 1, min(len(tokens), first + MAX_NAME_TOKENS) + 1):
            key = _span_key(tokens, first, last)
            for named in graph.concepts_with_folded_key(key):
                occurrences.append(_Occurrence(named.id, first, last, key))
                per_concept[named.id] += 1
    if any(n > MAX_OCCURRENCES for n in per_concept.values()):
        return None

    def inside_marker(occ: _Occurrence) -> bool:
        return all(i in marker_tokens for i in range(occ.first, occ.last))

    def overlaps_marker(occ: _Occurrence) -> bool:
        return any(i in marker_tokens for i in range(occ.first, occ.last))

    names = [o for o in occurrences if not inside_marker(o) and _anchorable(o, tokens, text)]
    hiders = [o for o in names if not overlaps_marker(o)]
    visible = [
        o
        for o in names
        if not any(
            h.first <= o.first and o.last <= h.last and (h.last - h.first) > (o.last - o.first)
            for h in hiders
        )
    ]
    best = _nearest_named(graph, visible, markers, len(tokens))
    if best is not None:
        return best
    singular = [t.folded.removesuffix("s") for t in tokens]
    says_sg = any(tuple(singular[i : i + 2]) == SECURITY_GROUP for i in range(len(singular) - 1))
    return _security_group(graph) if says_sg else None


def _nearest_named(
    graph: SessionGraph,
    visible: Sequence[_Occurrence],
    markers: Sequence[tuple[int, int]],
    token_count: int,
) -> DependencyAnchor | None:
    """The name with dependents nearest after a marker, then Entity/Resource, then longest."""
    best: tuple[tuple[int, int, int, int, str], str, list[str]] | None = None
    for occ in visible:
        dependents = graph.dependents(occ.node_id)
        if not dependents:
            continue
        concept = graph.concept(occ.node_id)
        if concept is None:
            continue
        after = [occ.first - b for a, b in markers if b <= occ.first]
        before = [a - occ.last for a, b in markers if occ.last <= a]
        if after:
            group, distance = 0, min(after)
        else:
            group, distance = 1, min(before, default=token_count)
        kind = 0 if concept.concept_type in (ConceptType.ENTITY, ConceptType.RESOURCE) else 1
        rank = (group, distance, kind, -len(occ.key), occ.node_id)
        if best is None or rank < best[0]:
            best = (rank, occ.node_id, dependents)
    return DependencyAnchor(best[1], best[2], "named") if best is not None else None


def _security_group(graph: SessionGraph) -> DependencyAnchor | None:
    best: tuple[tuple[int, int, str], str, list[str]] | None = None
    for concept in graph.iter_concepts():
        key = fold_case(concept.canonical_key)
        if not (_says_security_group(key) or _SG_ID.search(key)):
            continue
        dependents = graph.dependents(concept.id)
        if not dependents:
            continue
        kind = 0 if concept.concept_type in (ConceptType.ENTITY, ConceptType.RESOURCE) else 1
        rank = (-len(dependents), kind, concept.id)
        if best is None or rank < best[0]:
            best = (rank, concept.id, dependents)
    if best is None:
        return None
    return DependencyAnchor(best[1], best[2], "security group")


def _says_security_group(key: str) -> bool:
    folded = [t.folded.removesuffix("s") for t in question_tokens(key)]
    return any(tuple(folded[i : i + 2]) == SECURITY_GROUP for i in range(len(folded) - 1))


def dependency_header(anchor_content: str, anchor_id: str, total: int, shown: int) -> str:
    noun = "concept depends" if total == 1 else "concepts depend"
    line = (
        f'Answered by graph traversal: {total} {noun} on "{show_safely(anchor_content, 80)}" '
        f"(id {short_id(anchor_id)})"
    )
    if shown < total:
        line += f"; the {shown} ranked highest are shown"
    return line + "."
