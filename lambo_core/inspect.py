"""lambo_inspect: one concept, its dependents, its edges both ways and its neighbourhood.

The focus is resolved exactly, by short id, then by a single substring (a bounded subset
past the scan cap); the result adds the admission section (``canon.admission``).
Spec: lambo_inspect, and Limits. Design notes: docs/design.md, recall.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .args import check_arguments, check_int, check_scope, require
from .canon.admission import admission_section
from .canon.history import CanonHistory
from .canon.rules import CanonRules
from .contradiction import DEFAULT_EDGE_MIN_AGE_S, contradictions
from .errors import ReferenceRefused, StoreError
from .index.graph import SessionGraph
from .model import Concept, Edge, EdgeType, Status, short_id
from .path_refs import path_key
from .recall.legs import keyword_query
from .recall.lines import contradicted_line, rests_on_lines
from .references import MAX_LISTED_CANDIDATES, match_reference
from .text import (
    canonical_key,
    check_agent_id,
    check_string,
    fold_case,
    format_rfc3339,
    show_safely,
)

if TYPE_CHECKING:
    from .session import Session

log = logging.getLogger(__name__)

TOOL = "lambo_inspect"
ARGUMENTS = ("agent_id", "focus", "depth", "scope")
DEPTH_RANGE = (0, 5)
DEFAULT_DEPTH = 2
NEIGHBOURS_MAX = 200  # rendered in all, across every hop
DEPENDENTS_MAX = 200  # listed; the count is always the full blast radius
EDGES_MAX = 400  # edge lines rendered (and structured edges)
CONTRADICTIONS_MAX = 50
SCAN_CAP = 2000  # concepts the substring leg scans in full
SUBSET_BY_RADIUS = 1000  # of the scan subset past the cap: the largest blast radii
PILLAR_CHUNK = 4096  # concepts measured per hold of the index lock
SUGGESTION_TERMS = 32  # keyword terms of the focus used to find suggestions
SHOWN_FOCUS_CHARS = 80
SNIPPET_CHARS = 80

ResolvedBy = Literal["node_id", "content", "short_id", "substring"]


_EDGE_VERBS = {
    EdgeType.DEPENDENCY: "depends on",
    EdgeType.HIERARCHICAL: "is the parent of",
    EdgeType.PRODUCES: "produces",
    EdgeType.MODIFIES: "modifies",
    EdgeType.CONTRADICTS: "contradicts",
    EdgeType.DERIVES: "derives",
    EdgeType.COOCCURRENCE: "was written with",
    EdgeType.SEMANTIC: "is similar to",
    EdgeType.SUPERSEDES_SUSPECTED: "may supersede",
}
_DEPENDENT_HOW = {
    EdgeType.DEPENDENCY: "depends on it",
    EdgeType.HIERARCHICAL: "its parent_of child",
}


# =====================================================================================
# arguments
# =====================================================================================


@dataclass(frozen=True)
class InspectRequest:
    agent_id: str
    focus: str
    depth: int


def parse_request(session: Session, args: object) -> InspectRequest:
    """Validate lambo_inspect's arguments in the spec's table order."""
    checked = check_arguments(TOOL, args, ARGUMENTS)
    agent_id = check_agent_id(require(checked, "agent_id"))
    focus = check_string("focus", require(checked, "focus"))
    depth = DEFAULT_DEPTH
    if checked.get("depth") is not None:
        depth = check_int("depth", checked["depth"], *DEPTH_RANGE)
    check_scope(checked.get("scope"), session.name)
    return InspectRequest(agent_id, focus, depth)


# =====================================================================================
# resolving the focus
# =====================================================================================


@dataclass(frozen=True)
class ScanNote:
    """The substring leg ran on a subset: ``scanned`` of the session's ``concepts``."""

    scanned: int
    concepts: int

    def sentence(self) -> str:
        return (
            f"the substring search covered {self.scanned} of the session's {self.concepts} "
            f"concepts (past the {SCAN_CAP}-concept scan cap it scans up to "
            f"{SUBSET_BY_RADIUS} with the largest blast radius, then the most recent); "
            "name a concept exactly or by id to reach the rest"
        )


