"""Fusing the legs into candidates, scoring them and ordering them.

``final = 0.5 * base + 0.5 * relevance``; Canonical query hits sort first, and a hit
only the recent leg lifted goes after every hit the question names (spec: lambo_recall,
and [fusion] under Configuration).
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..index.caches import LegResults
from ..index.keywords import tokenize
from ..model import Status
from ..scoring import EdgeView, base_parts, interaction_count
from .legs import LEG_KEYWORD, LEG_RECENT, LEG_VECTOR, RECENT_SCORE

if TYPE_CHECKING:
    from ..session import Session


@dataclass
class Candidate:
    node_id: str
    keyword: float | None = None
    vector: float | None = None
    recent: float | None = None
    ranks: dict[str, int] = field(default_factory=dict)  # leg -> 1-based rank
    relevance: float = 0.0
    base: float = 0.0
    score: float = 0.0
    expanded: bool = False
    canonical: bool = False
    lifted_by_recent: bool = False

    @property
    def named(self) -> bool:
        """The question names it: the keyword leg matched it."""
        return self.keyword is not None


def _leg_floor(hits: Sequence[tuple[str, float]], depth: int, exhaustive_floor: float) -> float:
    """The score just past a leg's candidates: its last one, or (a short list) what the rest
    of the session scores (0 for BM25: every other concept shares no term)."""
    if not hits:
        return 0.0
    return hits[-1][1] if len(hits) >= depth else min(hits[-1][1], exhaustive_floor)


def _min_max(hits: Sequence[tuple[str, float]], floor: float) -> dict[str, float]:
    """Scores rescaled so the leg's best is 1 and its floor is 0."""
    if not hits:
        return {}
    top = hits[0][1]
    if top <= floor:
        return {node_id: 1.0 for node_id, _ in hits}
    return {node_id: max(0.0, (raw - floor) / (top - floor)) for node_id, raw in hits}


FUSION_METHODS = ("max", "rrf", "sum")


_ASCII_TERM = re.compile(r"[a-z0-9]+")


def terms_of(text: str) -> set[str]:
    """The keyword tokenizer's terms of ``text`` (a regex does it for plain ASCII)."""
    if text.isascii():
        return set(_ASCII_TERM.findall(text.lower()))
    return set(tokenize(text))


def coverage(wanted: Collection[str], content: str) -> float:
    """The share of the question's content words (``wanted``) the concept's text contains."""
    if not wanted:
        return 1.0
    return len(set(wanted) & terms_of(content)) / len(wanted)


