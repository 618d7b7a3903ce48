"""lambo_recall: query legs, fusion, graph expansion, dependency questions, the result.

A recall runs in this order:

1. **Arguments**, in the spec's table order (unknown names first). ``image``
   and ``query_vector`` are refused as configuration errors: this server has
   no image embedder and no client vectors yet.
2. **Dependency questions** ("what depends on X", "blast radius of X", "is it
   safe to delete X", ...): when the text names a concept others depend on,
   the answer is that concept's direct dependents, found by graph traversal
   (see ``find_dependency_anchor`` for the naming rules).
3. **Legs**, each returning raw scores:

   - keyword: the store's BM25 (FTS5, or the RAM index) over the query with
     function words left out, up to ``top_k * 4`` hits;
   - vector: cosine of the query's embedding against the session's matrix,
     up to ``top_k * 4`` hits; only when the session embeds. A model still
     loading is waited for up to ``[recall] model_wait_ms`` (no lock held);
     a recall that goes on without this leg (the model still loading, missing
     or failed) says so in a warning and in the context's first line
     (``VectorSkipped``), so an agent reading only the text knows its hits
     are keyword-only and whether retrying shortly can help;
   - recent: the concepts of the 3 most recent interactions at a fixed 0.5,
     at most ``top_k * 4`` of them.

4. **Fusion** (``fuse``): ``sum`` (the default) adds a hit's keyword and
   vector scores, ``max`` takes its highest leg score, ``rrf`` sums rescaled
   reciprocal ranks. Raw BM25 and cosine are on different scales, so when
   both are fused each is rescaled over its own candidates and a keyword
   score is weighted by how much of the question the concept covers; a
   keyword-only recall keeps raw BM25. The spec names ``max`` as the default;
   on the labelled set of ``tests/bench/recall_quality.py`` ``max`` only ties
   the vector leg (a paraphrased question's keyword score is rarely a hit's
   highest, so the keyword leg almost never changes the order), while ``sum``
   beats both legs, so ``sum`` is the default and ``max`` one setting away.
5. **Scores**: ``final = 0.5 * base + 0.5 * relevance`` where ``base`` is the
   concept's standing in the session (``base_parts``). Query hits that are
   Canonical sort first; then by final score, then id.
6. **The recent rule**: the recent leg must never push a real match out of
   the top k. A hit the recent leg lifted (its score rose because of the
   recent leg) and that the question does not name (no keyword match) is
   placed after every hit the question names.
7. **Expansion**: breadth-first from the top ``top_k`` hits to
   ``traversal_depth`` hops over Dependency, Causal (produces, modifies),
   Hierarchical, CoOccurrence and Semantic edges, holding at most
   ``max(20, 4 * top_k)`` concepts (nearest first); concepts reached this way
   carry relevance 0 and compete on their base score alone.
8. **Selection** (``selection.select_distinct``): the first ``top_k``, or with
   ``[selection] skip_redundant`` the first ``top_k`` distinct ones (a repeat
   is skipped and named on the hit kept, ``also``); a hit with a warning
   line of its own is never skipped.
9. **Kept past top_k** (``select_with_contradictions``, rules in
   ``contradiction.py``): a contradicted hit warns and has the contradicting
   concept beside it (``companion_of``); a contradicted Canonical or Venerable
   candidate is kept past top_k, and so is one with a conflict. Checked on
   every recall once the daemon has listed the contradiction (its budget
   holds); until its first listing after a start, every hit is checked, so a
   contradiction the store already holds is never missed. None of this on
   dependency answers.
10. **Lines** (``_describe``, ``Annotator``, ``alerts.py``): the pillar line,
    the high-risk alert on a fresh write to a load-bearing concept, conflict
    lines (concurrent edits, another agent's reservation), Contradicted,
    rests-on, and possibly superseded (#198: shown where the embedding
    contract was measured for it, or as ``[embedder]
    suspected_supersession_line`` says; ``possibly_superseded_by`` either way).
11. **The result**: the hits, their warning lines, the context block
    (``context.render_context``), and each returned hit's access counted in
    RAM (``session.access_counts``; the writer thread writes them behind).

The legs' raw results are cached per session (128 entries, keyed on the graph
version), so a repeated query costs only the ranking.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
import unicodedata
from collections import Counter, OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .alerts import conflict_lines, high_risk_line
from .args import check_arguments, check_int, check_scope, require
from .canon.history import CanonHistory
from .canon.rules import CanonRules
from .context import HitBlock, pillar_line, render_context
from .contradiction import DEFAULT_EDGE_MIN_AGE_S, ContradictionInfo, is_contradicted
from .embed.catalog import supersession_line_measured
from .embed.onnx import EmbedderLoading
from .errors import ConfigError, LamboError, ParameterError, StoreError
from .index.keywords import tokenize
from .model import ESTABLISHED, ConceptType, EdgeType, Status, short_id
from .owned import PerOwner
from .scoring import (
    EdgeView,
    base_parts,
    derives_adjacency,
    interaction_count,
    max_degree,
    recent_interactions,
)
from .selection import SelectionRules, Skipped, also_label, select_distinct, skipped_structured
from .text import MAX_STRING_BYTES, check_agent_id, check_string, format_rfc3339, show_safely

if TYPE_CHECKING:
    from .alerts import Holder
    from .config import Config
    from .index.graph import SessionGraph
    from .index.session_index import SessionIndex
    from .session import Session

log = logging.getLogger(__name__)

TOOL = "lambo_recall"
ARGUMENTS = (
    "agent_id",
    "query",
    "top_k",
    "max_tokens",
    "traversal_depth",
    "image",
    "query_vector",
    "scope",
)
TOP_K_RANGE = (1, 100)
MAX_TOKENS_RANGE = (1, 100_000)
DEPTH_RANGE = (0, 5)

LEG_KEYWORD = "keyword"
LEG_VECTOR = "vector"
LEG_RECENT = "recent"
ALL_LEGS: frozenset[str] = frozenset({LEG_KEYWORD, LEG_VECTOR, LEG_RECENT})

CANDIDATES_PER_HIT = 4  # each leg returns up to top_k * 4
RECENT_INTERACTIONS = 3
RECENT_SCORE = 0.5
EXPAND_EDGE_TYPES = (
    EdgeType.DEPENDENCY,
    EdgeType.PRODUCES,
    EdgeType.MODIFIES,
    EdgeType.HIERARCHICAL,
    EdgeType.COOCCURRENCE,
    EdgeType.SEMANTIC,
)
# concepts an expansion holds, seeds included: max(EXPAND_MIN, top_k * EXPAND_PER_HIT), in
# breadth-first order (nearer concepts first); reached concepts compete on base score alone
EXPAND_MIN = 20
EXPAND_PER_HIT = 4
LEG_CACHE_SIZE = 128
DEPENDENCY_ANSWER_RELEVANCE = 1.0  # the dependents are the answer to the question

VECTOR_LOADING_WARNING = (
    "recall: the vector leg was skipped because the embedding model is still loading; "
    "these hits come from keyword matching and recent interactions only"
)
# The context's first line when the vector leg did not run: what it means for the hits,
# why, and whether retrying helps.
KEYWORD_ONLY_NOTICE = (
    "Keyword-only recall: {why}, so these hits match your words, not their meaning, and a "
    "memory worded differently may be missing; {then}."
)
NOTICE_LOADING = KEYWORD_ONLY_NOTICE.format(
    why="the embedding model is still loading", then="retry shortly for semantic matches"
)
NOTICE_MISSING = KEYWORD_ONLY_NOTICE.format(
    why="this server has no usable embedding model (not installed or misconfigured)",
    then="retrying will not help until the operator installs one (lambo_stats: embedder missing)",
)
NOTICE_FAILED = KEYWORD_ONLY_NOTICE.format(
    why="the embedding model failed to load",
    then=(
        "retrying will not help until the operator fixes it and restarts the serve "
        "(lambo_stats: embedder failed)"
    ),
)


# =====================================================================================
# settings and results
# =====================================================================================


@dataclass(frozen=True)
class RecallDefaults:
    """The configured defaults ([recall] in lambo.toml)."""

    top_k: int = 5
    max_tokens: int = 500
    traversal_depth: int = 2
    pillar_threshold: int = 5
    # canonization_edge_min_age: supporting evidence counts against a contradiction once
    # this old ([canonization] edge_min_age_s)
    edge_min_age_s: float = DEFAULT_EDGE_MIN_AGE_S
    # [selection] skip_redundant, similar_signals
    selection: SelectionRules = field(default_factory=SelectionRules)
    # [embedder] suspected_supersession_line: auto (where measured), on, off
    supersession_line: str = "auto"
    # [recall] model_wait_ms: how long a recall waits for a model still loading
    model_wait_ms: int = 3000

    @classmethod
    def from_config(cls, config: Config) -> RecallDefaults:
        return cls(
            top_k=int(config.get("recall.top_k")),
            max_tokens=int(config.get("recall.max_tokens")),
            traversal_depth=int(config.get("recall.traversal_depth")),
            pillar_threshold=int(config.get("recall.pillar_threshold")),
            edge_min_age_s=float(config.get("canonization.edge_min_age_s")),
            selection=SelectionRules.from_config(config),
            supersession_line=str(config.get("embedder.suspected_supersession_line")),
            model_wait_ms=int(config.get("recall.model_wait_ms")),
        )


@dataclass
class RecallResult:
    """The context block (the tool's text), the hits and the warnings."""

    context: str
    hits: list[dict[str, Any]]
    warnings: list[str]

    def structured(self) -> dict[str, Any]:
        return {"context": self.context, "hits": self.hits, "warnings": self.warnings}


@dataclass(frozen=True)
class RecallRequest:
    """Validated arguments."""

    agent_id: str
    query: str
    top_k: int
    max_tokens: int
    traversal_depth: int


# =====================================================================================
# arguments
# =====================================================================================


def parse_request(session: Session, args: object, defaults: RecallDefaults) -> RecallRequest:
    """Validate lambo_recall's arguments in the spec's order; refusals name the rule."""
    checked = check_arguments(TOOL, args, ARGUMENTS)
    agent_id = check_agent_id(require(checked, "agent_id"))
    has_image = checked.get("image") is not None
    has_vector = checked.get("query_vector") is not None
    query = ""
    raw_query = checked.get("query")
    if raw_query is not None or not (has_image or has_vector):
        if raw_query is None:
            raise ParameterError("query is required (unless image or query_vector is sent)")
        query = check_string(
            "query", raw_query, max_bytes=MAX_STRING_BYTES, allow_empty=has_image or has_vector
        )
    top_k = _int_arg(checked, "top_k", defaults.top_k, TOP_K_RANGE)
    max_tokens = _int_arg(checked, "max_tokens", defaults.max_tokens, MAX_TOKENS_RANGE)
    depth = _int_arg(checked, "traversal_depth", defaults.traversal_depth, DEPTH_RANGE)
    if has_image and has_vector:
        raise ParameterError("send at most one of image, query_vector")
    if has_image:
        raise ConfigError(
            "recall by image needs an embedder that embeds images; this server's embedder "
            "embeds text only. Recall by text, or configure an embedder with the image modality"
        )
    if has_vector:
        raise ConfigError(
            "recall by query_vector needs client vectors enabled, [embedder] "
            "accept_client_vectors = true, which this server does not support yet; "
            "recall by text instead"
        )
    scope = checked.get("scope")
    if scope is not None:
        check_scope(scope, session.name)
    return RecallRequest(agent_id, query, top_k, max_tokens, depth)


def _int_arg(args: Mapping[str, Any], name: str, default: int, bounds: tuple[int, int]) -> int:
    value = args.get(name)
    if value is None:
        return default
    return check_int(name, value, *bounds)


# =====================================================================================
# function words
# =====================================================================================

# Left out of the keyword leg's query (when something else remains), and never
# an anchor of a dependency question on their own.
_FUNCTION_WORDS_TEXT = """
    a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing done down during each else
    few for from further had has have having he her here hers herself him himself his how i
    if in into is it its itself just me might more most must my myself no nor not now of off
    on once only or other ought our ours ourselves out over own same shall she should so some
    such than that the their theirs them themselves then there these they this those through
    to too under until up upon us very was we were what when where which while who whom whose
    why will with would yet you your yours yourself yourselves s t d ll m re ve
    anything something everything nothing anyone someone get got gets tell let lets please
    still also ever
"""
FUNCTION_WORDS = frozenset(_FUNCTION_WORDS_TEXT.split())


def keyword_query(query: str) -> str:
    """The query's terms minus function words (all of them if only function words remain)."""
    terms = tokenize(query)
    content = [t for t in terms if t not in FUNCTION_WORDS]
    return " ".join(content or terms)


# =====================================================================================
# legs and the leg cache
# =====================================================================================


@dataclass
class LegResults:
    """Raw leg results, best first: [(node id, raw score)].

    ``depth`` is how many candidates each leg was asked for; ``vector_ran`` says
    the vector leg searched (so keyword and vector scores are fused).
    """

    keyword: list[tuple[str, float]] = field(default_factory=list)
    vector: list[tuple[str, float]] = field(default_factory=list)
    recent: list[tuple[str, float]] = field(default_factory=list)
    depth: int = 0
    vector_ran: bool = False


class _LegCache:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: OrderedDict[tuple[Any, ...], LegResults] = OrderedDict()

    def get(self, key: tuple[Any, ...]) -> LegResults | None:
        with self.lock:
            found = self.entries.get(key)
            if found is not None:
                self.entries.move_to_end(key)
            return found

    def put(self, key: tuple[Any, ...], value: LegResults) -> None:
        with self.lock:
            self.entries[key] = value
            self.entries.move_to_end(key)
            while len(self.entries) > LEG_CACHE_SIZE:
                self.entries.popitem(last=False)


_LEG_CACHES: PerOwner[SessionIndex, _LegCache] = PerOwner(_LegCache)


@dataclass(frozen=True)
class VectorSkipped:
    """Why a recall of a session that embeds ran without its vector leg."""

    warning: str  # in warnings
    notice: str  # the context's first line


def _vector_state(session: Session, wait_s: float) -> tuple[Any, VectorSkipped | None]:
    """(the embedder or None, why the leg is skipped when the session embeds).

    A model still loading is waited for up to ``wait_s`` seconds. The caller
    holds no lock: writes and other reads go on meanwhile.
    """
    if not session.embeds:
        return None, None
    try:
        return session.embedder(wait_s), None
    except EmbedderLoading:
        return None, VectorSkipped(VECTOR_LOADING_WARNING, NOTICE_LOADING)
    except LamboError as exc:
        missing = session.plan.problem is not None  # no model to load; else its load failed
        warning = (
            f"recall: the vector leg was skipped ({exc.message}); these hits come from "
            "keyword matching and recent interactions only"
        )
        return None, VectorSkipped(warning, NOTICE_MISSING if missing else NOTICE_FAILED)


def _keyword_leg(index: SessionIndex, query: str, depth: int) -> list[tuple[str, float]]:
    text = keyword_query(query)
    if not text:
        return []
    try:
        return index.keywords.search(text, depth)
    except LamboError:
        raise
    except Exception as exc:
        raise StoreError(
            "the keyword search failed; the detail was logged", detail=repr(exc)
        ) from None


def run_legs(
    session: Session, query: str, depth: int, legs: Collection[str], embedder: Any
) -> LegResults:
    """Run the query legs (no lock held for the keyword and vector searches).

    One after the other: numpy's BLAS already spreads the scan over the cores,
    and a keyword search beside it in a thread measured slower, not faster.
    """
    index = session.index
    out = LegResults(depth=depth)
    if LEG_KEYWORD in legs:
        out.keyword = _keyword_leg(index, query, depth)
    matrix = index.vectors if LEG_VECTOR in legs and embedder is not None else None
    if matrix is not None and len(matrix) > 0:
        vector = embedder.embed_query(query)
        if vector.shape[-1] != matrix.dim:
            raise StoreError(
                f"the query vector has width {vector.shape[-1]} and the session's vectors "
                f"{matrix.dim}; re-check the session's embedding contract (lambo_stats) "
                "and retry"
            )
        out.vector = matrix.top_k(vector, depth)
        out.vector_ran = True
    if LEG_RECENT in legs:
        with index.lock:
            out.recent = _recent_leg(index.graph, depth)
    return out


def _recent_leg(graph: SessionGraph, limit: int) -> list[tuple[str, float]]:
    adjacency = derives_adjacency(graph)
    found: dict[str, float] = {}
    for interaction in recent_interactions(graph, RECENT_INTERACTIONS):
        for node in adjacency.get(interaction, {}):
            if node in graph and node not in found:
                found[node] = RECENT_SCORE
                if len(found) >= limit:
                    return list(found.items())
    return list(found.items())


# =====================================================================================
# candidates, fusion and ranking
# =====================================================================================


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


def _rank_key(cand: Candidate) -> tuple[int, float, str]:
    first = 0 if cand.canonical and not cand.expanded else 1
    return (first, -cand.score, cand.node_id)


def order_candidates(cands: Iterable[Candidate]) -> list[Candidate]:
    """Canonical query hits first, then by score; recent-lifted hits after every named one."""
    ranked = sorted(cands, key=_rank_key)
    last_named = max((i for i, c in enumerate(ranked) if c.named), default=-1)
    if last_named < 0:
        return ranked
    held = [c for c in ranked[:last_named] if c.lifted_by_recent]
    if not held:
        return ranked
    kept = [c for c in ranked[: last_named + 1] if not c.lifted_by_recent]
    return kept + held + ranked[last_named + 1 :]


class _Scorer:
    """Base scores against one snapshot of the session-wide denominators."""

    def __init__(self, session: Session, now: float, monotonic_now: float) -> None:
        self.session = session
        self.graph = session.index.graph
        self.now = now
        self.max_degree = max_degree(self.graph, monotonic_now)
        self.interactions = interaction_count(self.graph)
        self.view = EdgeView(self.graph)

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


# =====================================================================================
# dependency questions
# =====================================================================================

# Phrases that ask for a concept's dependents, as folded token sequences.
DEPENDENCY_MARKERS: tuple[tuple[str, ...], ...] = tuple(
    tuple(phrase.split())
    for phrase in (
        "what depends on",
        "what depend on",
        "who depends on",
        "which depend on",
        "which depends on",
        "anything depend on",
        "anything depends on",
        "everything that depends on",
        "dependents of",
        "dependent on",
        "blast radius of",
        "blast radius",
        "safe to delete",
        "safe to remove",
        "safe to drop",
        "what uses",
        "who uses",
        "what relies on",
        "who relies on",
        "what breaks if",
        "what would break if",
    )
)
# Every marker phrase contains one of these (a quick test before tokenizing).
_MARKER_HINTS = ("depend", "blast", "safe to", "uses", "relies", "break")
assert all(any(h in " ".join(m) for h in _MARKER_HINTS) for m in DEPENDENCY_MARKERS)
MAX_NAME_TOKENS = 64  # longest name (in tokens) looked for in a question
MAX_OCCURRENCES = 256  # a candidate named more often falls through to ordinary recall
SECURITY_GROUP = ("security", "group")
_SG_ID = re.compile(r"(?<![\w-])sg-[\w-]+")


@dataclass(frozen=True)
class _Token:
    start: int  # offsets into the NFC query
    end: int
    folded: str
    word: bool
    space_before: bool


@dataclass(frozen=True)
class _Occurrence:
    node_id: str
    first: int  # token indices [first, last)
    last: int
    key: str


@dataclass(frozen=True)
class DependencyAnchor:
    node_id: str
    dependents: list[str]
    how: str  # "named" or "security group"


def _is_word_char(ch: str) -> bool:
    return ch == "_" or unicodedata.category(ch)[0] in "LNM"


_DROPPED_INVISIBLES = frozenset("\u034f\u200c\u200d") | {chr(c) for c in range(0xFE00, 0xFE10)}


def question_tokens(text: str) -> list[_Token]:
    """Words (letters, digits, marks, ``_``; a hyphen between word characters joins) and
    single punctuation characters, with offsets into ``text`` and their folded form."""
    tokens: list[_Token] = []
    i, n = 0, len(text)
    space = False
    while i < n:
        ch = text[i]
        if ch.isspace():
            space = True
            i += 1
            continue
        if ch in _DROPPED_INVISIBLES:
            i += 1
            continue
        start = i
        if _is_word_char(ch):
            i += 1
            while i < n:
                c = text[i]
                joins = c == "-" and i + 1 < n and _is_word_char(text[i + 1])
                if _is_word_char(c) or c in _DROPPED_INVISIBLES or joins:
                    i += 1
                else:
                    break
            word = True
        else:
            i += 1
            word = False
        raw = "".join(c for c in text[start:i] if c not in _DROPPED_INVISIBLES)
        folded = unicodedata.normalize("NFC", raw.casefold())
        tokens.append(_Token(start, i, folded, word, space and bool(tokens)))
        space = False
    return tokens


def _span_key(tokens: Sequence[_Token], first: int, last: int) -> str:
    parts = [tokens[first].folded]
    for t in tokens[first + 1 : last]:
        if t.space_before:
            parts.append(" ")
        parts.append(t.folded)
    return "".join(parts)


def _markers(tokens: Sequence[_Token]) -> list[tuple[int, int]]:
    folded = [t.folded for t in tokens]
    found: list[tuple[int, int]] = []
    for i in range(len(folded)):
        for phrase in DEPENDENCY_MARKERS:
            if tuple(folded[i : i + len(phrase)]) == phrase:
                found.append((i, i + len(phrase)))
    return found


def _anchorable(occ: _Occurrence, tokens: Sequence[_Token], query: str) -> bool:
    """Not a function-word-only name (unless written as an uppercase acronym)."""
    words = [t for t in tokens[occ.first : occ.last] if t.word]
    if not words:
        return False
    if all(t.folded in FUNCTION_WORDS for t in words):
        original = query[tokens[occ.first].start : tokens[occ.last - 1].end]
        letters = [c for c in original if c.isalpha()]
        return len(letters) >= 2 and all(c.isupper() for c in letters)
    return True


def find_dependency_anchor(graph: SessionGraph, query: str) -> DependencyAnchor | None:
    """The concept a dependency question asks about, or None for an ordinary query.

    The caller holds the index lock. Rules (spec, "Dependency questions"):
    the question has a marker phrase; a name is a concept's whole text as
    whole words, case ignored after NFC (tokens make the word edges: a hyphen
    between word characters joins, punctuation is its own edge); it names a
    concept with dependents; a name inside a longer name is skipped unless the
    longer one overlaps the marker; marker phrases and function-word-only names
    do not anchor (an uppercase acronym written uppercase does); the name
    starting nearest after a marker wins, then Entity/Resource type, then
    length. A question naming nothing but "security group" takes the security
    group with the most dependents.
    """
    folded = query.casefold()
    if not any(hint in folded for hint in _MARKER_HINTS):
        return None  # no marker phrase can be in it: skip the tokenizer
    text = unicodedata.normalize("NFC", query)
    tokens = question_tokens(text)
    markers = _markers(tokens)
    if not markers:
        return None
    marker_tokens = {i for a, b in markers for i in range(a, b)}
    occurrences: list[_Occurrence] = []
    per_concept: Counter[str] = Counter()
    for first in range(len(tokens)):
        for last in range(first + 1, min(len(tokens), first + MAX_NAME_TOKENS) + 1):
            key = _span_key(tokens, first, last)
            for named in graph.concepts_with_key(key):
                occurrences.append(_Occurrence(named.id, first, last, key))
                per_concept[named.id] += 1
    if any(n > MAX_OCCURRENCES for n in per_concept.values()):
        return None

    def inside_marker(occ: _Occurrence) -> bool:
        return all(i in marker_tokens for i in range(occ.first, occ.last))

    def overlaps_marker(occ: _Occurrence) -> bool:
        return any(i in marker_tokens for i in range(occ.first, occ.last))

    names = [o for o in occurrences if not inside_marker(o) and _anchorable(o, tokens, text)]
    hiders = [o for o in names if not overlaps_marker(o)]
    visible = [
        o
        for o in names
        if not any(
            h.first <= o.first and o.last <= h.last and (h.last - h.first) > (o.last - o.first)
            for h in hiders
        )
    ]
    best: tuple[tuple[int, int, int, int, str], str, list[str]] | None = None
    for occ in visible:
        dependents = graph.dependents(occ.node_id)
        if not dependents:
            continue
        concept = graph.concept(occ.node_id)
        if concept is None:
            continue
        after = [occ.first - b for a, b in markers if b <= occ.first]
        before = [a - occ.last for a, b in markers if occ.last <= a]
        if after:
            group, distance = 0, min(after)
        else:
            group, distance = 1, min(before, default=len(tokens))
        kind = 0 if concept.concept_type in (ConceptType.ENTITY, ConceptType.RESOURCE) else 1
        rank = (group, distance, kind, -len(occ.key), occ.node_id)
        if best is None or rank < best[0]:
            best = (rank, occ.node_id, dependents)
    if best is not None:
        return DependencyAnchor(best[1], best[2], "named")
    singular = [t.folded.removesuffix("s") for t in tokens]
    says_sg = any(tuple(singular[i : i + 2]) == SECURITY_GROUP for i in range(len(singular) - 1))
    return _security_group(graph) if says_sg else None


def _security_group(graph: SessionGraph) -> DependencyAnchor | None:
    best: tuple[tuple[int, int, str], str, list[str]] | None = None
    for concept in graph.iter_concepts():
        key = concept.canonical_key
        if not (_says_security_group(key) or _SG_ID.search(key)):
            continue
        dependents = graph.dependents(concept.id)
        if not dependents:
            continue
        kind = 0 if concept.concept_type in (ConceptType.ENTITY, ConceptType.RESOURCE) else 1
        rank = (-len(dependents), kind, concept.id)
        if best is None or rank < best[0]:
            best = (rank, concept.id, dependents)
    if best is None:
        return None
    return DependencyAnchor(best[1], best[2], "security group")


def _says_security_group(key: str) -> bool:
    folded = [t.folded.removesuffix("s") for t in question_tokens(key)]
    return any(tuple(folded[i : i + 2]) == SECURITY_GROUP for i in range(len(folded) - 1))


def dependency_header(anchor_content: str, anchor_id: str, total: int, shown: int) -> str:
    noun = "concept depends" if total == 1 else "concepts depend"
    line = (
        f'Answered by graph traversal: {total} {noun} on "{show_safely(anchor_content, 80)}" '
        f"(id {short_id(anchor_id)})"
    )
    if shown < total:
        line += f"; the {shown} ranked highest are shown"
    return line + "."


# =====================================================================================
# recall
# =====================================================================================


def recall(
    session: Session,
    args: Mapping[str, Any],
    *,
    defaults: RecallDefaults,
    fusion: str = "sum",
    rrf_k: int = 60,
    legs: Collection[str] = ALL_LEGS,
    normalize: bool | None = None,
    holder: Holder | None = None,
    listing: Callable[[str], bool] | None = None,
    canon_history: CanonHistory | None = None,
) -> RecallResult:
    """Answer one lambo_recall call.

    ``holder`` answers who holds a ``lambo_reserve`` lock on a node (the
    serve's ``LockTable.holder``), for the conflict lines. ``listing`` is the
    daemon's contradiction list once it has listed; None (no daemon runs here, as
    in tests and one-shot tools, or its first listing is not done yet): every hit
    is checked. ``canon_history`` is the session's demotion history (the
    service's; None: one read for this call under the default rules). ``legs`` and
    ``normalize`` (see ``fuse``) are for the benchmarks: the served recall runs
    every leg it can and normalizes whenever the vector leg ran.
    """
    request = parse_request(session, args, defaults)
    index = session.index
    graph = index.graph
    now = session.clock.now()
    monotonic_now = time.monotonic()

    with index.lock:
        anchor = find_dependency_anchor(graph, request.query)
        if anchor is not None:
            return _dependency_answer(session, request, anchor, defaults, now, monotonic_now)

    embedder, skipped_leg = (None, None)
    if LEG_VECTOR in legs:
        embedder, skipped_leg = _vector_state(session, defaults.model_wait_ms / 1000.0)
    depth = request.top_k * CANDIDATES_PER_HIT
    cache_key = (
        graph.version,
        request.query,
        depth,
        tuple(sorted(legs)),
        embedder is not None,
    )
    cache = _LEG_CACHES.get(index)
    leg_results = cache.get(cache_key)
    if leg_results is None:
        leg_results = run_legs(session, request.query, depth, legs, embedder)
        cache.put(cache_key, leg_results)

    with index.lock:
        shares = None
        if leg_results.keyword and (normalize or (normalize is None and leg_results.vector_ran)):
            shares = {}
            wanted = set(keyword_query(request.query).split())
            for node_id, _ in leg_results.keyword:
                concept = graph.concept(node_id)
                if concept is not None:
                    shares[node_id] = coverage(wanted, concept.content)
        candidates = fuse(leg_results, fusion, rrf_k, normalize=normalize, keyword_coverage=shares)
        scorer = _Scorer(session, now, monotonic_now)
        live = [c for c in candidates.values() if scorer.score(c)]
        ranked = order_candidates(live)
        if request.traversal_depth > 0 and ranked:
            seeds = [c.node_id for c in ranked[: request.top_k]]
            limit = max(EXPAND_MIN, request.top_k * EXPAND_PER_HIT)
            reached = graph.expand(seeds, request.traversal_depth, EXPAND_EDGE_TYPES, limit=limit)
            extra = []
            for node_id in reached:
                if node_id in candidates:
                    continue
                cand = Candidate(node_id, expanded=True)
                if scorer.score(cand):
                    extra.append(cand)
            if extra:
                ranked = order_candidates([*live, *extra])
        listed = listing or _every_hit
        notes = Annotator(
            graph,
            now,
            defaults,
            scorer.view,
            caller=request.agent_id,
            holder=holder,
            listed=listed,
            supersession_line=shows_supersession_line(session, defaults),
        )
        vectors = index.vectors
        selection = select_distinct(
            graph,
            [c.node_id for c in ranked],
            request.top_k,
            defaults.selection,
            has_own_warning=notes.has_own_warning,
            merge_threshold=embedder.merge_threshold if embedder is not None else None,
            vector_of=vectors.get if vectors is not None else lambda _node_id: None,
        )
        by_id = {c.node_id: c for c in ranked}
        picks = select_with_contradictions(
            graph,
            ranked,
            request.top_k,
            now,
            defaults.edge_min_age_s,
            scorer,
            listed=listed,
            first=[by_id[node_id] for node_id in selection.taken],
            keep_past=notes.conflicted,
        )
        shown_history = canon_history or CanonHistory(session, CanonRules())
        blocks, hits, lines = _describe(
            graph,
            picks,
            defaults,
            now,
            history=lambda node_id: _history_line(shown_history, node_id),
            notes=notes,
            skipped=selection.skipped,
        )

    if skipped_leg is not None:
        lines.insert(0, skipped_leg.warning)
    notice = skipped_leg.notice if skipped_leg is not None else None
    return _finish(session, request, blocks, hits, lines, header=None, notice=notice)


# =====================================================================================
# contradictions: the warning, the concept beside it, and "rests on"
# =====================================================================================

QUOTE_CHARS = 80
RESTS_ON_LINES = 3


@dataclass
class Pick:
    """One hit of the result: why it is there and what it carries."""

    cand: Candidate
    contradiction: ContradictionInfo | None = None  # the hit's own Contradicted line
    companion_of: list[str] = field(default_factory=list)  # hits it was pulled in for
    contradicts: list[str] = field(default_factory=list)  # shown hits it contradicts
    pulled_in: bool = False  # only here as the concept beside a contradicted hit


def _every_hit(_node_id: str) -> bool:
    return True


def _listed_contradiction(
    graph: SessionGraph,
    node_id: str,
    now: float,
    edge_min_age: float,
    listed: Callable[[str], bool],
) -> ContradictionInfo | None:
    if not listed(node_id):
        return None
    return is_contradicted(graph, node_id, now, edge_min_age)


def select_with_contradictions(
    graph: SessionGraph,
    ranked: Sequence[Candidate],
    top_k: int,
    now: float,
    edge_min_age: float,
    scorer: _Scorer,
    *,
    listed: Callable[[str], bool] = lambda _node_id: True,
    first: Sequence[Candidate] | None = None,
    keep_past: Callable[[str], bool] = lambda _node_id: False,
) -> list[Pick]:
    """The first ``top_k``, plus what the warning rules keep or pull in (lock held).

    ``listed`` is the daemon's contradiction list (with its budget): a hit warns
    only once the daemon has listed it and the rule still holds now. ``first``
    is the hits that take the top_k slots when a selection rule chose them
    (``[selection] skip_redundant``); by default ``ranked[:top_k]``.

    A contradicted Canonical or Venerable candidate is kept past top_k, and so
    is one ``keep_past`` names (a conflict); any contradicted hit in the result
    has its contradicting concept beside it (added right after it, past top_k,
    unless that concept ranked in on its own). A concept pulled in this way is
    not itself checked (one level).
    """
    chosen = list(ranked[:top_k]) if first is None else list(first)
    taken = {c.node_id for c in chosen}
    picks = [Pick(c) for c in chosen]
    for cand in ranked:
        if cand.node_id in taken:
            continue
        concept = graph.concept(cand.node_id)
        if concept is None:
            continue
        info = None
        if concept.status in ESTABLISHED:
            info = _listed_contradiction(graph, cand.node_id, now, edge_min_age, listed)
        if info is not None or keep_past(cand.node_id):
            picks.append(Pick(cand, contradiction=info))
    for pick in picks:
        if pick.contradiction is None:
            pick.contradiction = _listed_contradiction(
                graph, pick.cand.node_id, now, edge_min_age, listed
            )
    by_id = {p.cand.node_id: p for p in picks}
    ordered: list[Pick] = []
    for pick in picks:
        ordered.append(pick)
        info = pick.contradiction
        if info is None:
            continue
        beside = by_id.get(info.by)
        if beside is None:
            ranked_too = next((c for c in ranked if c.node_id == info.by), None)
            if ranked_too is None:
                ranked_too = Candidate(info.by)
                if not scorer.score(ranked_too):
                    continue
            beside = by_id[info.by] = Pick(ranked_too, pulled_in=True)
            ordered.append(beside)
        if beside.pulled_in:
            beside.companion_of.append(pick.cand.node_id)
        beside.contradicts.append(pick.cand.node_id)
    return ordered


def contradicted_line(graph: SessionGraph, info: ContradictionInfo) -> str:
    by = graph.concept(info.by)
    quoted = f'"{show_safely(by.content, QUOTE_CHARS)}" ' if by is not None else ""
    return (
        f"⚠ Contradicted at {format_rfc3339(info.at)} by {info.agent_id}: "
        f"{quoted}(id {short_id(info.by)})"
    )


def contradicts_line(graph: SessionGraph, node_id: str) -> str:
    hit = graph.concept(node_id)
    quoted = f'"{show_safely(hit.content, QUOTE_CHARS)}" ' if hit is not None else ""
    return f"⚠ Contradicts {quoted}(id {short_id(node_id)})"


def rests_on_lines(graph: SessionGraph, node_id: str, now: float, edge_min_age: float) -> list[str]:
    """One line per contradicted concept the hit cites directly, at most 3, then a summary."""
    found: list[tuple[str, ContradictionInfo]] = []
    for edge in graph.edges_out(node_id, (EdgeType.DEPENDENCY,)):
        cited = edge.dst
        if cited == node_id or cited not in graph:
            continue
        if graph.edge(node_id, cited, EdgeType.CONTRADICTS) is not None:
            continue  # no line for a concept it contradicts itself
        info = is_contradicted(graph, cited, now, edge_min_age)
        if info is not None:
            found.append((cited, info))
    found.sort(key=lambda pair: pair[0])
    lines = []
    for cited, info in found[:RESTS_ON_LINES]:
        target = graph.concept(cited)
        by = graph.concept(info.by)
        cited_text = show_safely(target.content, QUOTE_CHARS) if target is not None else ""
        by_text = f'"{show_safely(by.content, QUOTE_CHARS)}" ' if by is not None else ""
        lines.append(
            f'⚠ Rests on a contradicted concept: "{cited_text}" (id {short_id(cited)}), '
            f"contradicted by {by_text}(id {short_id(info.by)})"
        )
    more = len(found) - RESTS_ON_LINES
    if more > 0:
        noun = "concept" if more == 1 else "concepts"
        lines.append(f"⚠ Rests on {more} more contradicted {noun}")
    return lines


# =====================================================================================
# the other per-hit lines: high risk, conflicts, possibly superseded
# =====================================================================================


def shows_supersession_line(session: Session, defaults: RecallDefaults) -> bool:
    """[embedder] suspected_supersession_line: on, off, or auto (only where it was measured)."""
    if defaults.supersession_line != "auto":
        return defaults.supersession_line == "on"
    # the server's contract: a session stamped with another is refused at open (or relabelled)
    return supersession_line_measured(dict(session.contract))


class Annotator:
    """One recall's view of the lines ``alerts`` and the supersession flag give (lock held).

    Conflict lines are worked out once per hit: selection asks whether a hit
    has a line of its own (it is then never skipped as a repeat), the keeping
    rule whether it has a conflict, and ``_describe`` for the lines.
    """

    def __init__(
        self,
        graph: SessionGraph,
        now: float,
        defaults: RecallDefaults,
        view: EdgeView,
        *,
        caller: str,
        holder: Holder | None = None,
        listed: Callable[[str], bool] = lambda _node_id: True,
        supersession_line: bool = False,
    ) -> None:
        self.graph = graph
        self.now = now
        self.defaults = defaults
        self.view = view
        self.caller = caller
        self.holder = holder
        self.listed = listed
        self.supersession_line = supersession_line
        self._conflicts: dict[str, list[str]] = {}

    def conflicts(self, node_id: str) -> list[str]:
        found = self._conflicts.get(node_id)
        if found is None:
            found = self._conflicts[node_id] = conflict_lines(
                self.graph, node_id, self.now, self.view, caller=self.caller, holder=self.holder
            )
        return found

    def conflicted(self, node_id: str) -> bool:
        return bool(self.conflicts(node_id))

    def high_risk(self, node_id: str, radius: int) -> str | None:
        return high_risk_line(
            self.graph,
            node_id,
            self.now,
            self.view,
            blast_radius=radius,
            threshold=self.defaults.pillar_threshold,
        )

    def has_own_warning(self, node_id: str) -> bool:
        """Whether the hit would carry a warning line of its own (never skipped then)."""
        radius = self.graph.blast_radius(node_id)
        edge_min_age = self.defaults.edge_min_age_s
        return (
            radius >= self.defaults.pillar_threshold
            or self.high_risk(node_id, radius) is not None
            or self.conflicted(node_id)
            or _listed_contradiction(self.graph, node_id, self.now, edge_min_age, self.listed)
            is not None
            or bool(rests_on_lines(self.graph, node_id, self.now, edge_min_age))
        )

    def replacements(self, node_id: str) -> list[str]:
        """Concepts flagged as possibly replacing ``node_id``, newest first (#198).

        A pair lapses once either names the other in against or depends_on.
        """
        graph = self.graph
        found = []
        for edge in graph.edges_in(node_id, (EdgeType.SUPERSEDES_SUSPECTED,)):
            newer = graph.concept(edge.src)
            if newer is None or _declared_between(graph, edge.src, node_id):
                continue
            found.append(newer)
        found.sort(key=lambda c: (-c.about_time, c.canonical_key, c.id))
        return [c.id for c in found]

    def superseded_line(self, replaced_by: Sequence[str], shown: Collection[str]) -> str | None:
        """The line naming the newest replacement that is in the result, where it is shown."""
        if not self.supersession_line:
            return None
        newer = next((node_id for node_id in replaced_by if node_id in shown), None)
        concept = self.graph.concept(newer) if newer is not None else None
        if concept is None:
            return None
        return (
            f'⚠ Possibly superseded by "{show_safely(concept.content, QUOTE_CHARS)}" '
            f"(id {short_id(concept.id)}), not declared"
        )


def _declared_between(graph: SessionGraph, a: str, b: str) -> bool:
    return any(
        graph.edge(src, dst, kind) is not None
        for src, dst in ((a, b), (b, a))
        for kind in (EdgeType.CONTRADICTS, EdgeType.DEPENDENCY)
    )


def _history_line(history: CanonHistory, node_id: str) -> str | None:
    """The ``⤓ Superseded at …`` line of a demoted concept (history, not a warning)."""
    try:
        line = history.superseded(node_id)
    except LamboError as exc:  # the line is history: a store that cannot say leaves it out
        log.warning("superseded history of %s not read: %s", node_id, exc.detail)
        return None
    return line.render() if line is not None else None


def _describe(
    graph: SessionGraph,
    picks: Sequence[Pick],
    defaults: RecallDefaults,
    now: float,
    *,
    traversal: bool = False,
    history: Callable[[str], str | None] = lambda _node_id: None,
    notes: Annotator | None = None,
    skipped: Mapping[str, Sequence[Skipped]] | None = None,
) -> tuple[list[HitBlock], list[dict[str, Any]], list[str]]:
    """Blocks, structured hits and warning lines for the picked hits (lock held).

    A hit's lines, in order: the pillar line, the high-risk alert, conflicts,
    its Contradicted line, rests-on lines, possibly superseded, then (for a
    contradicting concept) Contradicts lines and the superseded history. A
    dependency answer (``traversal``) carries only the pillar and high-risk
    lines; a concept pulled in beside a contradicted hit only its Contradicts
    line.
    """
    blocks: list[HitBlock] = []
    hits: list[dict[str, Any]] = []
    lines: list[str] = []
    shown = {pick.cand.node_id for pick in picks}
    for pick in picks:
        cand = pick.cand
        concept = graph.concept(cand.node_id)
        if concept is None:  # pragma: no cover - scored under the same lock
            continue
        radius = graph.blast_radius(cand.node_id)
        own: list[str] = []
        replaced_by: list[str] = []
        if not pick.pulled_in:
            if radius >= defaults.pillar_threshold:
                own.append(pillar_line(radius))
            risk = notes.high_risk(cand.node_id, radius) if notes is not None else None
            if risk is not None:
                own.append(risk)
            if notes is not None and not traversal:
                own.extend(notes.conflicts(cand.node_id))
            if pick.contradiction is not None and not traversal:
                own.append(contradicted_line(graph, pick.contradiction))
            if not traversal:
                own.extend(rests_on_lines(graph, cand.node_id, now, defaults.edge_min_age_s))
            if notes is not None and not traversal:
                replaced_by = notes.replacements(cand.node_id)
                line = notes.superseded_line(replaced_by, shown)
                if line is not None:
                    own.append(line)
        own.extend(contradicts_line(graph, target) for target in pick.contradicts)
        also = skipped.get(cand.node_id, ()) if skipped else ()
        past = history(cand.node_id) if not pick.pulled_in and not traversal else None
        blocks.append(
            HitBlock(
                node_id=concept.id,
                content=concept.content,
                type_label=concept.concept_type.label,
                canonical=concept.status is Status.CANONICAL,
                score=cand.score,
                blast_radius=radius,
                lines=(*own, past) if past else tuple(own),
                also=also_label(also),
            )
        )
        hit: dict[str, Any] = {
            "node_id": concept.id,
            "content": concept.content,
            "concept_type": concept.concept_type.label,
            "score": cand.score,
            "is_canonical": concept.status is Status.CANONICAL,
            "blast_radius": radius if radius > 0 else None,
        }
        if pick.companion_of:
            hit["companion_of"] = list(pick.companion_of)
        if replaced_by:
            hit["possibly_superseded_by"] = replaced_by[0]
        if also:
            hit["skipped_redundant"] = skipped_structured(also)
        hits.append(hit)
        lines.extend(own)
    return blocks, hits, lines


def _dependency_answer(
    session: Session,
    request: RecallRequest,
    anchor: DependencyAnchor,
    defaults: RecallDefaults,
    now: float,
    monotonic_now: float,
) -> RecallResult:
    """X's direct dependents, ranked like hits (lock held)."""
    graph = session.index.graph
    scorer = _Scorer(session, now, monotonic_now)
    cands = []
    for node_id in anchor.dependents:
        cand = Candidate(node_id, relevance=DEPENDENCY_ANSWER_RELEVANCE)
        if scorer.score(cand):
            cands.append(cand)
    ranked = sorted(cands, key=_rank_key)
    top = [Pick(c) for c in ranked[: request.top_k]]
    notes = Annotator(graph, now, defaults, scorer.view, caller=request.agent_id)
    blocks, hits, lines = _describe(graph, top, defaults, now, traversal=True, notes=notes)
    target = graph.concept(anchor.node_id)
    content = target.content if target is not None else anchor.node_id
    header = dependency_header(content, anchor.node_id, len(ranked), len(top))
    return _finish(session, request, blocks, hits, lines, header=header)


def _finish(
    session: Session,
    request: RecallRequest,
    blocks: list[HitBlock],
    hits: list[dict[str, Any]],
    warnings: list[str],
    *,
    header: str | None,
    notice: str | None = None,
) -> RecallResult:
    rendered = render_context(blocks, request.max_tokens, header=header, notice=notice)
    # The MCP shape marks only the cut hit (included_in_context is the detailed recall's).
    if rendered.truncated is not None:
        hits[rendered.truncated]["truncated_in_context"] = True
    session.access_counts.record(hit["node_id"] for hit in hits)
    return RecallResult(rendered.context, hits, warnings)