@dataclass
class Resolution:
    """What the focus named: one concept, or the candidates of a refusal."""

    how: ResolvedBy
    matches: list[Concept]
    scan: ScanNote | None = None
    interaction: bool = False
    suggestions: list[Concept] = field(default_factory=list)


def pillar_ids(session: Session) -> list[str]:
    """The (at most 1,000) concepts with the largest blast radius, largest first.

    A full pass over the session, so it runs in chunks of ``PILLAR_CHUNK``
    concepts, each under its own short hold of the index lock, never blocking
    the writer for the whole pass; the caller must not hold the lock. The
    answer is cached per graph version (concepts written during the pass are
    caught by the recency part of the subset).
    """
    index = session.index
    with index.lock:
        graph = index.graph
        version = graph.version
        cached = index.pillars
        if cached is not None and cached[0] == version:
            return cached[1]
        ids = graph.concept_ids()
    scored: list[tuple[int, int, str]] = []  # (radius, write order, id)
    for start in range(0, len(ids), PILLAR_CHUNK):
        with index.lock:
            graph = index.graph
            for order, node_id in enumerate(ids[start : start + PILLAR_CHUNK], start):
                if node_id in graph:
                    radius = graph.blast_radius(node_id)
                    if radius > 0:
                        scored.append((radius, order, node_id))
    # largest radius first; among equals the more recently written
    pillars = [node_id for *_, node_id in heapq.nlargest(SUBSET_BY_RADIUS, scored)]
    with index.lock:
        index.pillars = (version, pillars)
    return pillars


def scan_subset(graph: SessionGraph, pillars: Sequence[str]) -> list[Concept]:
    """Past the scan cap: ``pillars`` still present, then the most recently written, 2,000."""
    chosen: dict[str, Concept] = {}
    for node_id in pillars:
        concept = graph.concept(node_id)
        if concept is not None:
            chosen[node_id] = concept
    ids = graph.concept_ids()  # in write order, oldest first
    for node_id in reversed(ids):
        if len(chosen) >= SCAN_CAP:
            break
        if node_id not in chosen:
            concept = graph.concept(node_id)
            if concept is not None:
                chosen[node_id] = concept
    return list(chosen.values())


def _closest_first(concepts: Sequence[Concept]) -> list[Concept]:
    # The shortest text containing the focus is the closest to it; the oldest breaks ties,
    # then the order given (a stable sort: write order, for one call's concepts).
    return sorted(concepts, key=lambda c: (len(c.canonical_key), c.created_at))


def resolve_exactly(graph: SessionGraph, focus: str) -> Resolution | None:
    """Steps 1 and 2: a node id, exact text, or a short id (lock held); None if none names any."""
    match = match_reference(focus, graph)
    if match.interaction:
        return Resolution("node_id", [], interaction=True)
    concepts = list(match.concepts)
    if match.form == "text" or not concepts:
        concepts += scoped_spellings(graph, focus, concepts)
    if concepts:
        how: ResolvedBy = "content" if match.form == "text" or not match.concepts else match.form
        return Resolution(how, concepts)
    return None


def scoped_spellings(graph: SessionGraph, focus: str, found: Sequence[Concept]) -> list[Concept]:
    """Scoped paths the focus names in another spelling (README.md for README.md:12, in any
    repository): text matching several is never resolved to one of them quietly."""
    ref = path_key(focus) if len(graph.paths) else None
    if ref is None:
        return []
    have = {c.id for c in found}
    extra = [graph.concept(i) for i in graph.paths.ids_with_path(ref.key) if i not in have]
    return sorted((c for c in extra if c is not None), key=lambda c: (c.created_at, c.id))


