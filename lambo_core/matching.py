"""When two near texts state different facts: the one rule set a similarity merge, a repeated
recall hit and the possibly-superseded flag share.

A vector match at or above the merge threshold is not enough: "the embedder listens on port
8080" and "... port 8081" are near neighbours and different facts. Two texts state different
facts when they differ in an identifier (snake_case, CamelCase, ALL-CAPS, a path, a version or
a hash; case counts), a number (digits or number words: "ninety minutes" is not "one hour"),
an ordinal ("fourth" is not "third"; "1st" is "first"), a negation, or a word against its
opposite (enable and disable). ``merge_forbidden`` refuses a merge for any of these;
``selection.repeat_forbidden`` adds the order of the shared words (spec: lambo_recall,
"Duplicate hits"), which a merge does not check: rewordings reorder words all the time.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from .embed.base import DEFAULT_MERGE_THRESHOLD
from .index.keywords import tokenize

# How many nearest neighbours a placement reads: the merge, replacement candidates and the
# possibly-superseded flag all choose among these.
MERGE_CANDIDATES = 8

# The reasons, in the order they are checked. A reason names the first rule that holds.
IDENTIFIERS_DIFFER: Final = "identifiers differ"
NUMBERS_DIFFER: Final = "numbers differ"
ORDINALS_DIFFER: Final = "ordinals differ"
NEGATIONS_DIFFER: Final = "negations differ"
OPPOSITES_DIFFER: Final = "opposite words differ"
WORD_ORDER_DIFFERS: Final = "word order differs"
ROLES_SWAPPED: Final = "roles swapped"

_WORD_RE = re.compile(r"[\w./:@#-]+", re.UNICODE)
# A run of digits (with its decimal or group separators) and any letters glued to it ("45s",
# "4th"), or a run of letters. Hyphens and punctuation split, so "twenty-five" is two words.
_VALUE_TOKEN_RE = re.compile(r"\d+(?:[.,]\d+)*[^\W\d_]*|[^\W\d_]+")
_DIGITS_RE = re.compile(r"\d+(?:[.,]\d+)*")
_GROUPED_RE = re.compile(r"\d{1,3}(?:,\d{3})+")  # 10,000: one number, as 10000
_ORDINAL_SUFFIXES = frozenset({"st", "nd", "rd", "th"})


def _words(spaced: str) -> list[str]:
    """A word list written as one readable string."""
    return spaced.split()


_UNITS: Final[dict[str, int]] = {
    w: n
    for n, w in enumerate(
        _words(
            "zero one two three four five six seven eight nine ten eleven twelve thirteen "
            "fourteen fifteen sixteen seventeen eighteen nineteen"
        )
    )
}
_TENS: Final[dict[str, int]] = {
    w: 10 * n
    for n, w in enumerate(_words("twenty thirty forty fifty sixty seventy eighty ninety"), 2)
}
_HUNDRED: Final = {"hundred": 100}
_SCALES: Final[dict[str, int]] = {"thousand": 1_000, "million": 1_000_000, "billion": 10**9}
# Words that are a number on their own and never combine with a neighbour.
_ALONE: Final[dict[str, str]] = {"dozen": "12", "half": "0.5", "twice": "2", "thrice": "3"}
_ORDINAL_WORDS: Final[dict[str, int]] = {
    w: n
    for n, w in enumerate(
        _words(
            "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth "
            "thirteenth fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth"
        ),
        1,
    )
} | {
    w: 10 * n
    for n, w in enumerate(
        _words("twentieth thirtieth fortieth fiftieth sixtieth seventieth eightieth ninetieth"),
        2,
    )
}

_NEGATIONS = frozenset(
    {
        "not",
        "no",
        "never",
        "none",
        "nothing",
        "nobody",
        "nowhere",
        "neither",
        "nor",
        "without",
        "cannot",
        "can't",
        "don't",
        "doesn't",
        "didn't",
        "isn't",
        "aren't",
        "wasn't",
        "weren't",
        "won't",
        "shouldn't",
        "mustn't",
        "disable",
        "disabled",
        "disables",
    }
)

# A word against its opposite: texts that differ this way state different facts.
OPPOSITE_PAIRS: Final[tuple[tuple[str, str], ...]] = (
    ("enable", "disable"),
    ("allow", "deny"),
    ("add", "remove"),
    ("start", "stop"),
    ("open", "close"),
    ("true", "false"),
    ("on", "off"),
    ("increase", "decrease"),
    ("min", "max"),
    ("minimum", "maximum"),
    ("before", "after"),
    ("accept", "reject"),
    ("include", "exclude"),
    ("show", "hide"),
    ("lock", "unlock"),
    ("grant", "revoke"),
    ("upper", "lower"),
    ("higher", "lower"),
    ("first", "last"),
    ("pass", "fail"),
    ("succeed", "fail"),
    ("success", "failure"),
    ("valid", "invalid"),
    ("above", "below"),
    ("more", "less"),
    ("import", "export"),
    ("input", "output"),
    ("connect", "disconnect"),
    ("install", "uninstall"),
    ("encrypt", "decrypt"),
    ("online", "offline"),
    ("public", "private"),
    ("sync", "async"),
    ("required", "optional"),
    ("ascending", "descending"),
    ("next", "previous"),
    ("read", "write"),
    ("up", "down"),
    ("faster", "slower"),
    ("larger", "smaller"),
    ("longer", "shorter"),
    ("earlier", "later"),
    ("always", "never"),
)
# Inflections the regular rules below miss.
_IRREGULAR: Final[dict[str, tuple[str, ...]]] = {
    "show": ("shown",),
    "hide": ("hid", "hidden"),
    "write": ("wrote", "written"),
}


# --- identifiers, numbers, ordinals, negations ------------------------------------------------


_ALL_CAPS_RE = re.compile(r"[A-Z][A-Z0-9]+")
_CAMEL_RE = re.compile(r"[a-z][A-Z]")
_VERSION_RE = re.compile(r"v?\d+(\.\d+)+")
_DOTTED_RE = re.compile(r"\w\.[^\W\d_]")
_HASH_RE = re.compile(r"(?=[0-9a-f]*\d)[0-9a-f]{7,40}")


def _is_identifier(word: str) -> bool:
    """snake_case, CamelCase, ALL-CAPS (2+ letters), paths, dotted versions and names,
    hashes."""
    core = word.strip(".:,;")
    if not core:
        return False
    if "_" in core or "/" in core or "\\" in core:
        return True
    if _ALL_CAPS_RE.fullmatch(core) or _CAMEL_RE.search(core) or _VERSION_RE.fullmatch(core):
        return True
    if _DOTTED_RE.search(core):
        return True  # a dotted name: session.close, config.toml, .env inside a path
    return _HASH_RE.fullmatch(core) is not None


def identifiers(text: str) -> list[str]:
    """Identifiers in order: "a_x then b_y" and "b_y then a_x" are different facts."""
    words = _WORD_RE.findall(unicodedata.normalize("NFC", text))
    return [w.strip(".:,;") for w in words if _is_identifier(w)]


class _Values:
    """The numbers and ordinals of one text, in order, each as a canonical string."""

    def __init__(self) -> None:
        self.numbers: list[str] = []
        self.ordinals: list[str] = []
        self._total = 0  # thousands and millions already read in the current run
        self._current: int | None = None  # the part below a thousand
        self._last = ""  # the kind of the last number word: unit, tens, hundred, scale

    def flush(self) -> None:
        if self._current is not None or self._last == "scale":
            self.numbers.append(str(self._total + (self._current or 0)))
        self._total, self._current, self._last = 0, None, ""

    def continues(self) -> bool:
        """Whether an "and" here joins one number ("two hundred and five")."""
        return self._last in ("hundred", "scale")

    def word(self, word: str) -> bool:
        """Read a number or ordinal word; False when ``word`` is neither (it ends a run)."""
        if word in _UNITS or word in _TENS:
            kind, value = ("unit", _UNITS[word]) if word in _UNITS else ("tens", _TENS[word])
            extends = self._last in ("hundred", "scale") or (
                self._last == "tens" and kind == "unit" and value < 10
            )
            if self._current is not None and not extends:
                self.flush()
            self._current = (self._current or 0) + value
            self._last = kind
        elif word in _HUNDRED:
            self._current = (self._current or 1) * 100
            self._last = "hundred"
        elif word in _SCALES:
            self._total += (self._current or 1) * _SCALES[word]
            self._current, self._last = None, "scale"
        elif word in _ORDINAL_WORDS:
            base = self._current if self._last == "tens" and _ORDINAL_WORDS[word] < 10 else None
            if base is None:
                self.flush()
            self.ordinals.append(f"{(base or 0) + _ORDINAL_WORDS[word]}th")
            self._total, self._current, self._last = 0, None, ""
        elif word in _ALONE:
            self.flush()
            self.numbers.append(_ALONE[word])
        else:
            return False
        return True

    def digits(self, token: str) -> None:
        self.flush()
        found = _DIGITS_RE.match(token)
        assert found is not None  # _VALUE_TOKEN_RE starts a digit token with digits
        value, tail = found.group(), token[found.end() :]
        if _GROUPED_RE.fullmatch(value):
            value = value.replace(",", "")
        if tail in _ORDINAL_SUFFIXES:
            self.ordinals.append(f"{value}th")
        else:
            self.numbers.append(value)


# Ordinal words that are also units of measure: after a number ("1 second", "one second")
# they are the unit.
_ALSO_UNITS = frozenset({"second"})


def _values(text: str) -> _Values:
    values = _Values()
    after_number = False
    folded = unicodedata.normalize("NFC", text).casefold()
    end = 0
    for found in _VALUE_TOKEN_RE.finditer(folded):
        token = found.group()
        if folded[end : found.start()].strip(" \t\n-"):
            values.flush()  # punctuation ends a number: "one, two" is two numbers
        end = found.end()
        if token[0].isdigit():
            values.digits(token)
            after_number = True
        elif token == "and" and values.continues():
            continue  # "two hundred and five"
        elif token in _ALSO_UNITS and after_number:
            values.flush()
            after_number = False
        elif values.word(token):
            after_number = token not in _ORDINAL_WORDS
        else:
            values.flush()
            after_number = False
    values.flush()
    return values


def numbers(text: str) -> list[str]:
    """Numbers in order, digits and number words alike ("three" is "3", "twenty-five" is
    "25", "10,000" is "10000"), so swapped values ("agent-0 ... fact 1" / "agent-1 ... fact
    0") differ. An ordinal is not a number: "4th" is in ``ordinals``."""
    return _values(text).numbers


def ordinals(text: str) -> list[str]:
    """Ordinals in order, words and digits alike: "fourth" and "4th" are both ``4th``."""
    return _values(text).ordinals


# One spelling per negation, so a contraction reads as what it contracts: "doesn't" and
# "does not", "can't" and "cannot" are one negation.
_NEGATION_AS: Final[dict[str, str]] = {
    "cannot": "not",
    "disabled": "disable",
    "disables": "disable",
}


def negations(text: str) -> set[str]:
    """The negations of ``text``, each in one spelling: every "n't" and "cannot" is "not"."""
    words = re.findall(r"[\w']+", text.casefold().replace("’", "'"))
    found = {_NEGATION_AS.get(w, w) for w in words if w in _NEGATIONS and not w.endswith("n't")}
    if any(w.endswith("n't") for w in words):
        found.add("not")
    return found


# --- opposites and word order -----------------------------------------------------------------


def _forms(word: str) -> set[str]:
    """``word`` and its regular inflections (enables, enabled, enabling, stopped, denied)."""
    forms = {word, word + "s", word + "es", word + "ed", word + "ing"}
    if word.endswith("e"):
        forms |= {word + "d", word[:-1] + "ing"}
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        forms |= {word[:-1] + "ies", word[:-1] + "ied"}
    if len(word) >= 3 and word[-1] not in "aeiouwxy" and word[-2] in "aeiou":
        forms |= {word + word[-1] + "ed", word + word[-1] + "ing"}
    return forms | set(_IRREGULAR.get(word, ()))


def _opposite_index() -> dict[str, tuple[tuple[int, int], ...]]:
    index: dict[str, set[tuple[int, int]]] = {}
    for pair, words in enumerate(OPPOSITE_PAIRS):
        for side, word in enumerate(words):
            for form in _forms(word):
                index.setdefault(form, set()).add((pair, side))
    return {form: tuple(sorted(sides)) for form, sides in index.items()}


_OPPOSITES: Final = _opposite_index()


def _opposite_sides(words: Sequence[str]) -> dict[int, set[int]]:
    """For each opposite pair a text uses, which of its two sides it uses."""
    sides: dict[int, set[int]] = {}
    for word in words:
        for pair, side in _OPPOSITES.get(word, ()):
            sides.setdefault(pair, set()).add(side)
    return sides


def _shared_order(a: Sequence[str], b: Sequence[str]) -> tuple[list[str], list[str]]:
    """Each text's words that the other also has, first occurrence only, in its own order."""
    shared = set(a) & set(b)
    return (
        list(dict.fromkeys(w for w in a if w in shared)),
        list(dict.fromkeys(w for w in b if w in shared)),
    )


def word_order_differs(words_a: Sequence[str], words_b: Sequence[str]) -> bool:
    """The words both texts hold come in a different order ("A depends on B" / "B ... A")."""
    order_a, order_b = _shared_order(words_a, words_b)
    return order_a != order_b


# Words that never mark a role: articles and copulas ("X is Y" reads both ways).
_ROLELESS = frozenset(_words("the a an is are was were be been being am"))


def _first_positions(words: Sequence[str]) -> dict[str, int]:
    positions: dict[str, int] = {}
    for i, word in enumerate(words):
        positions.setdefault(word, i)
    return positions


_PASSIVE_AUXILIARIES = frozenset(
    ["is", "are", "was", "were", "be", "been", "being", "get", "gets", "got"]
)


def _passive_at(words: Sequence[str], at: int) -> bool:
    return at > 0 and words[at - 1] in _PASSIVE_AUXILIARIES


def roles_swapped(words_a: Sequence[str], words_b: Sequence[str]) -> bool:
    """Two shared words trade sides around a third they share ("the API depends on the
    cache" / "the cache depends on the API"; "from staging to production" / "from
    production to staging"). Narrower than ``word_order_differs``: a phrase moved to the
    front ("every 30 seconds the dashboard refreshes") trades no sides, a passive is not
    read as a swap ("Priya approved the doc" / "the doc was approved by Priya"), and
    neither is a copula ("port 8080 is the default" / "the default is port 8080")."""
    pos_a, pos_b = _first_positions(words_a), _first_positions(words_b)
    shared = sorted((pos_a[w], pos_b[w], w) for w in pos_a if w in pos_b and w not in _ROLELESS)
    # For the i-th shared word in a's order: the latest b-position of a word before it in a
    # (some word went from before it to after it) and the earliest of a word after it in a.
    # Linear, so a long text costs no more than reading it.
    latest_before = [-1] * len(shared)
    for i in range(1, len(shared)):
        latest_before[i] = max(latest_before[i - 1], shared[i - 1][1])
    earliest_after = [len(words_b)] * len(shared)
    for i in range(len(shared) - 2, -1, -1):
        earliest_after[i] = min(earliest_after[i + 1], shared[i + 1][1])
    for i, (pa, pb, _word) in enumerate(shared):
        if _passive_at(words_a, pa) != _passive_at(words_b, pb):
            continue  # "Priya approved the doc" / "the doc was approved by Priya"
        if latest_before[i] > pb and earliest_after[i] < pb:
            return True
    return False


# --- the rule ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Facts:
    """What the rules read from one text, computed once: a caller comparing one text with
    many (a recall's hits) keeps each text's ``Facts`` rather than its string."""

    identifiers: tuple[str, ...]
    numbers: tuple[str, ...]
    ordinals: tuple[str, ...]
    negations: frozenset[str]
    words: tuple[str, ...]
    opposites: dict[int, set[int]]

    @classmethod
    def of(cls, text: str) -> Facts:
        values = _values(text)
        words = tuple(tokenize(text))
        return cls(
            tuple(identifiers(text)),
            tuple(values.numbers),
            tuple(values.ordinals),
            frozenset(negations(text)),
            words,
            _opposite_sides(words),
        )


def differ(a: Facts, b: Facts, *, word_order: bool = False) -> str | None:
    """Why the texts behind ``a`` and ``b`` state different facts, or None.

    After identifiers, numbers, ordinals, negations and opposites: two shared words that
    trade sides (``roles_swapped``), or with ``word_order`` (the repeat rule) any change
    in the order of their shared words.
    """
    if a.identifiers != b.identifiers:
        return IDENTIFIERS_DIFFER
    if a.numbers != b.numbers:
        return NUMBERS_DIFFER
    if a.ordinals != b.ordinals:
        return ORDINALS_DIFFER
    if a.negations != b.negations:
        return NEGATIONS_DIFFER
    if any(a.opposites[p] != b.opposites[p] for p in a.opposites.keys() & b.opposites.keys()):
        return OPPOSITES_DIFFER
    if word_order and word_order_differs(a.words, b.words):
        return WORD_ORDER_DIFFERS
    if roles_swapped(a.words, b.words):
        return ROLES_SWAPPED
    return None


def facts_differ(a: str, b: str, *, word_order: bool = False) -> str | None:
    """``differ`` on two texts."""
    return differ(Facts.of(a), Facts.of(b), word_order=word_order)


def merge_refused(a: Facts, b: Facts) -> str | None:
    """``merge_forbidden`` on texts already read: the merge checks no word order."""
    return differ(a, b)


def merge_forbidden(a: str, b: str) -> str | None:
    """Why ``a`` and ``b`` must stay two concepts however close their vectors, or None."""
    return merge_refused(Facts.of(a), Facts.of(b))


def resolve_merge_threshold(
    configured: float, calibrated: float | None, model: str | None
) -> tuple[float, str]:
    """The similarity at or above which two texts may merge, and where it came from:
    ``[embedder] merge_threshold`` when set (> 0), else the model's calibrated one,
    else the uncalibrated default."""
    if configured > 0:
        return configured, "[embedder] merge_threshold"
    if calibrated:
        return calibrated, f"the {model} model's calibration"
    return DEFAULT_MERGE_THRESHOLD, "the uncalibrated default"
