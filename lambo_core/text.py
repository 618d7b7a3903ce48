"""The rules of text: what lambo accepts in a string, and how it compares two.

Every string a caller sends passes ``check_string`` (or ``check_agent_id``) before anything
else reads it; ``canonical_key`` says when two texts are one concept (case kept). Spec: "What Lambo
accepts in text". The decisions the spec leaves open are in docs/design.md (text).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta, timezone
from typing import Literal

from lambo_core.errors import ParameterError
from lambo_core.model import ConceptType

MAX_STRING_BYTES = 16 * 1024
MAX_AGENT_ID_CHARS = 256
# A concept type longer than this is not echoed back: no wire name is near it.
MAX_SHOWN_VARIANT_CHARS = 64

CharClass = Literal["control", "invisible", "surrogate"]

# --- codepoint classes ------------------------------------------------------

# Control characters (Cc) other than tab U+0009 and newline U+000A: C0
# (including CR), DEL and C1 (including NEL U+0085).
_CONTROL_RANGES: tuple[tuple[int, int], ...] = (
    (0x0000, 0x0008),
    (0x000B, 0x001F),
    (0x007F, 0x009F),
)

# Invisible formatting characters that are refused. This is Unicode's
# Default_Ignorable_Code_Point set (including its unassigned reserves, which
# future fonts will also render as nothing) minus the allowed invisibles
# below, plus U+2800 and the interlinear annotation controls.
_INVISIBLE_RANGES: tuple[tuple[int, int], ...] = (
    (0x00AD, 0x00AD),  # soft hyphen
    (0x061C, 0x061C),  # arabic letter mark (bidi)
    (0x115F, 0x1160),  # hangul choseong / jungseong fillers
    (0x17B4, 0x17B5),  # khmer inherent vowels (render nothing)
    (0x180E, 0x180E),  # mongolian vowel separator
    (0x200B, 0x200B),  # zero width space
    (0x200E, 0x200F),  # LRM, RLM
    (0x202A, 0x202E),  # bidi embeddings and overrides
    (0x2060, 0x206F),  # word joiner, invisible operators, isolates, deprecated formats
    (0x2800, 0x2800),  # braille pattern blank
    (0x3164, 0x3164),  # hangul filler
    (0xFEFF, 0xFEFF),  # BOM / zero width no-break space
    (0xFFA0, 0xFFA0),  # halfwidth hangul filler
    (0xFFF0, 0xFFFB),  # reserved ignorables, interlinear annotation
    (0x1BCA0, 0x1BCA3),  # shorthand format controls
    (0x1D173, 0x1D17A),  # musical symbol format controls
    (0xE0000, 0xE00FF),  # tag characters (and their reserved neighbours)
    (0xE01F0, 0xE0FFF),  # reserved ignorables after the variation selectors
)

# Invisible characters real writing needs: accepted and kept in content,
# dropped from canonical keys.
_ALLOWED_INVISIBLE_RANGES: tuple[tuple[int, int], ...] = (
    (0x034F, 0x034F),  # combining grapheme joiner
    (0x180B, 0x180D),  # mongolian free variation selectors 1-3
    (0x180F, 0x180F),  # mongolian free variation selector 4
    (0x200C, 0x200D),  # ZWNJ, ZWJ
    (0xFE00, 0xFE0F),  # variation selectors 1-16
    (0xE0100, 0xE01EF),  # variation selectors 17-256
)

_SURROGATE_RANGE = (0xD800, 0xDFFF)


def _char_class(ranges: Iterable[tuple[int, int]]) -> str:
    parts = []
    for lo, hi in ranges:
        parts.append(
            re.escape(chr(lo)) if lo == hi else f"{re.escape(chr(lo))}-{re.escape(chr(hi))}"
        )
    return "[" + "".join(parts) + "]"


_CONTROL_RE = re.compile(_char_class(_CONTROL_RANGES))
_INVISIBLE_RE = re.compile(_char_class(_INVISIBLE_RANGES))
_SURROGATE_RE = re.compile(_char_class((_SURROGATE_RANGE,)))
_REFUSED_RE = re.compile(
    _char_class((*_CONTROL_RANGES, *_INVISIBLE_RANGES, _SURROGATE_RANGE)),
)
_ALLOWED_INVISIBLE_RE = re.compile(_char_class(_ALLOWED_INVISIBLE_RANGES))
# Any invisible at all, allowed or not: what the image-suffix rule ignores.
_ANY_INVISIBLE_RE = re.compile(_char_class((*_INVISIBLE_RANGES, *_ALLOWED_INVISIBLE_RANGES)))


def describe_codepoint(char: str) -> str:
    """``U+XXXX`` (at least four uppercase hex digits) for one character."""
    return f"U+{ord(char):04X}"


def classify_char(char: str) -> CharClass | None:
    """Which refused class a single character belongs to, or None if it is accepted."""
    if _CONTROL_RE.fullmatch(char):
        return "control"
    if _INVISIBLE_RE.fullmatch(char):
        return "invisible"
    if _SURROGATE_RE.fullmatch(char):
        return "surrogate"
    return None


def find_refused(text: str) -> tuple[CharClass, str] | None:
    """The first refused character in ``text`` as (class, ``U+XXXX``), or None."""
    match = _REFUSED_RE.search(text)
    if match is None:
        return None
    char = match.group()
    kind = classify_char(char)
    assert kind is not None  # _REFUSED_RE is the union of the three classes
    return kind, describe_codepoint(char)


def _refusal(field: str, kind: CharClass, codepoint: str) -> str:
    if kind == "control":
        return (
            f"{field} contains a disallowed control character ({codepoint}); only tab and "
            "newline are accepted, so control sequences cannot reach stored content"
        )
    if kind == "invisible":
        return (
            f"{field} contains a disallowed invisible formatting character ({codepoint}); "
            "bidi overrides, zero-width characters, blank fillers, the BOM and tag characters "
            "are refused because they are invisible in review but not to the model "
            "(zero-width joiner and non-joiner are allowed, and are stripped from canonical keys)"
        )
    return (
        f"{field} contains an unpaired surrogate ({codepoint}), which is not a character; "
        "send the text as valid UTF-8"
    )


def _utf8_size(text: str) -> int:
    # surrogatepass: a lone surrogate still has a size (3 bytes); it is refused later.
    return len(text.encode("utf-8", "surrogatepass"))


def _is_blank(text: str) -> bool:
    # Blank: nothing left once whitespace and the allowed invisibles are gone,
    # so its canonical key would be empty.
    return not _ALLOWED_INVISIBLE_RE.sub("", text).strip()


# --- strings ----------------------------------------------------------------


def check_string(
    field: str,
    value: object,
    *,
    max_bytes: int = MAX_STRING_BYTES,
    allow_empty: bool = False,
) -> str:
    """Validate one caller string and return it NFC-normalized.

    Raises ``ParameterError`` for a non-string, an empty or blank string
    (unless ``allow_empty``), a string over ``max_bytes`` of UTF-8, a refused
    control or invisible character, or a lone surrogate.
    """
    if not isinstance(value, str):
        raise ParameterError(f"{field} must be a string")
    size = _utf8_size(value)
    if size > max_bytes:
        raise ParameterError(f"{field} is {size} bytes; the cap is {max_bytes} bytes")
    refused = find_refused(value)
    if refused is not None:
        raise ParameterError(_refusal(field, *refused))
    text = unicodedata.normalize("NFC", value)
    normalized_size = _utf8_size(text)
    if normalized_size > max_bytes:
        raise ParameterError(
            f"{field} is {normalized_size} bytes once NFC-normalized; the cap is {max_bytes} bytes"
        )
    if not allow_empty and _is_blank(text):
        raise ParameterError(f"{field} must not be empty or blank")
    return text


# Characters that would break an agent id out of its one line: every control
# character (tab and newline included) and the Unicode line/paragraph separators.
_AGENT_ID_LINE_BREAKERS_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def check_agent_id(value: object) -> str:
    """Validate ``agent_id``: a required, non-blank, single-line id of at most 256 characters.

    Stricter than ``check_string`` because the id is rendered into other
    agents' context blocks: a line break would let one agent write lines into
    another's context, and a long id could push a block out of its budget.
    Returned NFC-normalized.
    """
    field = "agent_id"
    if not isinstance(value, str):
        raise ParameterError(f"{field} must be a string")
    if len(value) > MAX_AGENT_ID_CHARS:
        raise ParameterError(
            f"{field} is {len(value)} characters; the cap is {MAX_AGENT_ID_CHARS} characters"
        )
    breaker = _AGENT_ID_LINE_BREAKERS_RE.search(value)
    if breaker is not None:
        raise ParameterError(
            f"{field} must be one line with no tabs, control or line-separator characters; "
            f"found {describe_codepoint(breaker.group())}"
        )
    refused = find_refused(value)
    if refused is not None:
        raise ParameterError(_refusal(field, *refused))
    text = unicodedata.normalize("NFC", value)
    if len(text) > MAX_AGENT_ID_CHARS:
        raise ParameterError(
            f"{field} is {len(text)} characters once NFC-normalized; "
            f"the cap is {MAX_AGENT_ID_CHARS} characters"
        )
    if _is_blank(text):
        raise ParameterError(f"{field} is required and must not be empty or blank")
    return text


def show_safely(text: str, cap: int = 80) -> str:
    """``text`` made fit to quote in a message: one line, no refused characters, capped.

    Whitespace runs (newlines, tabs, line separators) become one space, any
    refused character becomes U+FFFD, and text over ``cap`` characters is cut
    and ends with an ellipsis.
    """
    one_line = " ".join(_REFUSED_RE.sub("\ufffd", text).split())
    if len(one_line) > cap:
        return one_line[:cap] + "…"
    return one_line


# --- timestamps ---------------------------------------------------------------

# RFC 3339 section 5.6 date-time. ASCII digits only (Python's \d would take
# Arabic-Indic digits too); "T" and "Z" may be lower case, as the RFC allows.
_RFC3339_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))",
    re.ASCII,
)


def parse_event_time(field: str, value: object) -> float:
    """An RFC 3339 timestamp as UTC epoch seconds.

    Strict RFC 3339: ``YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM)``; a leap
    second (``:60``) is read as the first second after ``:59``. The refusal
    never repeats the value.
    """
    rule = f"{field} must be an RFC3339 timestamp such as 2024-06-12T14:30:00Z"
    if not isinstance(value, str):
        raise ParameterError(rule)
    match = _RFC3339_RE.fullmatch(value)
    if match is None:
        raise ParameterError(rule)
    year, month, day, hour, minute, second = (int(g) for g in match.group(1, 2, 3, 4, 5, 6))
    fraction, zulu, sign, off_hour, off_minute = match.group(7, 8, 9, 10, 11)
    leap = 1 if second == 60 else 0
    try:
        if zulu:
            tz = UTC
        else:
            oh, om = int(off_hour), int(off_minute)
            if oh > 23 or om > 59:
                raise ValueError("offset out of range")
            offset = timedelta(hours=oh, minutes=om)
            tz = timezone(-offset if sign == "-" else offset)
        moment = datetime(year, month, day, hour, minute, second - leap, tzinfo=tz)
    except ValueError:
        raise ParameterError(f"{rule}; the date or time given is out of range") from None
    seconds = moment.timestamp() + leap
    if fraction:
        seconds += float("0." + fraction)
    return seconds


def format_rfc3339(ts: float) -> str:
    """UTC epoch seconds as RFC 3339 text at seconds precision: ``2026-08-10T10:28:00Z``.

    Fractions are truncated toward the earlier second.
    """
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=math.floor(ts))
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}"
        f"T{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}Z"
    )


# --- canonical keys -------------------------------------------------------------


def canonical_key(text: str) -> str:
    """The key under which identical-looking texts are one concept.

    NFC, drop the allowed invisibles (ZWJ, ZWNJ, variation selectors, CGJ), NFC again
    (a dropped joiner can let two marks compose), collapse every run of Unicode whitespace
    to one space and strip. Case is kept: "Case Test" and "case test" look different and
    are two concepts, as src/Main.rs and src/main.rs are two files (spec: "Case counts").
    Word order is kept and nothing is stemmed: "A depends on B" and "B depends on A" are
    different keys. Idempotent.
    """
    text = _ALLOWED_INVISIBLE_RE.sub("", unicodedata.normalize("NFC", text))
    return " ".join(unicodedata.normalize("NFC", text).split())


def fold_case(key: str) -> str:
    """A canonical key with case folded, for the lookups the spec makes case-blind: a
    dependency question names a concept "ignoring case after NFC", and inspect's
    substring focus matches whatever the case."""
    return unicodedata.normalize("NFC", key.casefold())


# --- concept types ---------------------------------------------------------------


def check_concept_type(field: str, value: object) -> ConceptType:
    """A concept type by its lower-case wire name (``entity``, ``logic``, ...).

    ``Entity`` is refused as ``<field>: unknown variant Entity, expected one of
    ...``. A value that holds a refused, control or line-breaking character,
    or is longer than 64 characters, is not echoed: ``unknown variant (not shown)``.
    """
    expected = ", ".join(ConceptType.wire_names())
    if not isinstance(value, str):
        raise ParameterError(f"{field} must be a string, one of {expected}")
    for member in ConceptType:
        if value == member.value:
            return member
    if value == "":
        shown = "(empty)"
    elif (
        len(value) > MAX_SHOWN_VARIANT_CHARS
        or find_refused(value) is not None
        or _AGENT_ID_LINE_BREAKERS_RE.search(value) is not None
    ):
        shown = "(not shown)"
    else:
        shown = value
    raise ParameterError(f"{field}: unknown variant {shown}, expected one of {expected}")


# --- image suffixes ----------------------------------------------------------------

_IMAGE_SUFFIX_RE = re.compile(r"\[image:[a-z0-9]{1,64}\]", re.ASCII)
# Stemming, kept deliberately small: English plural and possessive endings.
# Longest first, so "[image:abc]'s" loses "'s" rather than only "s".
_STEM_SUFFIXES = ("'s", "’s", "s'", "s’", "es", "s")
_NOT_STEMMED_RE = re.compile(r"[0-9/.]")
# Sentence punctuation around a word, dropped before it is read: "look at [image:r17], nice"
# still names the image, as a keyword search reads it. "[" and "]" are the suffix's own, and a
# quote that ends a possessive ("s'") is left to the stemming.
_WORD_PUNCTUATION = '({"“«‘'
_WORD_END_PUNCTUATION = ',;:!?.…)}"”»'
# The one form a reference may name an image concept by: its content, caption [image:<id>].
_IMAGE_CONTENT_RE = re.compile(r"(?P<caption>.*\S) \[image:(?P<id>[a-z0-9]{1,64})\]", re.DOTALL)


def visible_nfc(text: str) -> str:
    """``text`` in NFC with every invisible character dropped, allowed ones included."""
    return _ANY_INVISIBLE_RE.sub("", unicodedata.normalize("NFC", text))


def has_image_suffix(text: str) -> bool:
    """Whether any word of ``text`` reads as ``[image:<id>]``.

    A word is a whitespace-separated run. It is read after NFC, dropping every
    invisible character and casefolding, and, unless it contains a digit, ``/``
    or ``.``, also with one plural or possessive ending stripped (``s``, ``es``,
    ``'s``, ``s'``). So ``[IMAGE:R17]`` and ``[image:abc]s`` are image
    suffixes, ``[image:r17]s`` and ``see [image: diagram]`` are not. The id is
    ``[a-z0-9]{1,64}``, as for ``lambo_derive_image``. Sentence punctuation around a word
    is dropped first, so ``look at [image:r17], nice`` holds one.
    """
    folded = visible_nfc(text).casefold()
    for spaced in folded.split():
        word = spaced.lstrip(_WORD_PUNCTUATION).rstrip(_WORD_END_PUNCTUATION)
        if _IMAGE_SUFFIX_RE.fullmatch(word):
            return True
        if _NOT_STEMMED_RE.search(word):
            continue
        for suffix in _STEM_SUFFIXES:
            if word.endswith(suffix) and _IMAGE_SUFFIX_RE.fullmatch(word[: -len(suffix)]):
                return True
    return False


def image_content(text: str) -> tuple[str, str] | None:
    """(caption, image id) when ``text`` is an image concept's content, ``caption
    [image:<id>]``, with no other image suffix in the caption; else None."""
    match = _IMAGE_CONTENT_RE.fullmatch(text)
    if match is None or has_image_suffix(match["caption"]):
        return None
    return match["caption"], match["id"]


def check_image_reference(field: str, text: str) -> None:
    """A text that names a concept (a parent_of end, an action's produces, modifies or
    depends_on entry) may name an image concept by its content, and hold no image suffix
    otherwise (spec: "Referring to an image concept")."""
    if has_image_suffix(text) and image_content(text) is None:
        raise ParameterError(
            f"{field} may hold an image suffix ([image:<id>]) only to name an image concept by "
            "its content, caption [image:<image_id>], with the suffix once, at the end"
        )
