"""Dependency questions: "what depends on X", "blast radius of X", "safe to delete X".

Finds the concept such a question asks about so recall can answer with its direct
dependents (spec: lambo_recall, Dependency questions). Only phrasings whose direction
is plain count: "does the API depend on redis" asks about the API, not redis's dependents.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from ..model import ConceptType, short_id
from ..text import fold_case, show_safely
from .legs import FUNCTION_WORDS

if TYPE_CHECKING:
    from ..index.graph import SessionGraph


# How a marker phrase says whose dependents are asked for (see _target).
AFTER = "after"  # X follows the phrase: "dependents of X"
ASKED_BY_QUESTION_WORD = "question word"  # "what/which ... depends on X": a question-word subject
SAFE_TO_DELETE = "safe to delete"  # "is it safe to delete X", or "is X safe to delete"
BLAST_RADIUS = "blast radius"  # "blast radius for/of/on/in/if/: X", or "X's blast radius"

# Phrases that ask for a concept's dependents, as folded token sequences, with how each
# names X. A verb ("A depends on B", "A uses B") asks about B's dependents only when its
# subject is a question word; otherwise A may be the subject and the question is about A.
_READINGS: dict[str, str] = {
    "dependents of": AFTER,
    "blast radius": BLAST_RADIUS,
    "safe to delete": SAFE_TO_DELETE,
    "safe to remove": SAFE_TO_DELETE,
    "safe to drop": SAFE_TO_DELETE,
    "depends on": ASKED_BY_QUESTION_WORD,
    "depend on": ASKED_BY_QUESTION_WORD,
    "dependent on": ASKED_BY_QUESTION_WORD,
    "relies on": ASKED_BY_QUESTION_WORD,
    "rely on": ASKED_BY_QUESTION_WORD,
    "uses": ASKED_BY_QUESTION_WORD,
    "use": ASKED_BY_QUESTION_WORD,
    "breaks if": ASKED_BY_QUESTION_WORD,
    "break if": ASKED_BY_QUESTION_WORD,
}
DEPENDENCY_MARKERS: tuple[tuple[str, ...], ...] = tuple(tuple(p.split()) for p in _READINGS)
_READING_OF = {tuple(p.split()): reading for p, reading in _READINGS.items()}
# By first word, longest first (a longer phrase wins over one it starts with).
_BY_FIRST_WORD: Mapping[str, tuple[tuple[str, ...], ...]] = MappingProxyType(
    {
        first: tuple(sorted((m for m in DEPENDENCY_MARKERS if m[0] == first), key=len)[::-1])
        for first in {m[0] for m in DEPENDENCY_MARKERS}
    }
)
# Every marker phrase matches this (a quick test before tokenizing): "use" only as a
# whole word, so "user schema" does not cost a tokenizer pass.
_MARKER_HINT = re.compile(r"depend|blast|safe\s+to|\buses?\b|\brel(?:y|ies)\b|\bbreaks?\b")
assert all(_MARKER_HINT.search(" ".join(m)) for m in DEPENDENCY_MARKERS)


def _word_set(words: str) -> frozenset[str]:
    return frozenset(words.split())


# The subject of a verb marker: "what", "which handlers", "which version of the API",
# "anything that", "what else would": a question word, up to two words, "of" and up to two
# more, a relative pronoun, an auxiliary, adverbs ("does the API depend" has no question word;
# "what does the API depend on" asks for the API's dependencies: "the" cannot follow "what").
_QUESTION_SUBJECTS = _word_set(
    "what which who whatever whichever anything everything something nothing "
    "anyone anybody everyone everybody any"
)
_ADVERBS = _word_set("else still also ever now currently actually really directly even")
_AUXILIARIES = _word_set(
    "is are was were be would will could can might may should must does do did"
)
_RELATIVES = frozenset(("that", "which", "who"))
# Verbs that introduce a question word rather than a relative pronoun: "list which ..."
_INTRODUCERS = _word_set("list show tell find know see check wonder ask name explain")
_DETERMINERS = _word_set("the a an these those this our my your its their all any")
_SUBJECT_WORDS_MAX = 2  # "which version", "what other services"
_SUBJECT_TOKENS_MAX = 10  # how far back a verb's question word is looked for
# "is X safe to delete", "would X be safe to delete": the words that open the slot X fills.
_SLOT_OPENERS = frozenset(("is", "are", "would"))
_SLOT_DETERMINERS = _word_set("the a an our my your their")
_APOSTROPHES = frozenset(("'", "\u2019"))
# "blast radius for X", "blast radius: X": the word (or colon) after the phrase that puts X after.
_BLAST_RADIUS_LINKS = frozenset(("for", "of", "on", "in", "if", ":"))
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
_DROPPED_BY_TOKENS = dict.fromkeys(map(ord, _DROPPED_INVISIBLES))


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


@dataclass(frozen=True)
class _Target:
    """Where the concept a marker asks about stands, in token indices."""

    first: int  # the name starts here (or, with after, anywhere from here on)
    last: int | None  # the name ends exactly here; None: anywhere
    after: bool

    def distance(self, occ: _Occurrence) -> int | None:
        """How far ``occ`` starts past the marker, or None if it is not where X stands."""
        if self.after:
            return occ.first - self.first if occ.first >= self.first else None
        if occ.last != self.last:
            return None
        return 0 if self.first < 0 or occ.first == self.first else None


@dataclass(frozen=True)
class _Marker:
    first: int  # token indices [first, last)
    last: int
    target: _Target | None  # None: the phrase is there but does not ask for X's dependents


def _markers(tokens: Sequence[_Token]) -> list[_Marker]:
    """Every marker phrase (the longest at each place), with where its X stands."""
    folded = [t.folded for t in tokens]
    found: list[_Marker] = []
    for i in range(len(folded)):
        for phrase in _BY_FIRST_WORD.get(folded[i], ()):
            if tuple(folded[i : i + len(phrase)]) == phrase:
                last = i + len(phrase)
                found.append(_Marker(i, last, _target(tokens, i, last, _READING_OF[phrase])))
                break
    return found


def _target(tokens: Sequence[_Token], first: int, last: int, reading: str) -> _Target | None:
    if reading == AFTER:
        return _Target(last, None, after=True)
    if reading == ASKED_BY_QUESTION_WORD:
        return _Target(last, None, after=True) if _question_subject(tokens, first) else None
    if reading == SAFE_TO_DELETE:
        return _safe_to_delete(tokens, first, last)
    return _blast_radius(tokens, first, last)


def _question_subject(tokens: Sequence[_Token], verb: int) -> bool:
    """The verb at ``verb`` has a question word for its subject (see _QUESTION_SUBJECTS)."""
    for start in range(verb - 1, max(-1, verb - 1 - _SUBJECT_TOKENS_MAX), -1):
        token = tokens[start]
        if not token.word:
            return False  # a clause or a name with punctuation: not read
        asks = token.folded in _QUESTION_SUBJECTS and not _relative(tokens, start)
        if asks and _subject_words(tokens, start + 1, verb):
            return True
    return False


def _relative(tokens: Sequence[_Token], at: int) -> bool:
    """ "which"/"who" right after a noun ("the API which depends on redis") opens a relative
    clause about that noun: not a question word."""
    if tokens[at].folded not in _RELATIVES or at == 0:
        return False
    before = tokens[at - 1]
    return before.word and before.folded not in FUNCTION_WORDS | _INTRODUCERS


def _subject_words(tokens: Sequence[_Token], first: int, last: int) -> bool:
    """Whether tokens [first, last) may stand between a question word and its verb."""
    words = [t.folded for t in tokens[first:last]]
    while words and words[-1] in _ADVERBS:
        words.pop()
    if words and words[-1] in _AUXILIARIES:
        words.pop()
    while words and words[-1] in _ADVERBS:
        words.pop()
    if words and words[-1] in _RELATIVES:
        words.pop()
    if "of" in words:  # "which version of the API", "which of the handlers"
        cut = words.index("of")
        head, tail = words[:cut], words[cut + 1 :]
        if tail and tail[0] in _DETERMINERS:
            tail = tail[1:]
        return _plain_words(head, 0) and _plain_words(tail, 1)
    return _plain_words(words, 0)


def _plain_words(words: Sequence[str], at_least: int) -> bool:
    """Up to two words that are not function words ("other" may be one)."""
    if not at_least <= len(words) <= _SUBJECT_WORDS_MAX:
        return False
    return all(w == "other" or w not in FUNCTION_WORDS for w in words)


def _safe_to_delete(tokens: Sequence[_Token], first: int, last: int) -> _Target | None:
    """ "(is) it safe to delete X" or a question's opening: X after; "is X safe to delete": X."""
    end = first
    while end > 0 and tokens[end - 1].folded in _ADVERBS:
        end -= 1
    if end == 0 or not tokens[end - 1].word or _ends_with_it(tokens[:end]):
        return _Target(last, None, after=True)
    if tokens[end - 1].folded == "be":
        end -= 1  # "would the API be safe to delete"
    for opener in range(end - 1, max(-1, end - 1 - MAX_NAME_TOKENS), -1):
        if tokens[opener].folded in _SLOT_OPENERS:
            start = opener + 1
            if start < end and tokens[start].folded in _SLOT_DETERMINERS:
                start += 1
            return _Target(start, end, after=False) if start < end else None
    return None