def fuse(
    legs: LegResults,
    method: str,
    rrf_k: int,
    *,
    normalize: bool | None = None,
    keyword_coverage: Mapping[str, float] | None = None,
) -> dict[str, Candidate]:
    """Candidates from every leg with their fused relevance.

    Raw BM25 (often 2 to 15) and cosine (0 to 1) are not on one scale. When
    keyword and vector scores are fused (``normalize``; by default whenever
    the vector leg ran), each of those two legs is rescaled over its own
    candidates (its best is 1, the score just past its last candidate 0), and
    a keyword score is then weighted by ``keyword_coverage``, the share of the
    question's content words the concept contains, so one shared generic word
    does not count as a full match. A keyword-only recall keeps raw BM25 (the
    spec's example, 0.8565). The recent leg keeps its fixed 0.5 throughout.

    - ``max``: the highest of a candidate's leg scores;
    - ``rrf``: each leg's ``1 / (rrf_k + rank)``, rescaled over the leg's
      requested depth (rank 1 is 1, rank ``depth + 1`` would be 0), summed;
      the recent leg weighted by its fixed 0.5;
    - ``sum`` (the default): keyword plus vector score (CombSUM), the recent
      leg's 0.5 as a floor, as in ``max``.
    """
    if method not in FUSION_METHODS:
        raise ConfigError(f"[fusion] method must be one of {', '.join(FUSION_METHODS)}")
    if normalize is None:
        normalize = legs.vector_ran
    depth = max(legs.depth, len(legs.keyword), len(legs.vector), len(legs.recent), 1)
    vector_hits = [(node_id, max(0.0, raw)) for node_id, raw in legs.vector]
    keyword_norm = _min_max(legs.keyword, _leg_floor(legs.keyword, depth, 0.0))
    # a short vector list is the whole session: its last candidate is the floor
    vector_norm = _min_max(vector_hits, _leg_floor(vector_hits, depth, math.inf))
    found: dict[str, Candidate] = {}
    for leg, hits in (
        (LEG_KEYWORD, legs.keyword),
        (LEG_VECTOR, vector_hits),
        (LEG_RECENT, legs.recent),
    ):
        for rank, (node_id, raw) in enumerate(hits, start=1):
            cand = found.get(node_id)
            if cand is None:
                cand = found[node_id] = Candidate(node_id)
            if leg == LEG_KEYWORD:
                if normalize:
                    share = 1.0 if keyword_coverage is None else keyword_coverage.get(node_id, 1.0)
                    cand.keyword = keyword_norm[node_id] * share
                else:
                    cand.keyword = raw
            elif leg == LEG_VECTOR:
                cand.vector = vector_norm[node_id] if normalize else raw
            else:
                cand.recent = raw
            cand.ranks[leg] = rank
    top, bottom = 1.0 / (rrf_k + 1), 1.0 / (rrf_k + depth + 1)

    def rrf(rank: int) -> float:
        return (1.0 / (rrf_k + rank) - bottom) / (top - bottom)

    for cand in found.values():
        if method == "rrf":
            without = sum(rrf(r) for leg, r in cand.ranks.items() if leg != LEG_RECENT)
            recent_rank = cand.ranks.get(LEG_RECENT)
            cand.relevance = without + (
                RECENT_SCORE * rrf(recent_rank) if recent_rank is not None else 0.0
            )
        else:
            scores = [s for s in (cand.keyword, cand.vector) if s is not None]
            without = sum(scores) if method == "sum" else max(scores, default=0.0)
            cand.relevance = max(without, cand.recent or 0.0)
        cand.lifted_by_recent = cand.relevance > without and not cand.named
    return found


def rank_key(cand: Candidate) -> tuple[int, float, str]:
    first = 0 if cand.canonical and not cand.expanded else 1
    return (first, -cand.score, cand.node_id)


def order_candidates(cands: Iterable[Candidate]) -> list[Candidate]:
    """Canonical query hits first, then by score; recent-lifted hits after every named one."""
    ranked = sorted(cands, key=rank_key)
    last_named = max((i for i, c in enumerate(ranked) if c.named), default=-1)
    if last_named < 0:
        return ranked
    held = [c for c in ranked[:last_named] if c.lifted_by_recent]
    if not held:
        return ranked
    kept = [c for c in ranked[: last_named + 1] if not c.lifted_by_recent]
    return kept + held + ranked[last_named + 1 :]


class Scorer:
    """Base scores against one snapshot of the session-wide denominators."""

    def __init__(self, session: Session, now: float) -> None:
        self.session = session
        self.graph = session.index.graph
        self.now = now
        self.max_degree = self.graph.max_degree
        self.interactions = interaction_count(self.graph)
        self.view = EdgeView(self.graph, session.index.summaries)

    def score(self, cand: Candidate) -> bool:
        """Fill ``cand``'s base and final score; False if the concept is gone."""
        concept = self.graph.concept(cand.node_id)
        if concept is None:
            return False
        parts = base_parts(
            self.graph,
            concept,
            self.now,
            max_degree=self.max_degree,
            interactions=self.interactions,
            pending_access=self.session.access_counts.pending(cand.node_id),
            view=self.view,
        )
        cand.base = parts.total
        cand.score = 0.5 * cand.base + 0.5 * cand.relevance
        cand.canonical = concept.status is Status.CANONICAL
        return True
