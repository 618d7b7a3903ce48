"""Exact names in a question, and whether a concept's text carries them.

A name is what a keyword search must match exactly and what a question asks about when it
carries one: an identifier with a digit (LAMBO-131, E4045, v1.4.2, a commit hash), a path or
file name (src/lease_7.rs, README.md), a snake_case or CamelCase name, a hyphenated name with
two capitals (SG-Base-VPC), or a phrase in quotes. Design notes: docs/design.md, recall.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

MAX_NAMES = 8  # names looked for per question; a longer list is not a question about names
MAX_NAME_CHARS = 200
# A case-insensitive match counts for this much of an exact-case one ("lambo-131" asked,
# "LAMBO-131" stored): the user typed the name, not its spelling.
FOLDED_MATCH = 0.75

_QUOTED = re.compile(r'"([^"\n]{2,200})"|“([^”\n]{2,200})”|`([^`\n]{2,200})`')
_WORD = re.compile(r"[\w./:@#+-]+", re.UNICODE)
# digits with a unit or an ordinal suffix are quantities, not names (3pm, 10k, 2nd, 24GB)
_QUANTITY = re.compile(
    r"\d+(?:[.,]\d+)?(?:st|nd|rd|th|am|pm|k|m|h|s|ms|x|kb|mb|gb|tb|km|mi|kg|min|mins|hrs?)",
    re.IGNORECASE,
)
_EDGE_PUNCT = ".:,;!?/#@+-"


def _strip(word: str) -> str:
    return word.strip(_EDGE_PUNCT)


def _is_name(word: str) -> bool:
    """Whether one whitespace-free word of a question is a name (see the module docstring)."""
    if len(word) < 2 or len(word) > MAX_NAME_CHARS:
        return False
    has_digit = any(ch.isdigit() for ch in word)
    has_letter = any(ch.isalpha() for ch in word)
    if has_digit and has_letter:
        return not _QUANTITY.fullmatch(word)
    if not has_letter:
        return False
    if "_" in word.strip("_") or "/" in word:
        return True
    if "." in word:  # README.md, lambo.toml; not e.g or i.e
        parts = word.split(".")
        return len(parts) >= 2 and all(parts) and max(len(p) for p in parts) >= 2
    if re.search(r"[a-z][A-Z]", word):  # CamelCase, iPhone
        return True
    # a hyphenated name with two capitals (SG-Base-VPC); a plain acronym (API, TTL) is a
    # word the keyword leg matches like any other
    return "-" in word and sum(ch.isupper() for ch in word) >= 2


def question_names(query: str) -> list[str]:
    """The exact names in ``query``, first occurrence first, at most ``MAX_NAMES``."""
    text = unicodedata.normalize("NFC", query)
    found: dict[str, None] = {}
    for match in _QUOTED.finditer(text):
        phrase = " ".join(next(g for g in match.groups() if g is not None).split())
        if len(phrase) >= 2:
            found.setdefault(phrase, None)
    unquoted = _QUOTED.sub(" ", text)
    for raw in _WORD.findall(unquoted):
        word = _strip(raw)
        if _is_name(word):
            found.setdefault(word, None)
    return list(found)[:MAX_NAMES]


@dataclass(frozen=True)
class NameMatcher:
    """Which of a question's names a text carries, exactly or in another case."""

    names: Sequence[str]  # as question_names gives them: NFC, a phrase's spaces single

    @cached_property
    def _patterns(self) -> list[tuple[re.Pattern[str], re.Pattern[str]]]:
        return [(_whole(name), _whole(name.casefold())) for name in self.names]

    def matches(self, content: str) -> list[float]:
        """Per name: 1 (carried exactly), ``FOLDED_MATCH`` (in another case) or 0."""
        text = " ".join(unicodedata.normalize("NFC", content).split())
        folded: str | None = None
        out = []
        for exact, in_any_case in self._patterns:
            if exact.search(text):
                out.append(1.0)
                continue
            folded = text.casefold() if folded is None else folded
            out.append(FOLDED_MATCH if in_any_case.search(folded) else 0.0)
        return out


def _whole(name: str) -> re.Pattern[str]:
    """``name`` whole: no word character or joining hyphen before it, no word character (nor
    "-./:" and one) after it, so LAMBO-131 is not in LAMBO-1310 or LAMBO-131-b, nor v1.4.2 in
    v1.4.2.1. The literal comes first so the engine's fast prefix search finds it; the edge
    before it is a lookbehind over it. The text's whitespace is collapsed before matching, so
    there is no quantifier to backtrack on, however the two texts repeat themselves."""
    literal = re.escape(name)
    return re.compile(rf"{literal}(?<![\w-]{literal})(?![\w]|[-./:]\w)")


def name_shares(matches: dict[str, list[float]]) -> dict[str, float]:
    """Each concept's share of the question's names, a name counting ``1 / n`` when ``n``
    of the concepts carry it: a name one concept carries identifies it, one that many
    carry only narrows the question (the keyword leg already weighs it as a word)."""
    if not matches:
        return {}
    width = len(next(iter(matches.values())))
    carriers = [sum(1 for m in matches.values() if m[i] > 0) for i in range(width)]
    return {
        node_id: sum(m[i] / carriers[i] for i in range(width) if m[i] > 0) / width
        for node_id, m in matches.items()
        if any(m)
    }
