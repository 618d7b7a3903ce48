"""Fusing the legs into candidates, scoring them and ordering them (spec: lambo_recall, and
[fusion] under Configuration).

Relevance to the question comes first: the legs' fused score plus the exact names it
carries. Under ``[fusion] standing = "tiebreak"`` (the default) a concept's standing (its
base score: use, recency, density, type, and Canonical status) adds at most
``STANDING_SPAN``, so it breaks near-ties and never lifts a concept over one the question
matches clearly better. ``"half"`` is the spec system's ``0.5 * base + 0.5 * relevance`` with
Canonical query hits first. Design notes: docs/design.md, recall.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..index.caches import LegResults
from ..index.keywords import tokenize
from ..model import Status
from ..scoring import EdgeView, base_parts, interaction_count
from .legs import LEG_KEYWORD, LEG_RECENT, LEG_VECTOR, RECENT_SCORE

if TYPE_CHECKING:
    from ..config import Config
    from ..session import Session

FUSION_METHODS = ("max", "rrf", "sum")
STANDINGS = ("tiebreak", "half")

# "tiebreak": standing adds at most this to a score, so a relevance lead above it always wins
STANDING_SPAN = 0.1
CANONICAL_SHARE = 0.5  # of the span, Canonical status: it outweighs every other standing
BASE_MIN, BASE_MAX = -0.10, 1.40  # scoring.base_parts' range
RECENT_NUDGE = 0.05  # "tiebreak": a concept of the latest interactions, a near-tie breaker
# Relevance a question's exact names add (per share of them a concept carries): more than
# both rescaled legs together can give, so the concept that carries the name wins.
NAME_WEIGHT = 2.0

# Placement notes on a hit's label: why a hit sits where its score alone would not put it.
PLACED_CANONICAL_FIRST = "canonical first"
PLACED_AFTER_MATCHES = "recent, after the matches"
PLACED_VIA_GRAPH = "via graph"
PLACED_KEPT = "kept past top_k"


@dataclass(frozen=True)
class Ranking:
    """How candidates are ranked: ``[fusion] method``, ``rrf_k`` and ``standing``."""

    method: str = "sum"
    rrf_k: int = 60
    standing: str = "tiebreak"

    def __post_init__(self) -> None:
        if self.method not in FUSION_METHODS:
            raise ConfigError(f"[fusion] method must be one of {', '.join(FUSION_METHODS)}")
        if self.standing not in STANDINGS:
            raise ConfigError(f"[fusion] standing must be one of {', '.join(STANDINGS)}")

    @classmethod
    def from_config(cls, config: Config) -> Ranking:
        return cls(
            method=str(config.get("fusion.method")),
            rrf_k=int(config.get("fusion.rrf_k")),
            standing=str(config.get("fusion.standing")),
        )

    @property
    def tiebreak(self) -> bool:
        return self.standing == "tiebreak"


@dataclass
class Candidate:
    node_id: str
    keyword: float | None = None
    vector: float | None = None
    recent: float | None = None
    names: float = 0.0  # the share of the question's exact names its text carries
    ranks: dict[str, int] = field(default_factory=dict)  # leg -> 1-based rank
    # the leg relevance under max and under rrf, whichever method ranked (for --ledger)
    fused: dict[str, float] = field(default_factory=dict)
    relevance: float = 0.0
    base: float = 0.0
    score: float = 0.0
    expanded: bool = False
    canonical: bool = False
    lifted_by_recent: bool = False
    placed: str = ""  # why it sits where its score alone would not put it (a PLACED_* note)

    @property
    def named(self) -> bool:
        """The question names it: the keyword leg matched it, or it carries a name asked."""
        return self.keyword is not None or self.names > 0


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
    ranking: Ranking,
    *,
    normalize: bool | None = None,
    keyword_coverage: Mapping[str, float] | None = None,
    names: Mapping[str, float] | None = None,
) -> dict[str, Candidate]:
    """Candidates from every leg with their relevance to the question.

    Raw BM25 (often 2 to 15) and cosine (0 to 1) are not on one scale. When
    keyword and vector scores are fused (``normalize``; by default whenever
    the vector leg ran), each of those two legs is rescaled over its own
    candidates (its best is 1, the score just past its last candidate 0), and
    a keyword score is then weighted by ``keyword_coverage``, the share of the
    question's content words the concept contains, so one shared generic word
    does not count as a full match. A keyword-only recall keeps raw BM25.

    - ``sum`` (the default): keyword plus vector score (CombSUM);
    - ``max``: the highest of a candidate's leg scores;
    - ``rrf``: each leg's ``1 / (rrf_k + rank)``, rescaled over the leg's
      requested depth (rank 1 is 1, rank ``depth + 1`` would be 0), summed.

    ``names`` is each candidate's share of the question's exact names (the
    concepts the name searches found, and any other candidate that carries
    one); it adds ``NAME_WEIGHT`` times that share (times the top raw score
    when scores are raw). The recent leg: under ``tiebreak`` it adds
    ``RECENT_NUDGE``; under ``half`` it scores its fixed 0.5 as a leg (in
    ``max`` and ``sum`` a floor, in ``rrf`` weighted by 0.5), and a hit only it
    lifted goes after every hit the question names (``order_candidates``).
    """
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
    for node_id, share in (names or {}).items():
        if share > 0:
            found.setdefault(node_id, Candidate(node_id)).names = share
    name_scale = 1.0 if normalize else max([1.0, *(raw for _, raw in legs.keyword[:1])])
    for cand in found.values():
        _relevance(cand, ranking, depth)
        cand.relevance += NAME_WEIGHT * name_scale * cand.names
    return found


def _relevance(cand: Candidate, ranking: Ranking, depth: int) -> None:
    """``cand``'s fused leg relevance, whether only the recent leg lifted it, and (for the
    ledger's fusion) what ``max`` and ``rrf`` would have fused; ranking reads only its own."""
    for method in FUSED_SHOWN:
        cand.fused[method] = _fused(cand, method, ranking, depth)[0]
    cand.relevance, without = _fused(cand, ranking.method, ranking, depth)
    cand.lifted_by_recent = not ranking.tiebreak and cand.relevance > without and not cand.named


