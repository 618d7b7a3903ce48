"""Reference resolution: how a depends_on / against entry names an existing concept.

One reading for every tool that takes references: a node id, then an 8-hex short id, then
the canonical key of the text (as written, else in any case); never a substring, never a
guess. ``match_reference`` says
what a reference names, ``resolve_reference`` demands exactly one concept; a refusal is a
``ReferenceRefused`` ending "; nothing was written". Spec: lambo_derive, depends_on/against.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from lambo_core.errors import ReferenceRefused
from lambo_core.model import Concept, short_id
from lambo_core.text import canonical_key, fold_case, show_safely

# How much of a reference and of a candidate's content a refusal shows.
SHOWN_REFERENCE_CHARS = 80
SHOWN_CONTENT_CHARS = 60
# Candidates listed for an ambiguous reference (the spec's limit for a focus).
MAX_LISTED_CANDIDATES = 10

_NODE_ID_RE = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.ASCII | re.IGNORECASE
)
_SHORT_ID_RE = re.compile(r"[0-9a-f]{8}", re.ASCII | re.IGNORECASE)


class ConceptLookup(Protocol):
    """What resolution needs from a session's graph (the in-RAM index implements it)."""

    def concept(self, node_id: str) -> Concept | None:
        """The concept with this full hyphenated (lower-case) node id, if any."""
        ...

    def concepts_with_prefix(self, hex8: str) -> list[Concept]:
        """Concepts whose node id's hex starts with these 8 lower-case hex characters."""
        ...

    def concepts_with_key(self, canonical_key: str) -> list[Concept]:
        """Concepts whose canonical key is exactly this one."""
        ...

    def concepts_with_folded_key(self, folded: str) -> list[Concept]:
        """Concepts whose canonical key, case folded (``text.fold_case``), is this one."""
        ...

    def is_interaction(self, some_id: str) -> bool:
        """Whether this full hyphenated (lower-case) id is an interaction's id."""
        ...


MatchForm = Literal["node_id", "short_id", "text"]


@dataclass(frozen=True)
class ReferenceMatch:
    """What one reference names, before any decision about it.

    ``form`` is how the reference was read. ``concepts`` holds every concept it
    names, oldest first: none, one, or several. ``interaction`` is set when
    the reference is an interaction's node id (``concepts`` is then empty).
    """

    form: MatchForm
    concepts: tuple[Concept, ...]
    interaction: bool = False


def _ordered(concepts: Iterable[Concept]) -> tuple[Concept, ...]:
    # Deterministic listings: oldest first, id breaks ties.
    return tuple(sorted(concepts, key=lambda c: (c.created_at, c.id)))


def is_node_id_form(ref: str) -> bool:
    """Whether ``ref`` is written as a hyphenated UUID (surrounding whitespace ignored)."""
    return _NODE_ID_RE.fullmatch(ref.strip()) is not None


def is_short_id_form(ref: str) -> bool:
    """Whether ``ref`` is exactly 8 hex characters (surrounding whitespace ignored)."""
    return _SHORT_ID_RE.fullmatch(ref.strip()) is not None


def match_reference(ref: str, lookup: ConceptLookup) -> ReferenceMatch:
    """Read ``ref`` by the rules in the module docstring; never raises."""
    bare = ref.strip()
    if _NODE_ID_RE.fullmatch(bare):
        node_id = bare.lower()
        found = lookup.concept(node_id)
        if found is not None:
            return ReferenceMatch("node_id", (found,))
        if lookup.is_interaction(node_id):
            return ReferenceMatch("node_id", (), interaction=True)
        # A hyphenated id that names nothing here is ordinary text.
    key = canonical_key(ref)
    # The text as written first (keys keep case); then, as references always have, the text
    # in any case, which names several concepts when they differ only in case.
    by_key = _ordered(
        lookup.concepts_with_key(key) or lookup.concepts_with_folded_key(fold_case(key))
    )
    if not by_key and _SHORT_ID_RE.fullmatch(bare):
        # The text names no concept, so the 8 hex characters are a short id.
        return ReferenceMatch("short_id", _ordered(lookup.concepts_with_prefix(bare.lower())))
    return ReferenceMatch("text", by_key)


