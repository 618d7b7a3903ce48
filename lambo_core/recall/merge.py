"""A layered session's recall: its own parts and each layer's, merged under one budget.

Spec: lambo_recall, "Layered sessions" (and the Layered bullets of contradiction warnings,
duplicate hits and dependency questions). The rules, in the order they apply:

- A layer that is not serving (its parts None) leaves one warning naming it and the
  sessions that did answer.
- Floors: every hit of the session counts. A layer hit counts only with a relevance of its
  own at or above that layer's floor (graph expansion and the recent leg alone have
  none). A dependency answer counts by its anchor instead: a layer's traversal answer
  only when its anchor's folded key is the caller's, or when the caller resolved none;
  while the caller answers by traversal, a layer's ordinary hits do not count.
- Order: each session's own rank order, interleaved round by round, the session first
  and then the layers in their configured order, until one merged top_k is filled.
  Scores are each session's own and are not compared.
- Dedupe: copies of one memory in several sessions (the same canonical text, or the same
  repository and path for a scoped path) are one hit, shown where its first copy comes
  in the merged order, as the nearest session's copy (the session's own, else the first
  layer's); the label names the others, ``also <id> in general``, with what that layer
  skipped for its copy after it (and ``also_skipped_redundant`` on the hit). A merged
  copy's Contradicted line stays in the warnings, prefixed with its layer's name.
- Past top_k: a hit its session keeps for a warning (a contradicted Canonical or
  Venerable hit, a conflict) is kept past the merged top_k if it counts; a contradicted
  hit that is shown has the concept beside it right after it, if that concept counts.
- A layer hit's block says ``from <layer>``, its warning lines (in the block and in
  warnings) and its leading warnings start with ``[<layer>] ``, and a cut block's marker
  names the scope. Every hit carries ``session``. One ``render_context`` over all blocks.

Nothing here reads a session: the parts are all there is (a layer's may come from another
process), and the access counts of the hits shown are the caller's to record
(``shown_ids``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..context import HitBlock, render_context
from ..model import short_id
from ..selection import ALSO_SHOWN
from .fusion import PLACED_KEPT
from .lines import ANNOTATION_CONTRADICTION, ANNOTATION_SUPERSEDED
from .parts import (
    BASIS_TRAVERSAL,
    KEPT_COMPANION,
    KEPT_CONFLICT,
    KEPT_CONTRADICTION,
    PartHit,
    RecallParts,
)
from .request import RecallResult

UNAVAILABLE_WARNING = "recall: layer {layer} is unavailable; results are from {answered} only"
# A recall by image or by vector reads one session (spec: Layered sessions): the session
# alone, since a layer's vectors would have to be searched by the same image or vector.
NOT_SEARCHED_WARNING = (
    "recall: a recall by {by} reads session {session} only; its layers ({layers}) were not searched"
)
SCOPED_LAYER_WARNING = (
    "recall: these hits are from layer {layer}, and their ids belong to it; "
    'pass scope = "{layer}" to lambo_inspect to inspect one'
)


def layer_prefix(layer: str) -> str:
    """What a layer's warning lines start with: ``[general] ``."""
    return f"[{layer}] "


@dataclass(frozen=True)
class _Source:
    name: str
    parts: RecallParts
    floor: float | None  # None: the addressed session itself, every hit counts
    counts: bool  # whether its answer may enter at all (the dependency-question rule)

    @property
    def layer(self) -> bool:
        return self.floor is not None

    def admits(self, hit: PartHit) -> bool:
        """Whether ``hit`` counts in the merged result (the floor rule)."""
        if self.floor is None:
            return True
        if not self.counts:
            return False
        if hit.basis == BASIS_TRAVERSAL:
            return True  # its anchor is the caller's (counts) or the caller has none
        return hit.relevance is not None and hit.relevance >= self.floor


@dataclass
class _Shown:
    source: _Source
    hit: PartHit
    past: bool  # past the merged top_k
    merged: list[tuple[_Source, PartHit]] = field(default_factory=list)
    companion_for: str | None = None  # the hit it was added beside