def _ends_with_it(tokens: Sequence[_Token]) -> bool:
    """ "... it", "... it be", "... it's": the subject is the dummy "it", X comes after."""
    folded = [t.folded for t in tokens[-3:]]
    if folded[-1:] == ["it"] or folded[-2:] == ["it", "be"]:
        return True
    return len(folded) == 3 and folded[0] == "it" and folded[1] in _APOSTROPHES and folded[2] == "s"


def _blast_radius(tokens: Sequence[_Token], first: int, last: int) -> _Target | None:
    """ "blast radius for/of/on/in/if/: X": X after. "X's blast radius", "X blast radius": X
    ends just before, read only with no plain word after ("redis blast radius calculator"
    names a calculator, not redis's blast radius). A colon after a plain word is a label:
    "user schema blast radius: how big?" asks about the user schema."""
    end = first  # where the possessor X would end: before "'s" if there is one
    if end >= 2 and tokens[end - 1].folded == "s" and tokens[end - 2].folded in _APOSTROPHES:
        end -= 2
    following = tokens[last] if last < len(tokens) else None
    if following is not None and following.folded in _BLAST_RADIUS_LINKS:
        if not (following.folded == ":" and end > 0 and _plain(tokens[end - 1])):
            return _Target(last + 1, None, after=True)
    elif following is not None and _plain(following):
        return None
    return _Target(-1, end, after=False) if end > 0 else None


