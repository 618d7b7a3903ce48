"""`lambo session verify`: one session's integrity (edges whose ends are gone, a status no
canonization event gave, Canonical concepts over the budget) and the annotation kinds
recall would put on its concepts now (spec: "lambo_recall", its warning lines); with
``--ledger``, also the kinds a serve's --ledger recall lines of the session carried.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .canon.history import DemotionLog
from .canon.rules import CanonRules
from .contradiction import ContradictionInfo, is_contradicted
from .index.graph import SessionGraph
from .model import EdgeType, Status, short_id
from .store.base import Store
from .supersession import linked_either_way

EXAMPLES = 3  # example ids per annotation kind

KINDS = (
    "contradiction",
    "contradicts",
    "rests_on_contradicted",
    "possibly_superseded",
    "superseded",
)


@dataclass
class VerifyReport:
    """What ``session verify`` found: integrity problems and annotation kinds."""

    session: str
    concepts: int
    edges: int
    problems: list[str] = field(default_factory=list)
    kinds: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in KINDS})
    ledger: LedgerKinds | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {
            "session": self.session,
            "concepts": self.concepts,
            "edges": self.edges,
            "ok": not self.problems,
            "problems": self.problems,
            "annotation_kinds": {
                kind: {"count": len(ids), "examples": sorted(ids)[:EXAMPLES]}
                for kind, ids in self.kinds.items()
            },
        }
        if self.ledger is not None:
            out["ledger"] = self.ledger.as_dict()
        return out


@dataclass
class LedgerKinds:
    """The annotation kinds a ledger's recall lines of one session carried: per kind, how
    many annotations and the hits (node ids) that carried them."""

    path: str
    recall_lines: int = 0
    malformed_lines: int = 0  # skipped, never echoed
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    hits: dict[str, set[str]] = field(default_factory=lambda: {k: set() for k in KINDS})

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "recall_lines": self.recall_lines,
            "malformed_lines": self.malformed_lines,
            "annotation_kinds": {
                kind: {"count": self.counts[kind], "examples": sorted(self.hits[kind])[:EXAMPLES]}
                for kind in KINDS
            },
        }


def _rests_on_summary(note: dict[str, Any]) -> bool:
    return note.get("kind") == "rests_on_contradicted" and "cited" not in note


def ledger_kinds(path: str, lines: Iterable[bytes], session: str) -> LedgerKinds:
    """Count the kinds on ``session``'s recall lines (``ledger_lines.call_line``'s hits'
    annotations); lines of other sessions and other kinds of line are passed over, and a
    line that is not a JSON object, or a recall line whose hits are not rows, is counted
    as malformed."""
    found = LedgerKinds(path)
    for raw in lines:
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except ValueError:  # not JSON, or not UTF-8
            found.malformed_lines += 1
            continue
        if not isinstance(line, dict):
            found.malformed_lines += 1
            continue
        if line.get("session") != session or line.get("kind") != "call":
            continue
        if line.get("tool") != "lambo_recall" or line.get("outcome") != "ok":
            continue
        hits = line.get("hits")
        if not isinstance(hits, list) or not all(isinstance(h, dict) for h in hits):
            found.malformed_lines += 1
            continue
        found.recall_lines += 1
        for hit in hits:
            notes = hit.get("annotations")
            kinds = [
                note.get("kind")
                for note in (notes if isinstance(notes, list) else ())
                # "Rests on N more" sums lines already counted, naming no concept of its own
                if isinstance(note, dict) and not _rests_on_summary(note)
            ]
            # the kind counts either way (spec): a hit flagged possibly superseded whose line
            # was not shown (an unmeasured contract, the line turned off) carries only the id
            if "possibly_superseded_by" in hit and "possibly_superseded" not in kinds:
                kinds.append("possibly_superseded")
            for kind in kinds:
                if kind in found.counts:
                    found.counts[kind] += 1
                    if isinstance(hit.get("node_id"), str):
                        found.hits[kind].add(hit["node_id"])
    return found


def verify_session(
    store: Store, name: str, rules: CanonRules, now: float, graph: SessionGraph | None = None
) -> VerifyReport:
    """Check one session's graph and count the annotation kinds recall would show now."""
    graph = graph or SessionGraph.load(store, name)
    report = VerifyReport(name, len(graph), graph.edge_count)

    # integrity
    dangling = [
        e for e in graph.iter_edges() if not _is_node(graph, e.src) or not _is_node(graph, e.dst)
    ]
    if dangling:
        shown = ", ".join(f"{e.edge_type.value} {e.src} -> {e.dst}" for e in dangling[:EXAMPLES])
        report.problems.append(f"{len(dangling)} edge(s) name a node that is gone: {shown}")
    events = store.canon_events(name)
    last_to: dict[str, Status] = {}
    for event in events:
        last_to[event.node_id] = event.to_status
    mismatched = [
        c for c in graph.iter_concepts() if last_to.get(c.id, Status.NONE) is not c.status
    ]
    if mismatched:
        shown = ", ".join(
            f"{c.id} is {c.status.label}, its last event says "
            f"{last_to.get(c.id, Status.NONE).label}"
            for c in mismatched[:EXAMPLES]
        )
        report.problems.append(
            f"{len(mismatched)} concept(s) hold a status no canonization event gave them: {shown}"
        )
    canonical = sum(1 for c in graph.iter_concepts() if c.status is Status.CANONICAL)
    if canonical > rules.canonical_budget:
        report.problems.append(
            f"{canonical} Canonical concepts, over the budget of {rules.canonical_budget}"
        )

    # annotation kinds
    firing: dict[str, ContradictionInfo] = {}
    for concept in graph.iter_concepts():
        if graph.edges_in(concept.id, (EdgeType.CONTRADICTS,)):
            info = is_contradicted(graph, concept.id, now, rules.edge_min_age_s)
            if info is not None:
                firing[concept.id] = info
    report.kinds["contradiction"] = list(firing)
    report.kinds["contradicts"] = sorted({info.by for info in firing.values()})
    rests: list[str] = []
    possibly: list[str] = []
    for concept in graph.iter_concepts():
        for edge in graph.edges_out(concept.id, (EdgeType.DEPENDENCY,)):
            cited = edge.dst
            if cited in firing and graph.edge(concept.id, cited, EdgeType.CONTRADICTS) is None:
                rests.append(concept.id)
                break
        for edge in graph.edges_in(concept.id, (EdgeType.SUPERSEDES_SUSPECTED,)):
            if edge.src in graph and not linked_either_way(graph, edge.src, concept.id):
                possibly.append(concept.id)
                break
    report.kinds["rests_on_contradicted"] = rests
    report.kinds["possibly_superseded"] = possibly
    log = DemotionLog.rebuild(events, graph, rules)
    report.kinds["superseded"] = [
        c.id
        for c in graph.iter_concepts()
        if c.status is not Status.CANONICAL
        and (d := log.get(c.id)) is not None
        and d.reason == "superseded"
    ]
    return report


