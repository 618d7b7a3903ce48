"""Possibly superseded, not declared: the rule that flags a newer concept as maybe
replacing an older one (spec: lambo_recall, "Possibly superseded, not declared").

The write path flags each new concept against its nearest neighbours
(``writes.builder``); ``lambo canon suspected`` runs the same rule over a whole store
(``suspected_pairs``). Both ask ``flags`` about a pair.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .index.graph import SessionGraph
from .index.vectors import VectorMatrix
from .matching import (
    IDENTIFIERS_DIFFER,
    MERGE_CANDIDATES,
    NUMBERS_DIFFER,
    ORDINALS_DIFFER,
    merge_forbidden,
)
from .model import Concept, ConceptType, EdgeType
from .text import has_image_suffix

# The types a concept may replace (and be replaced) within; replacement candidates too.
REPLACEABLE_TYPES = frozenset({ConceptType.LOGIC, ConceptType.CONSTRAINT, ConceptType.OBSERVATION})
# Only a merge refused for these reasons can flag a possible supersession (#198).
# Number words and ordinals count as numbers: "ninety minutes" for "one hour", or "its fourth
# week" for "its third week", is one value changed.
SUPERSEDE_REASONS = frozenset({IDENTIFIERS_DIFFER, NUMBERS_DIFFER, ORDINALS_DIFFER})
SCAN_CHUNK = 1024  # rows per block of the all-pairs similarity scan


@dataclass(frozen=True)
class Side:
    """One concept of a pair as the rule reads it."""

    node_id: str
    content: str
    about_time: float


def comparable(ctype: ConceptType, other: Concept) -> bool:
    """Whether a concept of type ``ctype`` may replace ``other`` or be replaced by it: the
    same replaceable type, no repository scope, not an image."""
    return (
        ctype in REPLACEABLE_TYPES
        and other.concept_type is ctype
        and other.repo_scope is None
        and not has_image_suffix(other.content)
    )


def flags(a: Side, b: Side, linked: Callable[[str, str], bool]) -> tuple[Side, Side] | None:
    """``(newer, older)`` when the rule flags the pair of comparable concepts, else None.

    Flagged: dated apart, a merge refused because an identifier, a number or an ordinal
    differs,
    no against or depends_on between them (``linked``), and the two texts differ in
    exactly one value after the predicate.
    """
    if a.about_time == b.about_time:
        return None
    if merge_forbidden(a.content, b.content) not in SUPERSEDE_REASONS:
        return None
    if linked(a.node_id, b.node_id):
        return None
    newer, older = (a, b) if a.about_time > b.about_time else (b, a)
    if not one_value_changed(newer.content, older.content):
        return None
    return newer, older


# Words that end a fact's subject: copulas, auxiliaries and modals, and the verbs agent facts
# most often state a value with. Deliberately short and readable; a text with none of them
# falls back to "the first word, or a determiner and the word after it".
_PREDICATE_WORDS = frozenset(
    " ".join(
        (
            "is are was were be been being am",
            "has have had does do did will would shall should can could may might must",
            "uses use used listens listen returns return equals equal runs run takes take",
            "needs need requires require expires expire defaults default points point lives",
            "holds stores sends calls reads writes waits retries caps limits allows binds",
            "serves starts stops costs lasts contains depends belongs means becomes became",
            "stays remains goes gets sets keeps shows targets ships supports handles expects",
            "accepts rejects refuses fails passes applies changed changes moved moves lands",
            "flushes logs prints emits builds deploys pins bumps",
            "passed failed ran took returned listened started stopped expired timed",
        )
    ).split()
)
_SEPARATORS = frozenset({":", "=", "->", "=>", "→", "—", "–", "-"})
_DETERMINERS = frozenset(
    " ".join(("the a an this that these those", "our its their my your his her each every")).split()
)


def _tokens(text: str) -> list[str]:
    """Whitespace tokens after NFC, with ``key=value`` split after its ``=`` (``timeout=``,
    ``30``), so a value glued to its key is a token of its own."""
    out: list[str] = []
    for token in unicodedata.normalize("NFC", text).split():
        key, eq, value = token.partition("=")
        if eq and key and value:
            out.extend((key + eq, value))
        else:
            out.append(token)
    return out


def subject_length(tokens: list[str]) -> int:
    """How many leading tokens are the subject: everything before the predicate.

    The predicate starts at the first copula, auxiliary or listed verb (``is``, ``has``,
    ``listens``, ``returns`` ...), which is not part of the subject, or just after the first
    token ending in ``:`` or ``=`` or a separator token (``:``, ``=``, ``->``), which is
    (``verdict:`` keys the value after it). With none, the subject is the first token, or a
    determiner and the token after it, and the next token too when it holds a digit (a name
    and its number: "build 7 ...").
    """
    for i, token in enumerate(tokens):
        if token in _SEPARATORS or (len(token) > 1 and token[-1] in ":="):
            return i + 1
        if token.casefold() in _PREDICATE_WORDS:
            return i
    length = 2 if len(tokens) > 2 and tokens[0].casefold() in _DETERMINERS else 1
    if length < len(tokens) - 1 and any(ch.isdigit() for ch in tokens[length]):
        length += 1  # a name and its number: "build 7 ...", "the job 12 ..."
    return length


def one_value_changed(newer: str, older: str) -> bool:
    """Whether two texts differ in exactly one value after the predicate (#198).

    A deliberately small rule: tokens as ``_tokens`` reads them; the texts must have the
    same number of tokens and differ at exactly one position, and that position must be
    past the subject of both (``subject_length``). "the embedder listens on port 8080" and
    "... port 8081" qualify; "J1 round-1 verdict: pass" / "J2 round-1 verdict: pass" and
    "the J1 round-1 verdict is pass" / "the J2 ..." (a change before the predicate: a
    different subject, not a new value) and two values changed at once do not. Tokens
    compare exactly (case counts, as it does for identifiers). The merge guard
    (identifiers or numbers differ) decides that the changed token is a value.
    """
    a, b = _tokens(newer), _tokens(older)
    if len(a) != len(b) or len(a) < 2:
        return False
    diff = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
    if len(diff) != 1:
        return False
    return diff[0] >= max(subject_length(a), subject_length(b))


@dataclass(frozen=True)
class SuspectedPair:
    """``newer`` may replace ``older`` (#198), by Lambo's reading of the two texts."""

    newer: Concept
    older: Concept
    cosine: float
    recorded: bool  # the store already holds the SUPERSEDES_SUSPECTED edge

    def as_dict(self) -> dict[str, Any]:
        return {
            "newer": self.newer.id,
            "older": self.older.id,
            "newer_content": self.newer.content,
            "older_content": self.older.content,
            "concept_type": self.newer.concept_type.label,
            "cosine": round(self.cosine, 4),
            "recorded": self.recorded,
        }


def linked_either_way(graph: SessionGraph, a: str, b: str) -> bool:
    """An against or depends_on between ``a`` and ``b``, either way."""
    return any(
        graph.edge(src, dst, etype) is not None
        for etype in (EdgeType.DEPENDENCY, EdgeType.CONTRADICTS)
        for src, dst in ((a, b), (b, a))
    )


def suspected_pairs(
    graph: SessionGraph, vectors: VectorMatrix | None, threshold: float
) -> list[SuspectedPair]:
    """Every pair the write-time possibly-superseded rule flags, newest replacement first."""
    if vectors is None or len(vectors) == 0:
        return []
    ids = vectors.ids()
    rows = vectors.rows()
    found: dict[tuple[str, str], SuspectedPair] = {}
    by_type: dict[Any, list[int]] = {}
    for r, node_id in enumerate(ids):
        concept = graph.concept(node_id)
        if concept is not None and concept.concept_type in REPLACEABLE_TYPES:
            by_type.setdefault(concept.concept_type, []).append(r)
    for members in by_type.values():
        block = rows[members]
        k = min(MERGE_CANDIDATES + 1, len(members))  # +1: a row's nearest is itself
        for start in range(0, len(members), SCAN_CHUNK):
            sims = block[start : start + SCAN_CHUNK] @ block.T
            top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
            for i, near in enumerate(top):
                a = graph.concept(ids[members[start + i]])
                if a is None:
                    continue
                for j in near.tolist():
                    cosine = float(sims[i, j])
                    b = graph.concept(ids[members[j]])
                    if b is None or b.id == a.id or cosine < threshold:
                        continue
                    pair = _judge(graph, a, b, cosine)
                    if pair is not None:
                        found.setdefault((pair.newer.id, pair.older.id), pair)
    return sorted(
        found.values(), key=lambda p: (-p.newer.about_time, p.newer.id, -p.cosine, p.older.id)
    )


def _judge(graph: SessionGraph, a: Concept, b: Concept, cosine: float) -> SuspectedPair | None:
    if not (comparable(a.concept_type, b) and comparable(b.concept_type, a)):
        return None
    flagged = flags(_side(a), _side(b), lambda x, y: linked_either_way(graph, x, y))
    if flagged is None:
        return None
    newer, older = (a, b) if flagged[0].node_id == a.id else (b, a)
    recorded = graph.edge(newer.id, older.id, EdgeType.SUPERSEDES_SUSPECTED) is not None
    return SuspectedPair(newer, older, cosine, recorded)


def _side(concept: Concept) -> Side:
    return Side(concept.id, concept.content, concept.about_time)