def resolve_reference(field: str, ref: str, lookup: ConceptLookup) -> Concept:
    """The one concept ``ref`` names, or ``ReferenceRefused`` saying why not."""
    match = match_reference(ref, lookup)
    if match.interaction:
        raise refuse_interaction(field, ref)
    if len(match.concepts) == 1:
        return match.concepts[0]
    if not match.concepts:
        raise refuse_no_match(field, ref)
    raise refuse_several(field, ref, match.concepts, full_ids=match.form == "short_id")


def still_names(ref: str, node_id: str, lookup: ConceptLookup) -> bool:
    """Whether ``ref`` still names exactly the concept ``node_id``.

    Checked when a queued write is applied: a reference whose concept was
    removed, or that now also matches another concept, no longer holds.
    """
    match = match_reference(ref, lookup)
    return len(match.concepts) == 1 and match.concepts[0].id == node_id


def check_not_self(field: str, ref: str, resolved: Concept, new_key: str) -> None:
    """Refuse a reference that names the concept being written.

    ``new_key`` is the canonical key of the new concept's content: a resolved
    concept with that key is the concept itself (the write would match it).
    """
    if resolved.canonical_key == new_key:
        raise refuse_self_reference(field, ref)


# --- refusals -------------------------------------------------------------------
#
# Each builder returns the error so the caller writes ``raise refuse_...(...)``
# at the point the rule is decided.


def refuse(field: str, ref: str, why: str) -> ReferenceRefused:
    """``<field> "<ref>" <why>; nothing was written``: the shape every refusal shares."""
    shown = show_safely(ref, SHOWN_REFERENCE_CHARS)
    return ReferenceRefused(f'{field} "{shown}" {why}; nothing was written')


def refuse_no_match(field: str, ref: str) -> ReferenceRefused:
    return refuse(field, ref, "matches nothing in this session")


def refuse_interaction(field: str, ref: str) -> ReferenceRefused:
    return refuse(field, ref, "is an interaction's id, not a concept's")


def describe_candidates(candidates: Sequence[Concept], *, full_ids: bool = False) -> str:
    """``<id> "<content…>", ...`` for at most 10 candidates, then ``and N more``.

    Short ids are used unless ``full_ids`` or two listed candidates share one.
    """
    if not full_ids:
        shorts = [short_id(c.id) for c in candidates[:MAX_LISTED_CANDIDATES]]
        full_ids = len(set(shorts)) != len(shorts)
    return list_labelled([(c.id if full_ids else short_id(c.id), c.content) for c in candidates])


def list_labelled(items: Sequence[tuple[str, str]]) -> str:
    """``<label> "<content…>", ...`` for at most 10 items, then ``and N more``."""
    listed = items[:MAX_LISTED_CANDIDATES]
    text = ", ".join(
        f'{label} "{show_safely(content, SHOWN_CONTENT_CHARS)}"' for label, content in listed
    )
    if len(items) > len(listed):
        text += f", and {len(items) - len(listed)} more"
    return text


def refuse_several(
    field: str, ref: str, candidates: Sequence[Concept], *, full_ids: bool = False
) -> ReferenceRefused:
    """An ambiguous reference: lists the candidates so the caller can name one by id."""
    how = "its full node id" if full_ids else "its id"
    listing = describe_candidates(candidates, full_ids=full_ids)
    return refuse(field, ref, f"matches several: {listing}; name one by {how}")


def refuse_self_reference(field: str, ref: str) -> ReferenceRefused:
    return refuse(field, ref, "names the concept itself")


def refuse_cycle(field: str, ref: str) -> ReferenceRefused:
    """A depends_on entry that would close a dependency loop (found by the graph index)."""
    return refuse(field, ref, "would close a dependency loop")


def refuse_cited_and_contradicted(field: str, ref: str) -> ReferenceRefused:
    """An against entry naming a concept the same concept also lists in depends_on."""
    return refuse(field, ref, "is both cited and contradicted by one concept of the call")


def refuse_other_scope(
    field: str, ref: str, scope: str, *, what: Literal["citations", "contradictions"]
) -> ReferenceRefused:
    """A reference naming a concept only another session holds."""
    shown_scope = show_safely(scope, SHOWN_REFERENCE_CHARS)
    return refuse(field, ref, f'is in scope "{shown_scope}"; cross-session {what} are not recorded')


def refuse_changed(field: str, ref: str) -> ReferenceRefused:
    """On a receipt: the reference no longer names what it named when the call was accepted."""
    return refuse(
        field,
        ref,
        "named something else when the write was applied (the concept it named was "
        "removed, or the reference now matches another concept too)",
    )
