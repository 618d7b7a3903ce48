"""Call names: which concept a text of one write call names, by the rule references use.

A parent_of end and a record_action produces / modifies / depends_on entry name a concept
by its text and create it when nothing matches. They read the text as references do
(``references.match_reference``), over the session's concepts and those the call itself
places before it (its concepts, its earlier ends and targets, in the order the write
applies them): the text as written first; else the text in any case, where exactly one
concept is that concept. Several concepts that differ only in case, and none written
exactly so, refuse the call with every candidate listed: creating a new concept there
would make a hidden duplicate, and picking one would be a guess. Admission and the apply
builder both read a call through one ``CallNames``, so a call refused at apply time for
this reason is one a write applied in between made ambiguous.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ReferenceRefused
from .model import short_id
from .references import ConceptLookup, list_labelled, refuse
from .text import canonical_key, fold_case

# A node id the call has not minted yet (at admission): the placeholder cycle checks use.
NEW_PREFIX = "new:"


@dataclass(frozen=True)
class Named:
    """A concept a text names: the session's, or one this call places (``new``: it is
    not in the session yet, and ``node_id`` may be a ``new:`` placeholder)."""

    node_id: str
    content: str
    new: bool = False


class CallNames:
    """The concepts one call's texts can name: the session's, then the call's own."""

    def __init__(self, lookup: ConceptLookup) -> None:
        self._lookup = lookup
        self._by_key: dict[str, Named] = {}  # keys this call placed
        self._by_folded: dict[str, dict[str, Named]] = {}  # folded key -> node id -> named

    def place(self, text: str, node_id: str, *, new: bool) -> None:
        """Record that this call placed ``text`` on ``node_id`` (the first placing wins)."""
        key = canonical_key(text)
        named = self._by_key.setdefault(key, Named(node_id, text, new))
        self._by_folded.setdefault(fold_case(key), {}).setdefault(named.node_id, named)

    def placed(self, text: str) -> Named | None:
        """The concept this call already placed ``text`` on, if it did."""
        return self._by_key.get(canonical_key(text))

    def exact(self, text: str) -> Named | None:
        """The concept ``text`` names as written: this call's, else the session's."""
        found = self.placed(text)
        if found is not None:
            return found
        existing = self._lookup.concepts_with_key(canonical_key(text))
        return Named(existing[0].id, existing[0].content) if existing else None

    def new_in_any_case(self, text: str) -> list[Named]:
        """The concepts this call creates that ``text`` names in any case (or as written)."""
        return [
            n for n in self._by_folded.get(fold_case(canonical_key(text)), {}).values() if n.new
        ]

    def in_any_case(self, text: str) -> list[Named]:
        """Every concept ``text`` names in any case: the session's oldest first, then
        this call's in the order it placed them."""
        folded = fold_case(canonical_key(text))
        session = sorted(
            self._lookup.concepts_with_folded_key(folded), key=lambda c: (c.created_at, c.id)
        )
        out = {c.id: Named(c.id, c.content) for c in session}
        for node_id, named in self._by_folded.get(folded, {}).items():
            out.setdefault(node_id, named)
        return list(out.values())

    def named(self, field: str, text: str, *, ids_accepted: bool = False) -> Named | None:
        """The one concept ``text`` names, None when it names none (the caller creates one),
        or ``ReferenceRefused`` when it names several differing only in case.

        ``ids_accepted`` says the field also takes a node id (record_action depends_on),
        so the refusal may suggest one.
        """
        found = self.exact(text)
        if found is not None:
            return found
        candidates = self.in_any_case(text)
        if len(candidates) <= 1:
            return candidates[0] if candidates else None
        raise refuse_case_variants(field, text, candidates, ids_accepted=ids_accepted)


def describe_named(candidates: list[Named]) -> str:
    """``<id> "<content…>"`` per candidate, ``new in this call "<content…>"`` for one the
    call creates; at most 10, then ``and N more``."""
    return list_labelled(
        [("new in this call" if c.new else short_id(c.node_id), c.content) for c in candidates]
    )


def refuse_case_variants(
    field: str, text: str, candidates: list[Named], *, ids_accepted: bool = False
) -> ReferenceRefused:
    """Text naming several concepts that differ only in case, none written exactly so."""
    how = "name one by its id or write it" if ids_accepted else "write it"
    listing = describe_named(candidates)
    return refuse(
        field,
        text,
        f"matches several that differ only in case: {listing}; {how} exactly as one is written",
    )