def _is_node(graph: SessionGraph, node_id: str) -> bool:
    return node_id in graph or graph.is_interaction(node_id)


def render_verify(report: VerifyReport) -> str:
    lines = [
        f"session {report.session}: {report.concepts} concepts, {report.edges} edges; "
        + ("ok" if not report.problems else f"{len(report.problems)} problem(s)")
    ]
    lines += [f"problem: {p}" for p in report.problems]
    lines.append("annotation kinds (concepts recall would annotate now):")
    for kind in KINDS:
        lines.append(f"  {kind}: {len(report.kinds[kind])}{_examples(report.kinds[kind])}")
    ledger = report.ledger
    if ledger is not None:
        lines.append(
            f"annotation kinds on the ledger's recall lines ({ledger.recall_lines} line(s) "
            f"of this session, {ledger.malformed_lines} malformed line(s) skipped):"
        )
        for kind in KINDS:
            lines.append(f"  {kind}: {ledger.counts[kind]}{_examples(ledger.hits[kind])}")
    return "\n".join(lines)


def _examples(found: Iterable[str]) -> str:
    ids = sorted(found)
    examples = ", ".join(short_id(i) for i in ids[:EXAMPLES])
    return f" (e.g. {examples}{', …' if len(ids) > EXAMPLES else ''})" if ids else ""
