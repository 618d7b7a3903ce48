"""What one session's recall produced before it is rendered (issue #17, merged recall).

A layered session's recall merges its own parts with each layer's (``merge.merge_recall``);
a layer's parts may come from another process over the hub socket, so they are plain JSON
(``to_json`` / ``from_json``). An unlayered recall renders its own parts alone
(``pipeline.finish``), exactly as it rendered before the split.

Each hit keeps what the merge needs and the rendered text does not show: its relevance to
the question on a scale the same in every session (a layer hit must pass the layer's floor
with it), why it is in the result if not for its rank, and the identity a copy of the same
memory in another session shares with it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..context import HitBlock

# How a hit's relevance was found. The first two carry a relevance; the rest have none of
# their own, so a layer hit of those kinds never passes a floor (a dependency answer passes
# by its anchor instead).
BASIS_VECTOR = "vector"  # the cosine of the question and the concept (the vector leg ran)
BASIS_KEYWORD = "keyword"  # the share of the question's content words it holds (no vector)
BASIS_GRAPH = "graph"  # reached by graph expansion alone
BASIS_RECENT = "recent"  # found by the recent leg alone
BASIS_NONE = "none"  # the concept beside a contradicted hit, found by no leg
BASIS_TRAVERSAL = "traversal"  # a dependent in a dependency question's answer
BASES = (BASIS_VECTOR, BASIS_KEYWORD, BASIS_GRAPH, BASIS_RECENT, BASIS_NONE, BASIS_TRAVERSAL)

# Why a hit is in the result past top_k ("" for one its rank put there).
KEPT_CONTRADICTION = "contradiction"  # a contradicted Canonical or Venerable hit
KEPT_CONFLICT = "conflict"  # a hit with a conflict line
KEPT_COMPANION = "companion"  # the concept beside a contradicted hit (companion_of)
KEPT_REASONS = ("", KEPT_CONTRADICTION, KEPT_CONFLICT, KEPT_COMPANION)

# The identity two sessions' copies of one memory share (``PartHit.key``): the same text,
# or, for a repository-scoped path, the same repository and path (never a vector match).
KEY_TEXT = "text"
KEY_PATH = "path"

PARTS_VERSION = 1


class PartsError(ValueError):
    """Parts JSON that is not what ``RecallParts.to_json`` writes."""


@dataclass(frozen=True)
class PartHit:
    """One hit of a session's result, in its rank order.

    ``warnings`` are the block's warning lines (``block.lines`` starts with them;
    a superseded-history line may follow). ``keeps_past`` says the hit is kept
    past top_k wherever it ranks (a contradicted Canonical or Venerable hit, or
    a conflict). ``contradicted_by`` and ``contradiction_line`` are its own
    Contradicted line's concept and text, for a merged copy whose block is not
    shown. ``annotations`` say which of its lines is which kind (``lines.annotation``);
    ``fusion`` is its leg ranks and fused values (``fusion.fusion_of``). Neither reaches
    structuredContent: the portal's REST API and the --ledger line read them.
    """

    block: HitBlock
    hit: dict[str, Any]
    warnings: tuple[str, ...]
    relevance: float | None
    basis: str
    kept: str = ""
    keeps_past: bool = False
    key: tuple[str, ...] = ()
    contradicted_by: str | None = None
    contradiction_line: str | None = None
    annotations: tuple[dict[str, str], ...] = ()
    fusion: dict[str, Any] | None = None

    @property
    def node_id(self) -> str:
        return self.block.node_id

    @property
    def ranked(self) -> bool:
        """In the result for its rank (not kept past top_k, not a companion)."""
        return self.kept == ""


@dataclass(frozen=True)
class DependencyPart:
    """A dependency question's anchor, as this session resolved it, and its header line."""

    anchor_id: str
    anchor_content: str
    anchor_key: str  # the anchor's canonical key, case folded (text.fold_case)
    header: str


@dataclass(frozen=True)
class RecallParts:
    """One session's recall before rendering. ``warnings`` are the lines not tied to a hit
    (they come first); each hit's own lines follow in hit order."""

    session: str
    top_k: int
    max_tokens: int
    hits: tuple[PartHit, ...]
    warnings: tuple[str, ...] = ()
    notice: str | None = None
    dependency: DependencyPart | None = None
    #: a dependency question whose subject is a path in several repositories: answered for
    #: none of them, so a merged recall takes no layer's answer either (spec L363)
    ambiguous_subject: bool = False

    def all_warnings(self) -> list[str]:
        """The warnings as an unlayered recall answers them."""
        return [*self.warnings, *(line for hit in self.hits for line in hit.warnings)]

    def hit_ids(self) -> list[str]:
        return [hit.node_id for hit in self.hits]

    def to_json(self) -> dict[str, Any]:
        return {
            "version": PARTS_VERSION,
            "session": self.session,
            "top_k": self.top_k,
            "max_tokens": self.max_tokens,
            "hits": [_hit_json(hit) for hit in self.hits],
            "warnings": list(self.warnings),
            "notice": self.notice,
            "dependency": dataclasses.asdict(self.dependency) if self.dependency else None,
            "ambiguous_subject": self.ambiguous_subject,
        }

    @classmethod
    def from_json(cls, data: object) -> RecallParts:
        """The parts ``to_json`` wrote; anything else raises ``PartsError``."""
        d = _mapping(data, "parts")
        if d.get("version") != PARTS_VERSION:
            raise PartsError(f"parts: version {d.get('version')!r}, expected {PARTS_VERSION}")
        dependency = d.get("dependency")
        return cls(
            session=_of(d, "session", str),
            top_k=_of(d, "top_k", int),
            max_tokens=_of(d, "max_tokens", int),
            hits=tuple(_hit_from(h) for h in _of(d, "hits", list)),
            warnings=_strings(d, "warnings"),
            notice=_optional(d, "notice", str),
            dependency=None if dependency is None else _dependency_from(dependency),
            ambiguous_subject=_of(d, "ambiguous_subject", bool),
        )


