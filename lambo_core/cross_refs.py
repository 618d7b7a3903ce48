"""Cross-session references, as admission refuses them: a write's reference that names a
concept only another session the call reads holds (a shared layer such as general, or the
project a layer write came through) is refused, never recorded and never created here. No
edge joins two sessions.

Admission reads a reference in this session first; only one that names nothing here is
looked up in ``foreign`` (built by ``writes.cross_session`` from the other sessions'
answers). Spec: lambo_derive depends_on (L274), against (L279), "Writing to a layer"
(L303), lambo_record_action depends_on (L416), the Errors row "reference refused" (L90).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from .errors import ParameterError
from .references import ReferenceMatch, is_node_id_form, is_short_id_form, refuse_other_scope
from .text import check_string

# How a reference names a concept, which decides when naming another session's is refused:
# "reference" (derive depends_on / against, record_action against) must name exactly one
# concept, in any form; "id" (a record_action depends_on entry in node id or 8-hex form) is
# refused whenever only another session holds it; "text" (any other such entry) is created
# here as before, except on a write into a layer when it names a concept of the session the
# write came through (L416: the spec's asymmetry, on purpose).
RefKind = Literal["reference", "id", "text"]
REF_KINDS: tuple[RefKind, ...] = ("reference", "id", "text")


@dataclass(frozen=True)
class CrossSession:
    """What admission knows of the other sessions a call reads."""

    foreign: Mapping[str, str]  # reference (as admission reads it) -> the session holding it
    via: str | None  # the session a write into this layer came through, else None

    @classmethod
    def of(cls, foreign: Mapping[str, str] | None, via: str | None) -> CrossSession | None:
        """None when no other session holds any of the call's references."""
        if not foreign:
            return None
        held: dict[str, str] = {}
        for ref, holder in foreign.items():
            key = normalized(ref)
            if key is not None and isinstance(holder, str):
                held[key] = holder
        return cls(held, via) if held else None

    def holder(self, ref: str) -> str | None:
        return self.foreign.get(ref)


def action_entry_kind(ref: str) -> RefKind:
    """The kind of a record_action depends_on entry: an id form, else text."""
    return "id" if is_node_id_form(ref) or is_short_id_form(ref) else "text"


def check_reference(
    field: str,
    ref: str,
    match: ReferenceMatch,
    cross: CrossSession | None,
    *,
    what: Literal["citations", "contradictions"],
) -> None:
    """A derive depends_on / against or record_action against that names nothing in this
    session but a concept of another: refused as cross-session (it would otherwise be
    refused as matching nothing, which hides where the concept is)."""
    if cross is None or match.concepts or match.interaction:
        return
    holder = cross.holder(ref)
    if holder is not None:
        raise refuse_other_scope(field, ref, holder, what=what)


def check_action_entry(field: str, ref: str, cross: CrossSession | None) -> None:
    """A record_action depends_on entry that names nothing here and would be created: an id
    only another session holds is refused; text only when the write came into this layer
    through the session that holds it (text naming a layer's concept on an unscoped write
    is created in the project, as before)."""
    if cross is None:
        return
    holder = cross.holder(ref)
    if holder is None:
        return
    if action_entry_kind(ref) == "id" or holder == cross.via:
        raise refuse_other_scope(field, ref, holder, what="citations")


def normalized(ref: object) -> str | None:
    """The reference as admission reads it (NFC), or None where admission refuses it."""
    try:
        return check_string("reference", ref)
    except ParameterError:
        return None
