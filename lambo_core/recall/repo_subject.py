"""A dependency question whose subject is a path in several repositories (issue #17).

The spec's "Reading them back" (Repository-scoped paths): text that matches a scoped path and
another concept is never resolved to one of them quietly. "what depends on README.md", with
README.md written under two repositories, answers for none of them: no hits and one warning
naming each. Naming the repository in the question ("... in github.com/acme/widgets") answers
for that repository's file. A path in one repository only, or a subject that is no scoped path,
is answered as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model import Concept, short_id
from ..path_refs import path_key
from ..repo_scope import concept_scoped_key, is_unscoped_path_resource, repos_named_in
from ..text import show_safely
from .dependency import DependencyAnchor

if TYPE_CHECKING:
    from ..index.graph import SessionGraph

MAX_LISTED = 10
SHOWN_CHARS = 80


def repository_of_subject(
    graph: SessionGraph, anchor: DependencyAnchor, question: str
) -> tuple[DependencyAnchor, str | None]:
    """The anchor to answer for, and the warning when the subject names a path in several
    repositories and the question names none of them (then nothing is answered)."""
    subject = graph.concept(anchor.node_id)
    if subject is None:
        return anchor, None
    path = _path_of(subject)
    if path is None or len(graph.paths) == 0:
        return anchor, None
    candidates = _candidates(graph, path)
    repos = {c.repo_scope or "" for c in candidates}
    if len(repos) < 2:
        return anchor, None
    scoped = [c for c in candidates if c.repo_scope]
    named = repos_named_in(question, [c.repo_scope or "" for c in scoped])
    if len(named) == 1:
        chosen = next(c for c in scoped if c.repo_scope == named[0])
        return DependencyAnchor(chosen.id, graph.dependents(chosen.id), anchor.how), None
    return anchor, _warning(path, candidates)


def _path_of(concept: Concept) -> str | None:
    scoped = concept_scoped_key(concept)
    if scoped is not None:
        return scoped.path
    if is_unscoped_path_resource(concept):
        ref = path_key(concept.content)
        return ref.key if ref is not None else None
    return None


def _candidates(graph: SessionGraph, path: str) -> list[Concept]:
    """Every scoped concept at ``path``, and the unscoped path Resources spelled so, oldest
    first."""
    found = {i: graph.concept(i) for i in graph.paths.ids_with_path(path)}
    for concept in graph.concepts_with_key(path):
        if is_unscoped_path_resource(concept):
            found[concept.id] = concept
    return sorted((c for c in found.values() if c is not None), key=lambda c: (c.created_at, c.id))


def _warning(path: str, candidates: list[Concept]) -> str:
    items = []
    for concept in candidates[:MAX_LISTED]:
        item = f"{short_id(concept.id)} {show_safely(concept.content, SHOWN_CHARS)}"
        if concept.repo_scope:
            item += f' (repo "{show_safely(concept.repo_scope, 200)}")'
        items.append(item)
    if len(candidates) > MAX_LISTED:
        items.append(f"and {len(candidates) - MAX_LISTED} more")
    return (
        f'recall: "{show_safely(path, SHOWN_CHARS)}" names {len(candidates)} concepts in '
        f"different repositories: {'; '.join(items)}; name the repository in the question to "
        "ask about one"
    )
