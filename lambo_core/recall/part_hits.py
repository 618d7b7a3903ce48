"""Each picked hit as a ``PartHit``: its block and hit, and what a merged recall needs.

A hit's relevance here is on a scale that means the same in every session, unlike its
fused score, whose legs are rescaled over each session's own candidates (a layer's best
hit always scores as a full match there, however unrelated it is): the cosine of the
question and the concept when the vector leg ran, else the share of the question's content
words its text holds; either way at least the share of the question's exact names it
carries. A hit no query leg found (graph expansion, the recent leg, a companion pulled in
beside a contradicted hit) has none.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..model import ESTABLISHED
from ..repo_scope import concept_scoped_key
from .fusion import Candidate, coverage, fusion_of
from .legs import keyword_query
from .lines import Annotator, Described, Pick, contradicted_line
from .parts import (
    BASIS_GRAPH,
    BASIS_KEYWORD,
    BASIS_NONE,
    BASIS_RECENT,
    BASIS_TRAVERSAL,
    BASIS_VECTOR,
    KEPT_COMPANION,
    KEPT_CONFLICT,
    KEPT_CONTRADICTION,
    KEY_PATH,
    KEY_TEXT,
    PartHit,
)

if TYPE_CHECKING:
    from ..index.caches import LegResults
    from ..index.graph import SessionGraph
    from ..index.vectors import SessionVectors
    from ..model import Concept


class QueryRelevance:
    """A hit's relevance to one question (see the module doc); lock held."""

    def __init__(
        self, graph: SessionGraph, query: str, legs: LegResults, vectors: SessionVectors | None
    ) -> None:
        self.graph = graph
        self.wanted = set(keyword_query(query).split())
        self.query_vector = legs.query_vector if legs.vector_ran else None
        self.vectors = vectors

    def of(self, cand: Candidate, concept: Concept) -> tuple[float | None, str]:
        """(relevance or None, its basis)."""
        if cand.expanded:
            return None, BASIS_GRAPH
        if not cand.named and cand.vector is None:
            return None, BASIS_RECENT if cand.recent is not None else BASIS_NONE
        query = self.query_vector
        row = self.vectors.get(cand.node_id) if query is not None and self.vectors else None
        if row is not None and query is not None and row.shape == query.shape:
            return max(float(row @ query), cand.names), BASIS_VECTOR
        return max(coverage(self.wanted, concept.content), cand.names), BASIS_KEYWORD


def dedupe_key(concept: Concept) -> tuple[str, ...]:
    """What another session's copy of this memory shares: its repository and path for a
    scoped path, else its canonical text."""
    scoped = concept_scoped_key(concept)
    if scoped is not None:
        return (KEY_PATH, scoped.repo, scoped.path)
    return (KEY_TEXT, concept.canonical_key)


def part_hits(
    graph: SessionGraph,
    picks: Sequence[Pick],
    described: Described,
    relevance: QueryRelevance | None,
    notes: Annotator | None,
) -> list[PartHit]:
    """The picks with ``describe``'s output (lock held). ``relevance`` None: a dependency
    question's answer, whose hits pass a layer's floor by its anchor."""
    by_id = {p.cand.node_id: p for p in picks}
    out = []
    for block, hit, lines, notes_of in zip(
        described.blocks, described.hits, described.lines, described.annotations, strict=True
    ):
        pick = by_id[block.node_id]
        concept = graph.concept(block.node_id)
        assert concept is not None  # described under the same lock
        score, basis = (
            (None, BASIS_TRAVERSAL) if relevance is None else relevance.of(pick.cand, concept)
        )
        contradicted = pick.contradiction is not None and not pick.pulled_in
        established = concept.status in ESTABLISHED
        conflicted = notes is not None and relevance is not None and notes.conflicted(concept.id)
        out.append(
            PartHit(
                block=block,
                hit=hit,
                warnings=lines,
                relevance=score,
                basis=basis,
                kept=_kept(pick, established),
                keeps_past=not pick.pulled_in and ((contradicted and established) or conflicted),
                key=dedupe_key(concept),
                contradicted_by=pick.contradiction.by
                if contradicted and pick.contradiction
                else None,
                contradiction_line=(
                    contradicted_line(graph, pick.contradiction)
                    if contradicted and pick.contradiction is not None and relevance is not None
                    else None
                ),
                annotations=notes_of,
                fusion=fusion_of(pick.cand) if relevance is not None else None,
            )
        )
    return out


def _kept(pick: Pick, established: bool) -> str:
    if pick.pulled_in:
        return KEPT_COMPANION
    if not pick.kept:
        return ""
    return KEPT_CONTRADICTION if pick.contradiction is not None and established else KEPT_CONFLICT