def resolve_focus(
    graph: SessionGraph, focus: str, pillars: Sequence[str] | None = None
) -> Resolution:
    """Resolve ``focus`` by the rules in the module docstring (lock held); never raises.

    ``pillars`` (from ``pillar_ids``) seeds the subset the substring leg scans
    past the scan cap; without it that subset is the most recently written alone.
    """
    exact = resolve_exactly(graph, focus)
    if exact is not None:
        return exact
    # The substring leg ignores case, as it did before keys kept case; the exact leg does not.
    key = fold_case(canonical_key(focus))
    scan: ScanNote | None = None
    if len(graph) > SCAN_CAP:
        pool = scan_subset(graph, pillars or ())
        scan = ScanNote(len(pool), len(graph))
    else:
        pool = list(graph.iter_concepts())
    found = [c for c in pool if key in fold_case(c.canonical_key)]
    return Resolution("substring", _closest_first(found), scan=scan)


def suggest(session: Session, focus: str) -> list[Concept]:
    """The concepts closest to an unmatched focus by keyword, at most 10 (no lock held)."""
    terms = keyword_query(focus).split()[:SUGGESTION_TERMS]
    if not terms:
        return []
    try:
        ranked = session.index.keywords.search(" ".join(terms), MAX_LISTED_CANDIDATES)
    except Exception as exc:  # suggestions are a courtesy: the refusal stands without them
        log.warning("inspect suggestions: the keyword search failed: %r", exc)
        return []
    with session.index.lock:
        graph = session.index.graph
        found = (graph.concept(node_id) for node_id, _ in ranked)
        return [c for c in found if c is not None]


def _describe(concept: Concept) -> str:
    """``"<content…>" [Type]`` plus the repository of a scoped concept."""
    repo = f', repo "{show_safely(concept.repo_scope, 200)}"' if concept.repo_scope else ""
    return f'"{show_safely(concept.content, SNIPPET_CHARS)}" [{concept.concept_type.label}{repo}]'


def _listing(concepts: Sequence[Concept]) -> list[str]:
    listed = concepts[:MAX_LISTED_CANDIDATES]
    lines = [f"- {c.id} {_describe(c)}" for c in listed]
    if len(concepts) > len(listed):
        lines.append(f"- and {len(concepts) - len(listed)} more")
    return lines


def refuse_focus(focus: str, res: Resolution) -> ReferenceRefused:
    """The refusal for a focus that names no concept, or several."""
    shown = f'focus "{show_safely(focus, SHOWN_FOCUS_CHARS)}"'
    scan = f"; {res.scan.sentence()}" if res.scan is not None else ""
    if res.interaction:
        return ReferenceRefused(
            f"{shown} is an interaction's id, not a concept's; inspect one of the concepts "
            "it wrote by its node id or text"
        )
    if res.matches:
        how = {
            "content": "exactly",
            "short_id": "by short id",
            "node_id": "by node id",
            "substring": "as a substring",
        }[res.how]
        head = (
            f"{shown} matches {len(res.matches)} concepts {how}{scan}; "
            "name one exactly by its node id:"
        )
        return ReferenceRefused("\n".join([head, *_listing(res.matches)]))
    head = f"{shown} matches no concept in this session, exactly, by short id or as a substring"
    if not res.suggestions:
        return ReferenceRefused(f"{head}{scan}; no concept shares a word with it")
    lines = [f"{head}{scan}; the closest concepts:", *_listing(res.suggestions)]
    return ReferenceRefused("\n".join(lines))


# =====================================================================================
# the result
# =====================================================================================


def _admission(
    history: CanonHistory, node_id: str, now: float
) -> tuple[list[str], dict[str, Any] | None, str | None]:
    """The canonization section: its lines, the structured ``admission``, or a warning."""
    try:
        lines, data = admission_section(history, node_id, now)
    except StoreError as exc:
        if exc.detail:
            log.warning("inspect admission: %s", exc.detail)
        warning = (
            f"canonization: the store did not answer ({exc.render()}), so the admission "
            "section is left out"
        )
        return [], None, warning
    return lines, data, None


def _end(graph: SessionGraph, node_id: str, focus_id: str) -> str:
    if node_id == focus_id:
        return "this"
    concept = graph.concept(node_id)
    snippet = show_safely(concept.content, SNIPPET_CHARS) if concept is not None else ""
    return f'{short_id(node_id)} "{snippet}"'