def _hit_json(hit: PartHit) -> dict[str, Any]:
    block = dataclasses.asdict(hit.block)
    block["lines"] = list(hit.block.lines)
    return {
        "block": block,
        "hit": hit.hit,
        "warnings": list(hit.warnings),
        "relevance": hit.relevance,
        "basis": hit.basis,
        "kept": hit.kept,
        "keeps_past": hit.keeps_past,
        "key": list(hit.key),
        "contradicted_by": hit.contradicted_by,
        "contradiction_line": hit.contradiction_line,
        "annotations": [dict(a) for a in hit.annotations],
        "fusion": hit.fusion,
    }


_BLOCK_FIELDS: Mapping[str, type | tuple[type, ...]] = {
    "node_id": str,
    "content": str,
    "type_label": str,
    "canonical": bool,
    "score": (int, float),
    "blast_radius": int,
    "also": str,
    "placed": str,
    "repo_scope": str,
    "from_session": str,
    "marker_scope": str,
}


def _block_from(data: object) -> HitBlock:
    d = _mapping(data, "block")
    unknown = set(d) - {*_BLOCK_FIELDS, "lines"}
    if unknown:
        raise PartsError(f"block: unknown fields {sorted(unknown)}")
    fields: dict[str, Any] = {name: _of(d, name, kind) for name, kind in _BLOCK_FIELDS.items()}
    fields["score"] = float(fields["score"])
    return HitBlock(**fields, lines=_strings(d, "lines"))


def _hit_from(data: object) -> PartHit:
    d = _mapping(data, "hit")
    relevance = _optional(d, "relevance", (int, float))
    if relevance is not None and not math.isfinite(relevance):
        raise PartsError("hit: relevance must be finite")
    basis = _of(d, "basis", str)
    kept = _of(d, "kept", str)
    if basis not in BASES or kept not in KEPT_REASONS:
        raise PartsError(f"hit: unknown basis {basis!r} or kept {kept!r}")
    block = _block_from(d.get("block"))
    warnings = _strings(d, "warnings")
    if block.lines[: len(warnings)] != warnings:
        raise PartsError("hit: its block's lines do not start with its warnings")
    return PartHit(
        block=block,
        hit=dict(_mapping(d.get("hit"), "hit.hit")),
        warnings=warnings,
        relevance=None if relevance is None else float(relevance),
        basis=basis,
        kept=kept,
        keeps_past=_of(d, "keeps_past", bool),
        key=_strings(d, "key"),
        contradicted_by=_optional(d, "contradicted_by", str),
        contradiction_line=_optional(d, "contradiction_line", str),
        annotations=_annotations(d),
        fusion=_fusion(d),
    )


def _annotations(d: Mapping[str, Any]) -> tuple[dict[str, str], ...]:
    """A hit's annotations: objects of strings with a kind and a line (absent: none)."""
    if d.get("annotations") is None:
        return ()
    out = []
    for item in _of(d, "annotations", list):
        note = _mapping(item, "annotation")
        if not all(isinstance(v, str) for v in note.values()) or not {"kind", "line"} <= set(note):
            raise PartsError("annotation: needs a kind and a line, every value a string")
        out.append(dict(note))
    return tuple(out)


def _fusion(d: Mapping[str, Any]) -> dict[str, Any] | None:
    """A hit's fusion: leg ranks and fused values, every one a finite number."""
    if d.get("fusion") is None:
        return None
    fusion = dict(_mapping(d.get("fusion"), "fusion"))
    for value in fusion.values():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise PartsError("fusion: every value must be a number")
        if not math.isfinite(value):
            raise PartsError("fusion: every value must be finite")
    return fusion


def _dependency_from(data: object) -> DependencyPart:
    d = _mapping(data, "dependency")
    return DependencyPart(
        anchor_id=_of(d, "anchor_id", str),
        anchor_content=_of(d, "anchor_content", str),
        anchor_key=_of(d, "anchor_key", str),
        header=_of(d, "header", str),
    )


def _mapping(data: object, what: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping) or not all(isinstance(k, str) for k in data):
        raise PartsError(f"{what} must be a JSON object")
    return data


def _of(d: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = d.get(name)
    # bool is an int to Python; a JSON true is not a count
    if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, (int, float))):
        raise PartsError(f"{name} is missing or not of the type to_json writes")
    return value


def _optional(d: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    return None if d.get(name) is None else _of(d, name, kind)


def _strings(d: Mapping[str, Any], name: str) -> tuple[str, ...]:
    values = _of(d, name, list)
    if not all(isinstance(v, str) for v in values):
        raise PartsError(f"{name} must be a list of strings")
    return tuple(values)
