"""repo_scope as text: which ids are accepted, and how a scoped path is told apart (issue #17).

The spec's "Repository-scoped paths" (lambo_derive). A path is unique only inside one
repository, so under a ``repo_scope`` each repository gets its own concept for each path: the
identity is the repository id and the path's key (``path_refs.path_key``), both compared as
text after trimming and NFC, and nothing else. Lambo never reads a filesystem or a remote, so
nothing here does either, nor touches a store.

- ``check_repo_scope`` is the refusal list of the spec's "Refusals" bullet, nothing more: an id
  with a scheme, credentials or ``.git`` is advice the caller did not follow, and is taken as
  given ("What to send").
- ``scoped_key`` and ``scoped_path`` say which text is which repository's path.
- ``text_may_name`` is "No fallback": path text under a scope never names an unscoped path
  Resource, and path text without one never names a scoped one. An id is an exact reference
  and is not this rule's business.
- ``repos_named_in`` is how a dependency question names the repository it asks about.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from lambo_core.errors import ParameterError
from lambo_core.model import Concept, ConceptType
from lambo_core.path_refs import PathRef, path_key
from lambo_core.text import classify_char, describe_codepoint, visible_nfc

MAX_REPO_SCOPE_BYTES = 512

NOTHING_WRITTEN = "; nothing was written"
# Why every character class inside is refused: the id is matched as exact text, and a
# character nobody sees (or a space) makes two ids that read as one.
_ONE_RUN = "a repository id is one run of visible characters, such as github.com/acme/widgets"


@dataclass(frozen=True)
class ScopedKey:
    """What one repository's path is told apart by: the repository and the path's key."""

    repo: str  # trimmed, NFC
    path: str  # PathRef.key: trimmed, NFC, no line reference or trailing separator


# --- the value ------------------------------------------------------------------------------


def check_repo_scope(field: str, value: object) -> str:
    """``value`` as the repository id it names: trimmed and NFC, or refused before the ack.

    Refused: an empty or whitespace id, one over 512 bytes of UTF-8 (counted once trimmed
    and normalised), and one holding whitespace, a control or an invisible character (the
    ones ``check_string`` refuses and the joiners and variation selectors it lets through in
    prose). The value itself is never repeated: it may be a token sent by mistake.
    """
    if not isinstance(value, str):
        raise ParameterError(f"{field} must be a string{NOTHING_WRITTEN}")
    trimmed = _trim(value)
    text = unicodedata.normalize("NFC", trimmed)
    if not text:
        raise ParameterError(f"{field} must not be empty or whitespace{NOTHING_WRITTEN}")
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_REPO_SCOPE_BYTES:
        raise ParameterError(
            f"{field} is {size} bytes; at most {MAX_REPO_SCOPE_BYTES} are accepted"
            + NOTHING_WRITTEN
        )
    # As sent, so the codepoint named is the caller's (NFC makes U+2000 U+2002); then as kept.
    for char in trimmed + text:
        refusal = _char_refusal(field, char)
        if refusal is not None:
            raise ParameterError(refusal + NOTHING_WRITTEN)
    return text


def _trim(value: str) -> str:
    """``value`` without whitespace at its ends; a control character counts as none, so
    ``\\x1f`` (whitespace to Python) is refused wherever it is rather than cut off."""
    start, end = 0, len(value)
    while start < end and _is_whitespace(value[start]):
        start += 1
    while end > start and _is_whitespace(value[end - 1]):
        end -= 1
    return value[start:end]


def _is_whitespace(char: str) -> bool:
    return char.isspace() and classify_char(char) is None


def _char_refusal(field: str, char: str) -> str | None:
    """The refusal for one character of an id, in check_string's words for its class."""
    codepoint = describe_codepoint(char)
    kind = classify_char(char)
    if kind == "control":
        return f"{field} contains a disallowed control character ({codepoint}); {_ONE_RUN}"
    if kind == "surrogate":
        return (
            f"{field} contains an unpaired surrogate ({codepoint}), which is not a character; "
            "send the text as valid UTF-8"
        )
    if kind == "invisible" or not visible_nfc(char):
        return (
            f"{field} contains a disallowed invisible formatting character ({codepoint}); "
            + _ONE_RUN
        )
    if _is_whitespace(char):
        return f"{field} contains whitespace inside it ({codepoint}); {_ONE_RUN}"
    return None


# --- which text is which repository's path --------------------------------------------------