def _fused(cand: Candidate, method: str, ranking: Ranking, depth: int) -> tuple[float, float]:
    """(``cand``'s leg relevance under ``method``, the same without the recent leg)."""
    top, bottom = 1.0 / (ranking.rrf_k + 1), 1.0 / (ranking.rrf_k + depth + 1)

    def rrf(rank: int) -> float:
        return (1.0 / (ranking.rrf_k + rank) - bottom) / (top - bottom)

    if method == "rrf":
        without = sum(rrf(r) for leg, r in cand.ranks.items() if leg != LEG_RECENT)
    else:
        scores = [s for s in (cand.keyword, cand.vector) if s is not None]
        without = sum(scores) if method == "sum" else max(scores, default=0.0)
    if cand.recent is None:
        return without, without
    if ranking.tiebreak:
        return without + RECENT_NUDGE, without
    if method == "rrf":
        return without + RECENT_SCORE * rrf(cand.ranks[LEG_RECENT]), without
    return max(without, cand.recent), without


# the ledger's leg names for a hit's ranks (spec: lambo_recall, "With --ledger ...")
FUSION_RANK_KEYS = (
    (LEG_KEYWORD, "bm25_rank"),
    (LEG_RECENT, "recent_rank"),
    (LEG_VECTOR, "vector_rank"),
)
FUSED_SHOWN = ("max", "rrf")


def fusion_of(cand: Candidate) -> dict[str, Any] | None:
    """A hit's fusion: its rank in each leg that found it and both fused values; None for
    a hit no query leg found (graph expansion, a concept beside a contradicted hit)."""
    if not cand.ranks:
        return None
    ranks = cand.ranks
    out: dict[str, Any] = {key: ranks[leg] for leg, key in FUSION_RANK_KEYS if leg in ranks}
    out.update((m, round(cand.fused[m], 6)) for m in FUSED_SHOWN if m in cand.fused)
    return out


def rank_key(cand: Candidate, ranking: Ranking) -> tuple[int, float, str]:
    """Score order; under ``half``, Canonical query hits first."""
    first = 0 if cand.canonical and not cand.expanded and not ranking.tiebreak else 1
    return (first, -cand.score, cand.node_id)


def order_candidates(cands: Iterable[Candidate], ranking: Ranking) -> list[Candidate]:
    """By score (``half``: Canonical query hits first, and recent-lifted hits after every
    named one), each hit placed out of score order noting why on its label."""
    ranked = sorted(cands, key=lambda c: rank_key(c, ranking))
    last_named = max((i for i, c in enumerate(ranked) if c.named), default=-1)
    held = [c for c in ranked[: max(0, last_named)] if c.lifted_by_recent]
    if held:
        kept = [c for c in ranked[: last_named + 1] if not c.lifted_by_recent]
        ranked = kept + held + ranked[last_named + 1 :]
    best_after = -math.inf
    for cand in reversed(ranked):  # a hit above a better-scored one was placed by a rule
        if cand.expanded:
            cand.placed = PLACED_VIA_GRAPH
        elif cand.score < best_after and cand.canonical:
            cand.placed = PLACED_CANONICAL_FIRST
        else:
            cand.placed = ""  # (a candidate ordered again with what expansion reached)
        best_after = max(best_after, cand.score)
    for cand in held:
        cand.placed = PLACED_AFTER_MATCHES
    return ranked


class Scorer:
    """Scores against one snapshot of the session-wide denominators."""

    def __init__(self, session: Session, now: float, ranking: Ranking | None = None) -> None:
        self.session = session
        self.graph = session.index.graph
        self.now = now
        self.ranking = ranking or Ranking()
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
        cand.canonical = concept.status is Status.CANONICAL
        if self.ranking.tiebreak:
            cand.score = cand.relevance + standing(cand.base, cand.canonical)
        else:
            cand.score = 0.5 * cand.base + 0.5 * cand.relevance
        return True


def standing(base: float, canonical: bool) -> float:
    """What a concept's standing adds to its score under ``tiebreak``: 0 to ``STANDING_SPAN``."""
    share = min(1.0, max(0.0, (base - BASE_MIN) / (BASE_MAX - BASE_MIN)))
    return STANDING_SPAN * ((1.0 - CANONICAL_SHARE) * share + CANONICAL_SHARE * canonical)
