"""When two near texts may be one concept: the guards on a similarity merge.

A vector match at or above the merge threshold is not enough: "the embedder
listens on port 8080" and "... port 8081" are near neighbours and different
facts. A merge is refused when the two texts differ in an identifier
(snake_case, CamelCase, ALL-CAPS, a path, a version or a hash; case counts),
a number, or a negation.
"""

from __future__ import annotations

import re
import unicodedata

from .embed.base import DEFAULT_MERGE_THRESHOLD

# How many nearest neighbours a placement reads: the merge, replacement candidates and the
# possibly-superseded flag all choose among these.
MERGE_CANDIDATES = 8

_WORD_RE = re.compile(r"[\w./:@#-]+", re.UNICODE)
_NUMBER_RE = re.compile(r"\d+(?:[.,]\d+)*")
_NEGATIONS = frozenset(
    {
        "not",
        "no",
        "never",
        "none",
        "nothing",
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


def _is_identifier(word: str) -> bool:
    """snake_case, CamelCase, ALL-CAPS (2+ letters), paths, dotted versions, hashes."""
    core = word.strip(".:,;")
    if not core:
        return False
    if "_" in core or "/" in core or "\\" in core:
        return True
    if re.fullmatch(r"[A-Z][A-Z0-9]+", core):
        return True
    if re.search(r"[a-z][A-Z]", core):
        return True
    if re.fullmatch(r"v?\d+(\.\d+)+", core):
        return True
    return bool(re.fullmatch(r"[0-9a-f]{7,40}", core) and re.search(r"\d", core))


def identifiers(text: str) -> list[str]:
    """Identifiers in order: "a_x then b_y" and "b_y then a_x" are different facts."""
    words = _WORD_RE.findall(unicodedata.normalize("NFC", text))
    return [w.strip(".:,;") for w in words if _is_identifier(w)]


def numbers(text: str) -> list[str]:
    """Numbers in order, so swapped values ("agent-0 ... fact 1" / "agent-1 ... fact 0") differ."""
    return _NUMBER_RE.findall(text)


def negations(text: str) -> set[str]:
    words = re.findall(r"[\w']+", text.casefold().replace("’", "'"))
    found = {w for w in words if w in _NEGATIONS}
    found |= {"n't" for w in words if w.endswith("n't")}
    return found


def merge_forbidden(a: str, b: str) -> str | None:
    """Why ``a`` and ``b`` must stay two concepts however close their vectors, or None."""
    if identifiers(a) != identifiers(b):
        return "identifiers differ"
    if numbers(a) != numbers(b):
        return "numbers differ"
    if negations(a) != negations(b):
        return "negations differ"
    return None


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