def merge_recall(
    own_session: str,
    own: RecallParts,
    layers: Sequence[tuple[str, RecallParts | None]],
    *,
    top_k: int,
    max_tokens: int,
    floors: Mapping[str, float],
) -> RecallResult:
    """The merged recall of ``own_session`` (its parts ``own``) and its ``layers`` in their
    configured order (None parts: the layer is not serving). ``floors`` holds each layer's
    relevance floor. See the module doc for the rules."""
    answered = [own_session, *(name for name, parts in layers if parts is not None)]
    warnings = [
        UNAVAILABLE_WARNING.format(layer=name, answered=_and_list(answered))
        for name, parts in layers
        if parts is None
    ]
    sources = [_Source(own_session, own, None, True)]
    for name, parts in layers:
        if parts is None:
            continue
        if name not in floors:
            raise ValueError(f"no relevance floor for layer {name}")
        sources.append(_Source(name, parts, floors[name], _answer_counts(own, parts)))

    shown = _place(sources, top_k)
    shown = _with_companions(shown)
    warnings += own.warnings
    for source in sources[1:]:
        warnings += [layer_prefix(source.name) + line for line in source.parts.warnings]
    blocks: list[HitBlock] = []
    hits: list[dict[str, Any]] = []
    annotations: list[list[dict[str, str]]] = []
    for entry in shown:
        block, hit, lines = _render_entry(entry)
        blocks.append(block)
        hits.append(hit)
        warnings += lines
        annotations.append(_annotations(entry))
    rendered = render_context(
        blocks, max_tokens, header=_header(sources, shown), notice=_notice(sources)
    )
    if rendered.truncated is not None:
        hits[rendered.truncated]["truncated_in_context"] = True
    fusion = [entry.hit.fusion for entry in shown]
    return RecallResult(rendered.context, hits, warnings, annotations, fusion)


def scoped_result(result: RecallResult, session: str, *, layer: bool) -> RecallResult:
    """A plain recall of one session read through a layered endpoint (``scope``): every
    hit carries ``session``; a layer's adds the warning that its ids belong to it."""
    hits = [{**hit, "session": session} for hit in result.hits]
    warnings = list(result.warnings)
    if layer:
        warnings.insert(0, SCOPED_LAYER_WARNING.format(layer=session))
    return RecallResult(result.context, hits, warnings, result.annotations, result.fusion)


def shown_ids(result: RecallResult, session: str) -> list[str]:
    """The node ids of ``session``'s hits in a merged result: the ones whose access counts
    that session records."""
    return [hit["node_id"] for hit in result.hits if hit.get("session") == session]


def _answer_counts(own: RecallParts, layer: RecallParts) -> bool:
    """The dependency-question rule (spec L141): while the caller answers by traversal, a
    layer counts only with a traversal answer about the same anchor; a caller that
    resolved none lets a layer answer its own. A subject that names a path in several of
    the caller's repositories is answered for none of them, by no layer either."""
    if own.ambiguous_subject:
        return False
    if own.dependency is None:
        return True
    return layer.dependency is not None and layer.dependency.anchor_key == own.dependency.anchor_key


def _and_list(names: Sequence[str]) -> str:
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def _place(sources: Sequence[_Source], top_k: int) -> list[_Shown]:
    """The hits in merged order: top_k slots interleaved by rank, then the ones kept past."""
    groups: dict[tuple[str, ...], list[tuple[_Source, PartHit]]] = {}
    for source in sources:
        for hit in source.parts.hits:
            if hit.kept != KEPT_COMPANION and source.admits(hit):
                groups.setdefault(hit.key, []).append((source, hit))
    shown: list[_Shown] = []
    placed: set[tuple[str, ...]] = set()

    def take(hit: PartHit, past: bool) -> bool:
        if hit.key in placed:
            return False
        placed.add(hit.key)
        (rep_source, rep), *others = groups[hit.key]
        merged = [(s, h) for s, h in others if s is not rep_source]
        shown.append(_Shown(rep_source, rep, past, merged))
        return True

    ranked = [[h for h in s.parts.hits if h.ranked and s.admits(h)] for s in sources]
    slots = 0
    for rank in range(max((len(r) for r in ranked), default=0)):
        for hits in ranked:
            if slots < top_k and rank < len(hits) and take(hits[rank], past=False):
                slots += 1
    for source in sources:
        for hit in source.parts.hits:
            kept = hit.kept in (KEPT_CONTRADICTION, KEPT_CONFLICT) or (
                hit.ranked and hit.keeps_past
            )
            if kept and source.admits(hit):
                take(hit, past=True)
    return shown