def scoped_key(repo: str, path: PathRef) -> ScopedKey:
    """The identity of ``path`` in ``repo``. ``src/main.rs:12`` and ``src/main.rs`` share it,
    and so do ``docs/`` and ``docs``; ``./src/main.rs``, ``src/Main.rs`` and another repository
    do not. ``repo`` is only required nonempty, as a stored scope is at replay."""
    return ScopedKey(_repo_key(repo), path.key)


def _repo_key(repo: str) -> str:
    key = unicodedata.normalize("NFC", repo.strip())
    if not key:
        raise ValueError("a scoped key needs a repository")
    return key


def _repo_of(concept: Concept) -> str | None:
    """The repository a concept records, or None; an empty stored scope is none (replay
    settles such a row failed, so no concept holds one)."""
    scope = concept.repo_scope
    return scope if scope is not None and scope.strip() else None


def scoped_path(repo: str, text: str, *, type_named: bool) -> ScopedKey | None:
    """The scoped path ``text`` creates under ``repo``, or None when it stays plain text.

    Where the type is named (a resource concept, produces, modifies, the action text) any
    path is one, docs/reference included. Where it is inferred (an action's depends_on, a
    parent_of end the call does not write) only a text that reads as a file or a directory
    is: docs/reference stays plain, docs/reference/ and ./docs/reference do not."""
    ref = path_key(text)
    if ref is None or not (type_named or ref.clear):
        return None
    return scoped_key(repo, ref)


def lookup_key(repo: str, text: str) -> ScopedKey:
    """The key ``text`` finds an existing scoped path of ``repo`` by. A text that is no path
    on its own still finds one: ``docs`` is the scoped directory written as ``docs/``."""
    ref = path_key(text)
    if ref is not None:
        return scoped_key(repo, ref)
    return ScopedKey(_repo_key(repo), unicodedata.normalize("NFC", text.strip()).rstrip("/\\"))


def concept_scoped_key(concept: Concept) -> ScopedKey | None:
    """The scoped key of a scoped path concept, from the spelling it was first written with
    (``src/main.rs:12``); None for a concept without a repository."""
    repo = _repo_of(concept)
    return None if repo is None else lookup_key(repo, concept.content)


def is_unscoped_path_resource(concept: Concept) -> bool:
    """A Resource written without a scope whose text is a path: one several repositories may
    have joined, which scoped path text never names."""
    return (
        _repo_of(concept) is None
        and concept.concept_type is ConceptType.RESOURCE
        and path_key(concept.content) is not None
    )


def text_may_name(repo: str | None, text: str, concept: Concept) -> bool:
    """Whether reference ``text``, written under ``repo`` (None: no repo_scope), may name
    ``concept`` once its ordinary text rules have matched it.

    A scoped path is named only by text under its own repository naming its path. Under a
    scope, path text never names an unscoped path Resource; a concept of another type (a
    Logic config.toml, an Entity TCP/IP) is named as without a scope. An id reference is
    exact and never comes here."""
    own = concept_scoped_key(concept)
    if own is not None:
        return repo is not None and bool(repo.strip()) and lookup_key(repo, text) == own
    if repo is None:
        return True
    return not (path_key(text) is not None and is_unscoped_path_resource(concept))


# --- a question naming its repository ---------------------------------------------------------

# A repository id stands as a whole word when nothing that could continue it touches it: it
# starts the question or follows a space or an opening quote, and ends it or meets a space,
# perhaps after a closing quote or a sentence's punctuation ("in github.com/acme/widgets?").
_WORD_START = r"(?:^|(?<=[\s(\[\"'`“‘«]))"
_WORD_END = r"(?=[)\]\"'`”’».,;:!?]*(?:\s|$))"


def repos_named_in(question: str, candidates: Iterable[str]) -> list[str]:
    """The candidates' repository ids that ``question`` names as a whole word, in the
    candidates' order and once each: what depends on README.md in github.com/acme/widgets
    names github.com/acme/widgets, not github.com/acme/widgets-extra and not acme/widgets.

    Compared as exact text after NFC, case kept, as repo_scope itself is. An id named in no
    form the candidates hold names none of them (the caller's warning stands)."""
    text = unicodedata.normalize("NFC", question)
    named: list[str] = []
    for candidate in candidates:
        repo = unicodedata.normalize("NFC", candidate.strip())
        if not repo or repo in named:
            continue
        if re.search(_WORD_START + re.escape(repo) + _WORD_END, text):
            named.append(repo)
    return named
