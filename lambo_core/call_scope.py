"""Which concept each text of one write call names under its repo_scope (issue #17).

The spec's "Repository-scoped paths" (lambo_derive), read by admission and again by the apply
builder, so both decide alike. ``CallScope`` wraps the call's ``CallNames`` over a view of the
session that hides what the call may not name by text:

- scoped concepts, always: they are found through the by-path index, only by path text of
  their own repository ("path text in an unscoped write never finds a scoped one");
- under a scope, an unscoped path Resource named by path text ("No fallback").

Where the type is named (a resource concept, produces, modifies, the action text) a path is the
repository's scoped path, created if new. Where it is inferred (an action's depends_on, a
parent_of end the call does not write, a citation) the text is an existing scoped path, else an
existing concept of another type under its plain key; both at once is refused as ambiguous;
with neither, a dependency or an end that reads as a file or a directory is a new scoped path,
and a citation matches nothing. A parent_of parent that is a directory of its scoped child is
that repository's directory. Ids are exact references and pass untouched. A call without a
repo_scope in a session holding no scoped concept reads the graph itself, exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .call_names import NEW_PREFIX, CallNames, Named
from .errors import ReferenceRefused
from .index.graph import SessionGraph
from .model import Concept, ConceptType, short_id
from .path_refs import PathRef, directory_of
from .references import (
    MAX_LISTED_CANDIDATES,
    ConceptLookup,
    is_node_id_form,
    match_reference,
    refuse,
    refuse_no_match,
    still_names,
)
from .repo_scope import (
    ScopedKey,
    concept_scoped_key,
    is_unscoped_path_resource,
    lookup_key,
    scoped_key,
    scoped_path,
    text_may_name,
)
from .text import canonical_key, show_safely

SHOWN_REPO_CHARS = 200


class PlainView:
    """The session as text may name it in one call: no scoped concept, and under a scope
    no unscoped path Resource named by path text. Ids reach every concept."""

    def __init__(self, graph: SessionGraph, repo: str | None) -> None:
        self._graph = graph
        self._repo = repo

    def _may(self, text: str, concept: Concept) -> bool:
        return concept_scoped_key(concept) is None and text_may_name(self._repo, text, concept)

    def concept(self, node_id: str) -> Concept | None:
        return self._graph.concept(node_id)

    def concepts_with_prefix(self, hex8: str) -> list[Concept]:
        return self._graph.concepts_with_prefix(hex8)

    def concepts_with_key(self, canonical_key: str) -> list[Concept]:
        return [
            c for c in self._graph.concepts_with_key(canonical_key) if self._may(canonical_key, c)
        ]

    def concepts_with_folded_key(self, folded: str) -> list[Concept]:
        return [c for c in self._graph.concepts_with_folded_key(folded) if self._may(folded, c)]

    def is_interaction(self, some_id: str) -> bool:
        return self._graph.is_interaction(some_id)


@dataclass(frozen=True)
class Inferred:
    """What an inferred-type text names: ``named`` (a concept, or None for a new one) and
    ``key`` when it is (or becomes) a scoped path."""

    named: Named | None
    key: ScopedKey | None = None


class CallScope:
    """One call's texts, its repo_scope (None: none) and the session they name concepts of."""

    def __init__(self, graph: SessionGraph, repo: str | None) -> None:
        self.graph = graph
        self.repo = repo
        plain = repo is None and len(graph.paths) == 0
        self.lookup: ConceptLookup = graph if plain else PlainView(graph, repo)
        self.names = CallNames(self.lookup)
        self._placed: dict[ScopedKey, Named] = {}

    # -- scoped paths ---------------------------------------------------------------------------
    def named_path(self, text: str) -> ScopedKey | None:
        """The scoped path a text whose type is named lands on (None: plain text)."""
        return None if self.repo is None else scoped_path(self.repo, text, type_named=True)

    def own_path(self, text: str, ctype: ConceptType) -> ScopedKey | None:
        """A concept of the call's own: a path-like resource is its repository's path."""
        return self.named_path(text) if ctype is ConceptType.RESOURCE else None

    def scoped(self, key: ScopedKey) -> Named | None:
        """The concept at ``key``: the one this call placed there, else the session's oldest."""
        found = self._placed.get(key)
        if found is not None:
            return found
        concepts = [c for c in map(self.graph.concept, self.graph.paths.ids(key)) if c]
        if not concepts:
            return None
        first = min(concepts, key=lambda c: (c.created_at, c.id))
        return Named(first.id, first.content)

    def place_scoped(self, key: ScopedKey, text: str, node_id: str, *, new: bool) -> None:
        self._placed.setdefault(key, Named(node_id, text, new))

    def ids_of(self, text: str, ctype: ConceptType) -> list[str]:
        """The session concepts a concept of the call with this text and type is."""
        key = self.own_path(text, ctype)
        if key is not None:
            return self.graph.paths.ids(key)
        return [c.id for c in self.lookup.concepts_with_key(canonical_key(text))]

    # -- admission's placeholders -----------------------------------------------------------------
    def place_own(self, text: str, ctype: ConceptType) -> str:
        """The node id (or placeholder) a concept the call writes itself lands on."""
        key = self.own_path(text, ctype)
        if key is not None:
            return self.land(text, Inferred(self.scoped(key), key))
        found = self.names.exact(text)
        node_id = found.node_id if found is not None else NEW_PREFIX + canonical_key(text)
        self.names.place(text, node_id, new=found is None or found.new)
        return node_id

    def place_target(self, field: str, text: str) -> str:
        """A produces / modifies entry (a resource): its node id or a placeholder."""
        key = self.named_path(text)
        if key is not None:
            return self.land(text, Inferred(self.scoped(key), key))
        return self.land(text, Inferred(self.names.named(field, text)))

    def land(self, text: str, inferred: Inferred) -> str:
        """Record where ``text`` landed at admission: a concept, or a new one's placeholder."""
        named, key = inferred.named, inferred.key
        if named is None:
            node_id = NEW_PREFIX + (f"\x00{key.repo}\x00{key.path}" if key else canonical_key(text))
            named = Named(node_id, text, new=True)
        if key is not None:
            self.place_scoped(key, text, named.node_id, new=named.new)
        else:
            self.names.place(text, named.node_id, new=named.new)
        return named.node_id

    # -- inferred types ---------------------------------------------------------------------------
    def infer(
        self, field: str, text: str, *, ids_accepted: bool = False, placed_first: bool = False
    ) -> Inferred:
        """What an action's depends_on text or a parent_of end names (see the module doc).

        ``placed_first``: a concept this call already wrote under the text is that text's
        concept (a parent_of end that is one of the call's concepts)."""
        if self.repo is None:
            return Inferred(self.names.named(field, text, ids_accepted=ids_accepted))
        key = lookup_key(self.repo, text)
        if placed_first:
            mine = self._placed.get(key)
            plain_mine = self.names.placed(text)
            if (mine is None) != (plain_mine is None):
                return Inferred(mine, key) if mine is not None else Inferred(plain_mine)
        scoped = self.scoped(key)
        plain = self.names.named(field, text, ids_accepted=ids_accepted)
        if scoped is not None and plain is not None and plain.node_id != scoped.node_id:
            raise self.refuse_ambiguous(field, text, [scoped], [plain])
        if scoped is not None:
            return Inferred(scoped, key)
        if plain is not None:
            return Inferred(plain)
        return Inferred(None, scoped_path(self.repo, text, type_named=False))

    def pair(
        self, where: str, parent: str, child: str, land: Callable[[str, Inferred], str]
    ) -> tuple[str, str]:
        """Both ends of one parent_of pair, landed in order by ``land``; a parent that is a
        directory of its scoped child (src over src/main.rs) is that repository's directory."""
        parent_end: Inferred | None = None
        if self.repo is not None:
            child_end = self.infer(f"{where}child", child, placed_first=True)
            if child_end.key is not None:
                directory = directory_of(parent, PathRef(child_end.key.path, True, False))
                if directory is not None:
                    key = scoped_key(self.repo, directory)
                    parent_end = Inferred(self.scoped(key), key)
        if parent_end is None:
            parent_end = self.infer(f"{where}parent", parent, placed_first=True)
        parent_id = land(parent, parent_end)
        return parent_id, land(child, self.infer(f"{where}child", child, placed_first=True))

    # -- citations (a derive's depends_on and against, an action's against) ------------------------
    def cited(self, field: str, ref: str) -> str | None:
        """The node a citation's text names under the scope, when a scoped path decides it;
        None leaves the reference to the ordinary reading (over ``lookup``)."""
        if is_node_id_form(ref) or self.lookup is self.graph:
            return None
        scoped = None if self.repo is None else self.scoped(lookup_key(self.repo, ref))
        if scoped is None:
            self._refuse_hidden(field, ref)
            return None
        if scoped.new:
            raise refuse_no_match(field, ref)  # a concept this call creates cannot be cited
        plain = match_reference(ref, self.lookup)
        others = [c for c in plain.concepts if c.id != scoped.node_id]
        if plain.form == "text" and others:
            theirs = [Named(c.id, c.content) for c in others]
            raise self.refuse_ambiguous(field, ref, [scoped], theirs)
        return scoped.node_id

    def _refuse_hidden(self, field: str, ref: str) -> None:
        """Text that names nothing here but a path on the other side of the scope line: the
        refusal says so, and how to cite it (by its id), rather than "matches nothing"."""
        if match_reference(ref, self.lookup).concepts:
            return
        hidden = [
            c
            for c in self.graph.concepts_with_key(canonical_key(ref))
            if concept_scoped_key(c) is not None or is_unscoped_path_resource(c)
        ]
        if not hidden:
            return
        ids = ", ".join(short_id(c.id) for c in hidden[:MAX_LISTED_CANDIDATES])
        if self.repo is None:
            why = "matches nothing in this session without a repo_scope"
        else:
            repo = show_safely(self.repo, SHOWN_REPO_CHARS)
            why = f'matches nothing in this session under repo_scope "{repo}"'
        raise refuse(
            field,
            ref,
            f"{why}; a path written under another repository or none is named by text only "
            f"there: cite it by its id ({ids})",
        )

    def still_names(self, ref: str, node_id: str) -> bool:
        """At apply time: whether a citation still names exactly ``node_id``."""
        if self.repo is not None and not is_node_id_form(ref):
            scoped = self.scoped(lookup_key(self.repo, ref))
            if scoped is not None:
                plain = match_reference(ref, self.lookup)
                others = [c for c in plain.concepts if c.id != scoped.node_id]
                return scoped.node_id == node_id and not (plain.form == "text" and others)
        return still_names(ref, node_id, self.lookup)

    # -- refusals ---------------------------------------------------------------------------------
    def refuse_ambiguous(
        self, field: str, text: str, scoped: Sequence[Named], plain: Sequence[Named]
    ) -> ReferenceRefused:
        """Text naming a scoped path and a concept of another type: each listed with its id."""
        items = [self._described(n, scoped=True) for n in scoped]
        items += [self._described(n, scoped=False) for n in plain]
        return refuse(field, text, f"matches several: {', '.join(items)}; name one by its id")

    def _described(self, named: Named, *, scoped: bool) -> str:
        label = "new in this call" if named.new else short_id(named.node_id)
        shown = f'{label} "{show_safely(named.content, 60)}"'
        concept = None if named.new else self.graph.concept(named.node_id)
        if scoped:
            repo = show_safely(self.repo or "", SHOWN_REPO_CHARS)
            return f'{shown} [Resource, repo "{repo}"]'
        if concept is not None:
            return f"{shown} [{concept.concept_type.label}]"
        return shown
