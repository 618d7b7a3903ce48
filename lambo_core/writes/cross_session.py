"""Asking the other sessions about a write's references, before it is admitted.

The session a write goes to cannot see the others' graphs (a layer may be served by another
process), so the caller asks them first: ``references_of`` lists what to ask about, each
other session answers with ``resolve_refs`` over its own graph, and the write is submitted
with ``foreign``: each reference another session resolves, mapped to that session. The
refusals themselves are ``cross_refs``'s, in admission.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..admission import (
    MAX_ACTION_AGAINST,
    MAX_ACTION_TARGETS,
    MAX_REFS_PER_CALL,
    MAX_REFS_PER_CONCEPT,
)
from ..cross_refs import REF_KINDS, RefKind, action_entry_kind, normalized
from ..references import ConceptLookup, match_reference


def references_of(tool: str, args: object) -> list[dict[str, str]]:
    """Every reference of a write call another session might hold, each ``{ref, kind}``,
    in call order without repeats.

    Read from the raw arguments, before admission, so it never raises: what is malformed
    is left out here and refused by admission. References past the per-call limits are
    left out too, since admission refuses such a call before it resolves any.
    """
    if not isinstance(args, Mapping):
        return []
    out: list[dict[str, str]] = []
    seen: set[tuple[str, str]] = set()

    def add(raw: object, kind: RefKind) -> None:
        ref = normalized(raw)
        if ref is not None and (ref, kind) not in seen:
            seen.add((ref, kind))
            out.append({"ref": ref, "kind": kind})

    if tool == "lambo_derive":
        concepts = _entries(args.get("concepts"), None)
        for field in ("depends_on", "against"):
            refs = [
                ref
                for concept in concepts
                if isinstance(concept, Mapping)
                for ref in _entries(concept.get(field), MAX_REFS_PER_CONCEPT)
            ]
            for ref in refs[:MAX_REFS_PER_CALL]:
                add(ref, "reference")
    elif tool == "lambo_record_action":
        for ref in _entries(args.get("depends_on"), MAX_ACTION_TARGETS):
            if isinstance(ref, str):
                add(ref, action_entry_kind(ref))
        for ref in _entries(args.get("against"), MAX_ACTION_AGAINST):
            add(ref, "reference")
    return out


def resolve_refs(graph: ConceptLookup, refs: object) -> list[str]:
    """The refs (NFC, as admission reads them) that name exactly one concept of ``graph``,
    read as admission reads a reference (``references.match_reference``). Malformed entries
    are skipped.

    The caller holds the session index's lock, as admission does.
    """
    found: list[str] = []
    for item in _entries(refs, None):
        if not isinstance(item, Mapping) or item.get("kind") not in REF_KINDS:
            continue
        ref = normalized(item.get("ref"))
        if ref is None:
            continue
        match = match_reference(ref, graph)
        if len(match.concepts) == 1 and ref not in found:
            found.append(ref)
    return found


def _entries(value: object, cap: int | None) -> Sequence[Any]:
    if not isinstance(value, list | tuple):
        return ()
    return value if cap is None else value[:cap]