def _label_line(concept: Concept, radius: int) -> str:
    kind = concept.concept_type.label
    if concept.status is Status.CANONICAL:
        kind += ", canonical"
    if concept.repo_scope:
        kind += f', repo "{show_safely(concept.repo_scope, 200)}"'
    return f"{concept.content} [{kind}] (id {short_id(concept.id)}, blast radius {radius})"


def render(
    session: Session,
    concept: Concept,
    res: Resolution,
    request: InspectRequest,
    *,
    promotion_policy: str,
    edge_min_age: float,
    canon_history: CanonHistory | None = None,
) -> tuple[str, dict[str, Any]]:
    """The inspect result for a resolved focus (lock held)."""
    graph = session.index.graph
    now = session.clock.now()
    node_id = concept.id
    lines: list[str] = []
    if res.how == "substring":
        note = f"; {res.scan.sentence()}" if res.scan is not None else ""
        lines.append(
            f'focus "{show_safely(request.focus, SHOWN_FOCUS_CHARS)}" resolved as a substring '
            f"of this one concept's text{note}"
        )

    dependent_edges = graph.dependent_edges(node_id)
    radius = len(dependent_edges)
    access = concept.access_count + session.access_counts.pending(node_id)
    lines.append(_label_line(concept, radius))
    written = f"written by {concept.agent_id} at {format_rfc3339(concept.created_at)}"
    if concept.about_time != concept.created_at:
        written += f" (event time {format_rfc3339(concept.about_time)})"
    lines.append(
        f"node_id {node_id}, status {concept.status.label}, {written}, access count {access}"
    )

    # contradictions: every one that fires now, newest first (recall shows only the first)
    firing = contradictions(graph, node_id, now, edge_min_age)
    warnings = [contradicted_line(graph, info) for info in firing[:CONTRADICTIONS_MAX]]
    if len(firing) > CONTRADICTIONS_MAX:
        warnings.append(f"⚠ Contradicted {len(firing) - CONTRADICTIONS_MAX} more times")
    warnings += rests_on_lines(graph, node_id, now, edge_min_age)
    lines += warnings

    # dependents
    lines.append(f"dependents ({radius}):")
    dependents: list[dict[str, Any]] = []
    for dep_id, edge_type in dependent_edges[:DEPENDENTS_MAX]:
        dep = graph.concept(dep_id)
        if dep is None:  # pragma: no cover - dependent_edges lists concepts only
            continue
        label = show_safely(dep.content, SNIPPET_CHARS)
        dependents.append({"node_id": dep_id, "label": label, "edge_type": edge_type.value})
        lines.append(f"  {short_id(dep_id)} {_describe(dep)} ({_DEPENDENT_HOW[edge_type]})")
    dependents_truncated = radius > len(dependents)
    if dependents_truncated:
        lines.append(f"  … and {radius - len(dependents)} more (dependents_truncated)")

    # admission
    history = canon_history or CanonHistory(
        session,
        CanonRules(
            policy="solo" if promotion_policy.lower() == "solo" else "swarm",
            edge_min_age_s=edge_min_age,
        ),
    )
    admission_text, admission, unanswered = _admission(history, node_id, now)
    lines += admission_text
    if unanswered is not None:
        lines.append(unanswered)
        warnings.append(unanswered)

    # neighbourhood
    neighbourhood = graph.neighbours(node_id, request.depth, NEIGHBOURS_MAX)
    hops = neighbourhood.hops
    edges = neighbourhood.edges
    shown_edges = edges[:EDGES_MAX]
    if request.depth == 0:
        lines.append("neighbourhood (depth 0): not walked")
    else:
        lines.append(
            f"neighbourhood (depth {request.depth}): {len(hops)} "
            f"{'concept' if len(hops) == 1 else 'concepts'}, {len(edges)} "
            f"{'edge' if len(edges) == 1 else 'edges'}"
        )
    for edge in shown_edges:
        hop = max(hops.get(edge.src, 0), hops.get(edge.dst, 0))
        lines.append(
            f"  hop {hop}: {_end(graph, edge.src, node_id)} {_EDGE_VERBS[edge.edge_type]} "
            f"{_end(graph, edge.dst, node_id)}"
        )
    if len(edges) > len(shown_edges):
        lines.append(f"  … and {len(edges) - len(shown_edges)} more edges not rendered")
    if neighbourhood.truncated:
        lines.append(
            f"the neighbourhood stops at {NEIGHBOURS_MAX} neighbours; more concepts lie "
            f"within depth {request.depth}: inspect one of them, or a smaller depth"
        )

    structured: dict[str, Any] = {
        "node_id": node_id,
        "content": concept.content,
        "concept_type": concept.concept_type.label,
        "status": concept.status.label,
        "is_canonical": concept.status is Status.CANONICAL,
        "blast_radius": radius,
        "created_at": format_rfc3339(concept.created_at),
        "agent_id": concept.agent_id,
        "access_count": access,
        "resolved_by": res.how,
        "depth": request.depth,
        "dependents": dependents,
        "dependents_truncated": dependents_truncated,
        "admission": admission,
        "neighbours": _neighbours(graph, hops),
        "neighbours_truncated": neighbourhood.truncated,
        "edges": [_edge_dict(e) for e in shown_edges],
        "edges_truncated": len(edges) > len(shown_edges),
        "warnings": warnings,
    }
    if concept.repo_scope:
        structured["repo_scope"] = concept.repo_scope
    if res.scan is not None:
        structured["substring_scan"] = {
            "scanned": res.scan.scanned,
            "concepts": res.scan.concepts,
        }
    return "\n".join(lines), structured


