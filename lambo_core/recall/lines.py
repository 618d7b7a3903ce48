"""The lines a recall hit carries, and the hits kept past top_k for them.

Contradicted, Contradicts and rests-on lines, conflicts and the high-risk alert
(``alerts.py``), possibly superseded, the superseded history (spec: lambo_recall,
Contradiction warnings through Superseded concepts).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..alerts import conflict_lines, high_risk_line
from ..canon.history import CanonHistory, SupersededLine
from ..context import HitBlock, pillar_line
from ..contradiction import ContradictionInfo, is_contradicted
from ..embed.catalog import supersession_line_measured
from ..errors import LamboError
from ..model import ESTABLISHED, EdgeType, Status, short_id
from ..scoring import EdgeView
from ..selection import Skipped, also_label, skipped_structured
from ..text import format_rfc3339, show_safely
from .fusion import PLACED_KEPT, Candidate, Scorer
from .request import RecallDefaults

if TYPE_CHECKING:
    from ..alerts import Holder
    from ..index.graph import SessionGraph
    from ..model import Concept
    from ..session import Session

log = logging.getLogger(__name__)


QUOTE_CHARS = 80
RESTS_ON_LINES = 3

# A hit's annotation kinds: which of its lines is which (spec: lambo_recall, the portal's
# /api/recall hits[].annotations and the --ledger recall line). Not in structuredContent.
ANNOTATION_CONTRADICTION = "contradiction"  # the hit's own Contradicted line
ANNOTATION_CONTRADICTS = "contradicts"  # the concept beside it: its Contradicts line
ANNOTATION_RESTS_ON = "rests_on_contradicted"  # each rests-on line
ANNOTATION_POSSIBLY_SUPERSEDED = "possibly_superseded"  # the possibly-superseded line
ANNOTATION_SUPERSEDED = "superseded"  # the superseded history that ends a block
ANNOTATION_KINDS = (
    ANNOTATION_CONTRADICTION,
    ANNOTATION_CONTRADICTS,
    ANNOTATION_RESTS_ON,
    ANNOTATION_POSSIBLY_SUPERSEDED,
    ANNOTATION_SUPERSEDED,
)


def annotation(kind: str, line: str, **ids: str) -> dict[str, str]:
    """One annotation: its kind, the exact line the hit shows, and the ids it names."""
    return {"kind": kind, "line": line, **ids}


@dataclass
class Described:
    """``describe``'s output, one entry per hit in order: its block, its structured hit,
    its warning lines and its annotations."""

    blocks: list[HitBlock] = field(default_factory=list)
    hits: list[dict[str, Any]] = field(default_factory=list)
    lines: list[tuple[str, ...]] = field(default_factory=list)
    annotations: list[tuple[dict[str, str], ...]] = field(default_factory=list)


@dataclass
class Pick:
    """One hit of the result: why it is there and what it carries."""

    cand: Candidate
    contradiction: ContradictionInfo | None = None  # the hit's own Contradicted line
    companion_of: list[str] = field(default_factory=list)  # hits it was pulled in for
    contradicts: list[str] = field(default_factory=list)  # shown hits it contradicts
    pulled_in: bool = False  # only here as the concept beside a contradicted hit
    kept: bool = False  # kept past top_k for a warning (a contradiction or a conflict)


def every_hit(_node_id: str) -> bool:
    return True


def listed_contradiction(
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
    scorer: Scorer,
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
            info = listed_contradiction(graph, cand.node_id, now, edge_min_age, listed)
        if info is not None or keep_past(cand.node_id):
            picks.append(Pick(cand, contradiction=info, kept=True))
    for pick in picks:
        if pick.contradiction is None:
            pick.contradiction = listed_contradiction(
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
    return [line for line, _ in rests_on_annotated(graph, node_id, now, edge_min_age)]


def rests_on_annotated(
    graph: SessionGraph, node_id: str, now: float, edge_min_age: float
) -> list[tuple[str, dict[str, str]]]:
    """``rests_on_lines`` with what each line names: the cited concept and the one that
    contradicts it (the summary line names none)."""
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
    lines: list[tuple[str, dict[str, str]]] = []
    for cited, info in found[:RESTS_ON_LINES]:
        target = graph.concept(cited)
        by = graph.concept(info.by)
        cited_text = show_safely(target.content, QUOTE_CHARS) if target is not None else ""
        by_text = f'"{show_safely(by.content, QUOTE_CHARS)}" ' if by is not None else ""
        line = (
            f'⚠ Rests on a contradicted concept: "{cited_text}" (id {short_id(cited)}), '
            f"contradicted by {by_text}(id {short_id(info.by)})"
        )
        lines.append((line, {"cited": cited, "by": info.by}))
    more = len(found) - RESTS_ON_LINES
    if more > 0:
        noun = "concept" if more == 1 else "concepts"
        lines.append((f"⚠ Rests on {more} more contradicted {noun}", {}))
    return lines


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
    rule whether it has a conflict, and ``describe`` for the lines.
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
            or listed_contradiction(self.graph, node_id, self.now, edge_min_age, self.listed)
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
        concept = self._shown_replacement(replaced_by, shown)
        if concept is None:
            return None
        return (
            f'⚠ Possibly superseded by "{show_safely(concept.content, QUOTE_CHARS)}" '
            f"(id {short_id(concept.id)}), not declared"
        )

    def shown_replacement(self, replaced_by: Sequence[str], shown: Collection[str]) -> str | None:
        """The id ``superseded_line`` names (None where it shows none)."""
        concept = self._shown_replacement(replaced_by, shown)
        return concept.id if concept is not None else None

    def _shown_replacement(
        self, replaced_by: Sequence[str], shown: Collection[str]
    ) -> Concept | None:
        if not self.supersession_line:
            return None
        newer = next((node_id for node_id in replaced_by if node_id in shown), None)
        return self.graph.concept(newer) if newer is not None else None


def _declared_between(graph: SessionGraph, a: str, b: str) -> bool:
    return any(
        graph.edge(src, dst, kind) is not None
        for src, dst in ((a, b), (b, a))
        for kind in (EdgeType.CONTRADICTS, EdgeType.DEPENDENCY)
    )


def history_line(history: CanonHistory, node_id: str) -> SupersededLine | None:
    """The ``⤓ Superseded at …`` line of a demoted concept (history, not a warning)."""
    try:
        line = history.superseded(node_id)
    except LamboError as exc:  # the line is history: a store that cannot say leaves it out
        log.warning("superseded history of %s not read: %s", node_id, exc.detail)
        return None
    return line


def _own_lines(
    graph: SessionGraph,
    pick: Pick,
    radius: int,
    own: list[str],
    notes_of: list[dict[str, str]],
    defaults: RecallDefaults,
    now: float,
    traversal: bool,
    notes: Annotator | None,
    shown: Collection[str],
) -> list[str]:
    """A hit's own lines, before any Contradicts line, onto ``own`` and their annotations
    onto ``notes_of``; returns the concepts flagged as possibly replacing it."""
    node_id = pick.cand.node_id
    if radius >= defaults.pillar_threshold:
        own.append(pillar_line(radius))
    risk = notes.high_risk(node_id, radius) if notes is not None else None
    if risk is not None:
        own.append(risk)
    if traversal:
        return []
    if notes is not None:
        own.extend(notes.conflicts(node_id))
    if pick.contradiction is not None:
        line = contradicted_line(graph, pick.contradiction)
        own.append(line)
        notes_of.append(annotation(ANNOTATION_CONTRADICTION, line, by=pick.contradiction.by))
    for line, ids in rests_on_annotated(graph, node_id, now, defaults.edge_min_age_s):
        own.append(line)
        notes_of.append(annotation(ANNOTATION_RESTS_ON, line, **ids))
    if notes is None:
        return []
    replaced_by = notes.replacements(node_id)
    flagged = notes.superseded_line(replaced_by, shown)
    newer = notes.shown_replacement(replaced_by, shown)
    if flagged is not None and newer is not None:
        own.append(flagged)
        notes_of.append(annotation(ANNOTATION_POSSIBLY_SUPERSEDED, flagged, by=newer))
    return replaced_by


def describe(
    graph: SessionGraph,
    picks: Sequence[Pick],
    defaults: RecallDefaults,
    now: float,
    *,
    traversal: bool = False,
    history: Callable[[str], SupersededLine | None] = lambda _node_id: None,
    notes: Annotator | None = None,
    skipped: Mapping[str, Sequence[Skipped]] | None = None,
) -> Described:
    """Blocks, structured hits, warning lines and annotations of the picked hits (lock held).

    The warnings are the block's lines less the superseded history, which ends
    the block and is not a warning.

    A hit's lines, in order: the pillar line, the high-risk alert, conflicts,
    its Contradicted line, rests-on lines, possibly superseded, then (for a
    contradicting concept) Contradicts lines and the superseded history. A
    dependency answer (``traversal``) carries only the pillar and high-risk
    lines; a concept pulled in beside a contradicted hit only its Contradicts
    line.
    """
    out = Described()
    shown = {pick.cand.node_id for pick in picks}
    for pick in picks:
        cand = pick.cand
        concept = graph.concept(cand.node_id)
        if concept is None:  # pragma: no cover - scored under the same lock
            continue
        radius = graph.blast_radius(cand.node_id)
        own: list[str] = []
        notes_of: list[dict[str, str]] = []
        replaced_by: list[str] = []
        if not pick.pulled_in:
            replaced_by = _own_lines(
                graph, pick, radius, own, notes_of, defaults, now, traversal, notes, shown
            )
        for target in pick.contradicts:
            line = contradicts_line(graph, target)
            own.append(line)
            notes_of.append(annotation(ANNOTATION_CONTRADICTS, line, target=target))
        also = skipped.get(cand.node_id, ()) if skipped else ()
        demoted = history(cand.node_id) if not pick.pulled_in and not traversal else None
        past = demoted.render() if demoted is not None else None
        if demoted is not None and past:
            notes_of.append(annotation(ANNOTATION_SUPERSEDED, past, by=demoted.by))
        out.blocks.append(
            HitBlock(
                node_id=concept.id,
                content=concept.content,
                type_label=concept.concept_type.label,
                canonical=concept.status is Status.CANONICAL,
                score=cand.score,
                blast_radius=radius,
                lines=(*own, past) if past else tuple(own),
                also=also_label(also),
                placed=PLACED_KEPT if pick.kept else pick.cand.placed,
                repo_scope=concept.repo_scope or "",
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
        if concept.repo_scope:
            hit["repo_scope"] = concept.repo_scope
        if pick.companion_of:
            hit["companion_of"] = list(pick.companion_of)
        if replaced_by:
            hit["possibly_superseded_by"] = replaced_by[0]
        if also:
            hit["skipped_redundant"] = skipped_structured(also)
        out.hits.append(hit)
        out.lines.append(tuple(own))
        out.annotations.append(tuple(notes_of))
    return out