def _with_companions(shown: list[_Shown]) -> list[_Shown]:
    """Each shown contradicted hit with the concept beside it right after it (past top_k),
    when that concept counts and is not shown already."""
    present = {(e.source.name, e.hit.node_id) for e in shown}
    out: list[_Shown] = []
    for entry in shown:
        out.append(entry)
        by = entry.hit.contradicted_by
        if by is None or (entry.source.name, by) in present:
            continue
        beside = next((h for h in entry.source.parts.hits if h.node_id == by), None)
        if beside is None or not entry.source.admits(beside):
            continue  # floored: the hit's Contradicted line still names it
        present.add((entry.source.name, by))
        out.append(_Shown(entry.source, beside, True, companion_for=entry.hit.node_id))
    return out


def _render_entry(entry: _Shown) -> tuple[HitBlock, dict[str, Any], list[str]]:
    """The block, the structured hit and the warning lines of one shown hit."""
    source, part = entry.source, entry.hit
    block = part.block
    prefix = layer_prefix(source.name) if source.layer else ""
    warnings = [prefix + line for line in part.warnings]
    placed = block.placed
    if entry.past and part.kept != KEPT_COMPANION and entry.companion_for is None:
        placed = PLACED_KEPT
    elif not entry.past and placed == PLACED_KEPT:
        placed = ""  # kept past its session's top_k, but it won a merged slot
    also = [block.also] if block.also else []
    also_skipped: list[dict[str, str]] = []
    for other, copy in entry.merged:
        skipped = [s for s in copy.hit.get("skipped_redundant", []) if isinstance(s, dict)]
        also.append(_also_in([copy.node_id, *(str(s["node_id"]) for s in skipped)], other.name))
        also_skipped += [
            {"session": other.name, "node_id": str(s["node_id"]), "signal": str(s["signal"])}
            for s in skipped
        ]
    block = dataclasses.replace(
        block,
        lines=(*warnings, *block.lines[len(part.warnings) :]),
        also=", ".join(also),
        placed=placed,
        from_session=source.name if source.layer else "",
        marker_scope=source.name if source.layer else "",
    )
    hit = dict(part.hit)
    if entry.companion_for is not None and "companion_of" not in hit:
        hit["companion_of"] = [entry.companion_for]
    if also_skipped:
        hit["also_skipped_redundant"] = also_skipped
    hit["session"] = source.name
    lines = list(warnings)
    for other, copy in entry.merged:
        if copy.contradiction_line is not None:
            lines.append(layer_prefix(other.name) + copy.contradiction_line)
    return block, hit, lines


def _annotations(entry: _Shown) -> list[dict[str, str]]:
    """A shown hit's annotations, their lines as the merged result shows them (a layer's
    prefixed, as its warning lines are; the superseded history is not), then each merged
    copy's Contradicted line, naming the copy's session."""
    prefix = layer_prefix(entry.source.name) if entry.source.layer else ""
    out = [
        note if note["kind"] == ANNOTATION_SUPERSEDED else {**note, "line": prefix + note["line"]}
        for note in (dict(n) for n in entry.hit.annotations)
    ]
    for other, copy in entry.merged:
        line = copy.contradiction_line
        if line is None:
            continue
        own = next((n for n in copy.annotations if n["line"] == line), {})
        out.append(
            {
                **own,
                "kind": ANNOTATION_CONTRADICTION,
                "line": layer_prefix(other.name) + line,
                "session": other.name,
            }
        )
    return out


def _also_in(node_ids: Sequence[str], session: str) -> str:
    """``also 9f8e7d6c in general``: a merged copy and what its session skipped for it."""
    names = [short_id(n) for n in node_ids[:ALSO_SHOWN]]
    if len(node_ids) > ALSO_SHOWN:
        names.append(f"+{len(node_ids) - ALSO_SHOWN} more")
    return f"also {', '.join(names)} in {session}"


def _header(sources: Sequence[_Source], shown: Sequence[_Shown]) -> str | None:
    """The caller's dependency header, then each layer's whose traversal answer is shown."""
    lines = []
    own = sources[0].parts.dependency
    if own is not None:
        lines.append(own.header)
    answering = {e.source.name for e in shown}
    for source in sources[1:]:
        dependency = source.parts.dependency
        if dependency is not None and source.name in answering:
            lines.append(layer_prefix(source.name) + dependency.header)
    return "\n".join(lines) if lines else None


def _notice(sources: Sequence[_Source]) -> str | None:
    """The context's first line: the session's, else the first layer's that has one."""
    for source in sources:
        if source.parts.notice is not None:
            prefix = layer_prefix(source.name) if source.layer else ""
            return prefix + source.parts.notice
    return None
