"""Recall's query legs: keyword (BM25), vector (cosine) and recent interactions.

Each leg returns raw scores, up to ``top_k * 4`` hits (spec: lambo_recall, the store table);
a vector leg that cannot run says why in a warning and in the context's first line.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..embed.loader import EmbedderLoading
from ..errors import LamboError, StoreError
from ..index.caches import LegResults
from ..index.keywords import tokenize
from ..scoring import derives_adjacency, recent_interactions
from .names import question_names

if TYPE_CHECKING:
    from ..index.graph import SessionGraph
    from ..index.session_index import SessionIndex
    from ..index.vectors import SessionVectors
    from ..model import Vector
    from ..session import Session

LEG_KEYWORD = "keyword"
LEG_VECTOR = "vector"
LEG_RECENT = "recent"
ALL_LEGS: frozenset[str] = frozenset({LEG_KEYWORD, LEG_VECTOR, LEG_RECENT})

CANDIDATES_PER_HIT = 4  # each leg returns up to top_k * 4
RECENT_INTERACTIONS = 3
RECENT_SCORE = 0.5

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

# The spec's error row for a vector read refused (spec: Errors): nothing of the refusal is
# shown, and retrying after a look at the session's contract is the way out.
SEARCH_FAILED = (
    "the vector search failed, so nothing was answered from the other legs; re-check the "
    "session's embedding contract (lambo_stats) and retry; the detail was logged"
)


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


@dataclass(frozen=True)
class VectorSkipped:
    """Why a recall of a session that embeds ran without its vector leg."""

    warning: str  # in warnings
    notice: str  # the context's first line


def vector_state(session: Session, wait_s: float) -> tuple[Any, VectorSkipped | None]:
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


def _name_searches(
    index: SessionIndex, names: tuple[str, ...], depth: int
) -> list[tuple[str, float]]:
    """The concepts the keyword index holds for each exact name, one search a name (its
    terms alone, so a name's concept is found however many other words the question has)."""
    found: dict[str, float] = {}
    for name in names:
        for node_id, raw in _keyword_leg(index, " ".join(tokenize(name)), depth):
            found.setdefault(node_id, raw)
    return list(found.items())


def run_legs(
    session: Session,
    query: str,
    depth: int,
    legs: Collection[str],
    embedder: Any,
    *,
    by: Vector | None = None,
) -> LegResults:
    """Run the query legs (no lock held for the keyword and vector searches).

    One after the other: numpy's BLAS already spreads the scan over the cores,
    and a keyword search beside it in a thread measured slower, not faster. ``by``: the
    vector leg searches by this vector (an image's or a client's) instead of the query's
    embedding, and any failure of it is an error (``by_vector.search``).
    """
    index = session.index
    out = LegResults(depth=depth)
    if LEG_KEYWORD in legs:
        out.keyword = _keyword_leg(index, query, depth)
        out.names = tuple(question_names(query))
        out.named = _name_searches(index, out.names, depth)
    wanted = LEG_VECTOR in legs and (embedder is not None or by is not None)
    matrix = index.vectors if wanted else None
    if matrix is not None and matrix:  # StoreVectors answers without a store call
        if by is not None:
            vector = by
            out.vector = _search_by(matrix, vector, depth)
        else:
            vector = embedder.embed_query(query)
            _check_width(vector, matrix)
            out.vector = matrix.top_k(vector, depth)
        out.vector_ran = True
        out.query_vector = vector
    if LEG_RECENT in legs:
        with index.lock:
            out.recent = _recent_leg(index.graph, depth)
    return out


def _check_width(vector: Vector, matrix: SessionVectors) -> None:
    if vector.shape[-1] != matrix.dim:
        raise StoreError(
            f"the query vector has width {vector.shape[-1]} and the session's vectors "
            f"{matrix.dim}; re-check the session's embedding contract (lambo_stats) and retry"
        )


def _search_by(matrix: SessionVectors, vector: Vector, depth: int) -> list[tuple[str, float]]:
    """The vector leg by an image's or a client's vector: a width the session's vectors do
    not have, or any failure of the store's search, is the spec's store error, never an
    answer from the other legs."""
    _check_width(vector, matrix)
    try:
        return matrix.top_k(vector, depth)
    except LamboError as exc:
        raise StoreError(SEARCH_FAILED, detail=exc.detail or exc.render()) from None
    except Exception as exc:  # only its class: a driver's text might quote the vector
        detail = f"{type(exc).__name__} in the vector search"
        raise StoreError(SEARCH_FAILED, detail=detail) from None


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