def _neighbours(graph: SessionGraph, hops: Mapping[str, int]) -> list[dict[str, Any]]:
    out = []
    for node_id, hop in hops.items():
        concept = graph.concept(node_id)
        if concept is None:  # pragma: no cover - the walk steps only onto concepts
            continue
        out.append(
            {
                "node_id": node_id,
                "label": show_safely(concept.content, SNIPPET_CHARS),
                "concept_type": concept.concept_type.label,
                "hop": hop,
            }
        )
    return out


def _edge_dict(edge: Edge) -> dict[str, Any]:
    return {
        "src": edge.src,
        "dst": edge.dst,
        "edge_type": edge.edge_type.value,
        "weight": edge.weight,
    }


# =====================================================================================
# the tool
# =====================================================================================


def run_inspect(
    session: Session,
    args: Mapping[str, Any],
    *,
    promotion_policy: str,
    edge_min_age: float = DEFAULT_EDGE_MIN_AGE_S,
    canon_history: CanonHistory | None = None,
) -> tuple[str, dict[str, Any]]:
    """Answer one lambo_inspect call: (text, structuredContent).

    ``promotion_policy`` is the running policy ("swarm" or "solo");
    ``edge_min_age`` the canonization age floor the contradiction rule uses;
    ``canon_history`` the session's demotion history, whose rules the admission
    gates measure with (when absent: one read for this call under the defaults of
    that policy and age floor).
    """
    request = parse_request(session, args)
    index = session.index

    def answer(res: Resolution) -> tuple[str, dict[str, Any]]:
        if len(res.matches) == 1:
            return render(
                session,
                res.matches[0],
                res,
                request,
                promotion_policy=promotion_policy,
                edge_min_age=edge_min_age,
                canon_history=canon_history,
            )
        raise refuse_focus(request.focus, res)

    with index.lock:
        exact = resolve_exactly(index.graph, request.focus)
        if exact is not None:
            return answer(exact)
        large = len(index.graph) > SCAN_CAP
    # The substring leg; past the scan cap, measure blast radii without holding the lock.
    pillars = pillar_ids(session) if large else None
    with index.lock:
        res = resolve_focus(index.graph, request.focus, pillars)
        if res.matches:
            return answer(res)
    res.suggestions = suggest(session, request.focus)
    raise refuse_focus(request.focus, res)
