"""One lambo_recall call, step by step (spec: lambo_recall).

Arguments, a dependency question's answer, the legs (cached on the session's index),
fusion and scores, graph expansion, selection, the lines, then the context block.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

from ..canon.history import CanonHistory
from ..canon.rules import CanonRules
from ..context import render_context
from ..errors import LamboError
from ..index.caches import LegResults
from ..model import EdgeType
from ..selection import checked_count, select_distinct
from ..text import fold_case
from .by_vector import search_vector
from .dependency import DependencyAnchor, dependency_header, find_dependency_anchor
from .fusion import Candidate, Ranking, Scorer, coverage, fuse, order_candidates, rank_key
from .legs import (
    ALL_LEGS,
    CANDIDATES_PER_HIT,
    LEG_RECENT,
    LEG_VECTOR,
    keyword_query,
    run_legs,
    vector_state,
)
from .lines import (
    Annotator,
    Pick,
    describe,
    every_hit,
    history_line,
    select_with_contradictions,
    shows_supersession_line,
)
from .names import NameMatcher, name_shares
from .part_hits import QueryRelevance, part_hits
from .parts import DependencyPart, RecallParts
from .repo_subject import repository_of_subject
from .request import RecallDefaults, RecallRequest, RecallResult, parse_request

if TYPE_CHECKING:
    from ..alerts import Holder
    from ..index.graph import SessionGraph
    from ..session import Session

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
DEPENDENCY_ANSWER_RELEVANCE = 1.0  # the dependents are the answer to the question


def recall(
    session: Session,
    args: Mapping[str, Any],
    *,
    defaults: RecallDefaults,
    ranking: Ranking | None = None,
    legs: Collection[str] = ALL_LEGS,
    normalize: bool | None = None,
    holder: Holder | None = None,
    listing: Callable[[str], bool] | None = None,
    canon_history: CanonHistory | None = None,
) -> RecallResult:
    """Answer one lambo_recall call: ``recall_parts`` rendered by ``finish``.

    ``holder`` answers who holds a ``lambo_reserve`` lock on a node (the
    serve's ``LockTable.holder``), for the conflict lines. ``listing`` is the
    daemon's contradiction list once it has listed; None (no daemon runs here, as
    in tests and one-shot tools, or its first listing is not done yet): every hit
    is checked. ``canon_history`` is the session's demotion history (the
    service's; None: one built for this call under the default rules, which reads the
    stored canonization events again, so a caller that recalls often passes its own).
    ``ranking`` is ``[fusion]`` (the defaults when None). ``legs`` and
    ``normalize`` (see ``fuse``) are for the benchmarks: the served recall runs
    every leg it can and normalizes whenever the vector leg ran.
    """
    parts = recall_parts(
        session,
        args,
        defaults=defaults,
        ranking=ranking,
        legs=legs,
        normalize=normalize,
        holder=holder,
        listing=listing,
        canon_history=canon_history,
    )
    return finish(session, parts)


def recall_parts(
    session: Session,
    args: Mapping[str, Any],
    *,
    defaults: RecallDefaults,
    ranking: Ranking | None = None,
    legs: Collection[str] = ALL_LEGS,
    normalize: bool | None = None,
    holder: Holder | None = None,
    listing: Callable[[str], bool] | None = None,
    canon_history: CanonHistory | None = None,
) -> RecallParts:
    """What one lambo_recall call of ``session`` finds, before rendering (see ``recall``).

    Records no access counts: whoever renders the hits does (``finish``, or the
    caller of a merged recall for the hits it shows).
    """
    request = parse_request(session, args, defaults)
    ranking = ranking or Ranking()
    index = session.index
    graph = index.graph
    now = session.clock.now()

    with index.lock:
        # By image or vector, a structural question is answered by the blended recall:
        # traversal would ignore the image (spec: "Recall by image or by vector").
        by_vector = request.by is not None
        anchor = None if by_vector else find_dependency_anchor(graph, request.query)
        if anchor is not None:
            anchor, ambiguous = repository_of_subject(graph, anchor, request.query)
            if ambiguous is not None:  # a path in several repositories: none is answered
                return RecallParts(
                    session=session.name,
                    top_k=request.top_k,
                    max_tokens=request.max_tokens,
                    hits=(),
                    warnings=(ambiguous,),
                    ambiguous_subject=True,
                )
            return _dependency_answer(session, request, anchor, defaults, now, ranking)

    embedder, skipped_leg = (None, None)
    if request.by is not None:
        leg_results = _by_vector_legs(session, request, legs, defaults)
        embedder = _loaded_embedder(session)  # its merge threshold, for skip_redundant
    else:
        if LEG_VECTOR in legs:
            embedder, skipped_leg = vector_state(session, defaults.model_wait_ms / 1000.0)
        leg_results = _leg_results(session, request.query, request.top_k, legs, embedder)

    with index.lock:
        scorer = Scorer(session, now, ranking)
        ranked = _ranked(session, request, leg_results, scorer, normalize)
        listed = listing or every_hit
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
        if vectors is not None and (embedder is not None or leg_results.vector_ran):
            # one store call for the rows the repeat checks and relevance read (none in RAM)
            vectors.prefetch(c.node_id for c in ranked[: checked_count(request.top_k)])
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
        described = describe(
            graph,
            picks,
            defaults,
            now,
            history=lambda node_id: history_line(shown_history, node_id),
            notes=notes,
            skipped=selection.skipped,
        )
        if vectors is not None and leg_results.vector_ran:
            vectors.prefetch(p.cand.node_id for p in picks)  # usually all fetched above
        relevance = QueryRelevance(graph, request.query, leg_results, vectors)
        hits = part_hits(graph, picks, described, relevance, notes)

    return RecallParts(
        session=session.name,
        top_k=request.top_k,
        max_tokens=request.max_tokens,
        hits=tuple(hits),
        warnings=(skipped_leg.warning,) if skipped_leg is not None else (),
        notice=skipped_leg.notice if skipped_leg is not None else None,
    )


def _leg_results(
    session: Session, query: str, top_k: int, legs: Collection[str], embedder: Any
) -> LegResults:
    """The legs' raw results, from the index's leg cache when this query ran on this graph."""
    index = session.index
    depth = top_k * CANDIDATES_PER_HIT
    key = (index.graph.version, query, depth, tuple(sorted(legs)), embedder is not None)
    found = index.leg_cache.get(key)
    if found is None:
        found = run_legs(session, query, depth, legs, embedder)
        index.leg_cache.put(key, found)
    return found


def _by_vector_legs(
    session: Session, request: RecallRequest, legs: Collection[str], defaults: RecallDefaults
) -> LegResults:
    """The legs of a recall by image or vector, never cached: the vector leg by that
    vector, the keyword leg by the text beside it, and recent interactions only with text
    (without it they say nothing about the image, and their fixed score would outrank a
    real match)."""
    assert request.by is not None
    vector = search_vector(session, request.by, defaults.model_wait_ms / 1000.0)
    used = set(legs) if request.query else set(legs) - {LEG_RECENT}
    depth = request.top_k * CANDIDATES_PER_HIT
    return run_legs(session, request.query, depth, used, None, by=vector)


def _loaded_embedder(session: Session) -> Any:
    """The embedder if it has loaded, else None (a recall by vector does not wait for it)."""
    try:
        return session.embedder(0)
    except LamboError:
        return None


def _ranked(
    session: Session,
    request: RecallRequest,
    leg_results: LegResults,
    scorer: Scorer,
    normalize: bool | None,
) -> list[Candidate]:
    """Fused, scored and ordered candidates, with what expansion reached (lock held)."""
    graph = session.index.graph
    ranking = scorer.ranking
    shares = None
    if leg_results.keyword and (normalize or (normalize is None and leg_results.vector_ran)):
        shares = {}
        wanted = set(keyword_query(request.query).split())
        for node_id, _ in leg_results.keyword:
            concept = graph.concept(node_id)
            if concept is not None:
                shares[node_id] = coverage(wanted, concept.content)
    names = _name_shares(graph, leg_results)
    candidates = fuse(
        leg_results, ranking, normalize=normalize, keyword_coverage=shares, names=names
    )
    live = [c for c in candidates.values() if scorer.score(c)]
    ranked = order_candidates(live, ranking)
    if request.traversal_depth == 0 or not ranked:
        return ranked
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
    return order_candidates([*live, *extra], ranking) if extra else ranked


def _name_shares(graph: SessionGraph, legs: LegResults) -> dict[str, float]:
    """Each candidate's share of the question's exact names (none asked: empty)."""
    if not legs.names:
        return {}
    matcher = NameMatcher(legs.names)
    matches: dict[str, list[float]] = {}
    for hits in (legs.named, legs.keyword, legs.vector, legs.recent):
        for node_id, _ in hits:
            if node_id in matches:
                continue
            concept = graph.concept(node_id)
            if concept is not None:
                matches[node_id] = matcher.matches(concept.content)
    return name_shares(matches)


def _dependency_answer(
    session: Session,
    request: RecallRequest,
    anchor: DependencyAnchor,
    defaults: RecallDefaults,
    now: float,
    ranking: Ranking,
) -> RecallParts:
    """X's direct dependents, ranked like hits (lock held)."""
    graph = session.index.graph
    scorer = Scorer(session, now, ranking)
    cands = []
    for node_id in anchor.dependents:
        cand = Candidate(node_id, relevance=DEPENDENCY_ANSWER_RELEVANCE)
        if scorer.score(cand):
            cands.append(cand)
    ranked = sorted(cands, key=lambda c: rank_key(c, ranking))
    top = [Pick(c) for c in ranked[: request.top_k]]
    notes = Annotator(graph, now, defaults, scorer.view, caller=request.agent_id)
    described = describe(graph, top, defaults, now, traversal=True, notes=notes)
    hits = part_hits(graph, top, described, None, None)
    target = graph.concept(anchor.node_id)
    content = target.content if target is not None else anchor.node_id
    key = target.canonical_key if target is not None else anchor.node_id
    header = dependency_header(content, anchor.node_id, len(ranked), len(top))
    return RecallParts(
        session=session.name,
        top_k=request.top_k,
        max_tokens=request.max_tokens,
        hits=tuple(hits),
        dependency=DependencyPart(anchor.node_id, content, fold_case(key), header),
    )


def finish(session: Session, parts: RecallParts) -> RecallResult:
    """``parts`` rendered alone, as an unlayered session answers; records the access counts."""
    blocks = [hit.block for hit in parts.hits]
    hits = [dict(hit.hit) for hit in parts.hits]
    header = parts.dependency.header if parts.dependency is not None else None
    rendered = render_context(blocks, parts.max_tokens, header=header, notice=parts.notice)
    # The MCP shape marks only the cut hit (included_in_context is the detailed recall's).
    if rendered.truncated is not None:
        hits[rendered.truncated]["truncated_in_context"] = True
    session.access_counts.record(hit["node_id"] for hit in hits)
    return RecallResult(
        rendered.context,
        hits,
        parts.all_warnings(),
        annotations=[list(hit.annotations) for hit in parts.hits],
        fusion=[hit.fusion for hit in parts.hits],
    )