def _plain(token: _Token) -> bool:
    return token.word and token.folded not in FUNCTION_WORDS


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
    the question has a marker phrase that asks for X's dependents, read the
    right way round: X follows it ("dependents of X", "blast radius of / for /
    on / in / if / : X", "is it safe to delete X", "what/which ... depends on /
    uses / relies on X", a verb only with a question word for its subject, so
    "does A depend on B" and "is A dependent on B" are ordinary queries), or X
    fills its slot ("is X safe to delete", "X's blast radius" with no plain word
    after it); a name is a concept's whole text as
    whole words, case ignored after NFC (tokens make the word edges: a hyphen
    between word characters joins, punctuation is its own edge); it names a
    concept with dependents; a name inside a longer name is skipped unless the
    longer one overlaps the marker; marker phrases and function-word-only names
    do not anchor (an uppercase acronym written uppercase does); the name
    starting nearest after a marker wins, then Entity/Resource type, then
    length; a name before a marker is not its X. A question naming nothing but
    "security group" takes the security group with the most dependents.
    """
    if not _MARKER_HINT.search(query.casefold().translate(_DROPPED_BY_TOKENS)):
        return None  # no marker phrase can be in it: skip the tokenizer
    text = unicodedata.normalize("NFC", query)
    tokens = question_tokens(text)
    markers = _markers(tokens)
    targets = [m.target for m in markers if m.target is not None]
    if not targets:
        return None
    marker_tokens = {i for m in markers for i in range(m.first, m.last)}
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
    best = _nearest_named(graph, visible, targets)
    if best is not None:
        return best
    singular = [t.folded.removesuffix("s") for t in tokens]
    says_sg = any(tuple(singular[i : i + 2]) == SECURITY_GROUP for i in range(len(singular) - 1))
    return _security_group(graph) if says_sg else None


def _nearest_named(
    graph: SessionGraph, visible: Sequence[_Occurrence], targets: Sequence[_Target]
) -> DependencyAnchor | None:
    """The name with dependents nearest after a marker (or in its slot), then Entity/Resource,
    then longest."""
    best: tuple[tuple[int, int, int, str], str, list[str]] | None = None
    for occ in visible:
        distances = [d for t in targets if (d := t.distance(occ)) is not None]
        if not distances:
            continue  # not where a marker's X stands: before it, or the subject of its verb
        dependents = graph.dependents(occ.node_id)
        if not dependents:
            continue
        concept = graph.concept(occ.node_id)
        if concept is None:
            continue
        kind = 0 if concept.concept_type in (ConceptType.ENTITY, ConceptType.RESOURCE) else 1
        rank = (min(distances), kind, -len(occ.key), occ.node_id)
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
