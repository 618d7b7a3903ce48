"""`lambo export`: a session's graph as the JSONL `lambo import` reads (docs/import-export.md).

Read from the store, so it holds the writes applied when it runs (not those still queued in
a serve). Written: a header line; a concept line per concept (id, content, type, status,
event_time, its depends_on and against by id); an action line for each concept that produces
or modifies something (its produces, modifies, depends_on and against by id); then a
parent_of line per Hierarchical edge. The declared edges are all there; derived ones
(derives, cooccurrence, semantic, supersedes_suspected) are not: a write recomputes them.

Order: each line's references come earlier. Concepts are placed targets-first, ties broken by
(content, type), so two stores holding the same graph export the same lines apart from ids
and times. A contradiction cycle (A against B, B against A; depends_on, produces and modifies
cannot form one, admission refuses it) is cut at its last edge: that edge goes on a repeat line
after all the others, the same content and type without an id, which an import matches.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..model import Concept, EdgeType
from ..store.base import Store
from ..text import format_rfc3339
from .lines import FORMAT, VERSION

REFERENCE_EDGES = {
    EdgeType.DEPENDENCY: "depends_on",
    EdgeType.CONTRADICTS: "against",
    EdgeType.PRODUCES: "produces",
    EdgeType.MODIFIES: "modifies",
}


@dataclass
class _Node:
    concept: Concept
    refs: dict[str, list[str]] = field(default_factory=dict)  # field -> target node ids

    @property
    def is_action(self) -> bool:
        return bool(self.refs.get("produces") or self.refs.get("modifies"))

    @property
    def order(self) -> tuple[str, str]:
        return (self.concept.content, self.concept.concept_type.value)


def export_lines(
    store: Store, session: str, *, vectors: bool = False, exported_at: float | None = None
) -> Iterator[dict[str, Any]]:
    """The export of ``session``, line by line (JSON objects)."""
    nodes = {c.id: _Node(c) for c in store.concepts(session, vectors=vectors)}
    pairs: list[tuple[str, str]] = []
    for edge in store.edges(session):
        if edge.src not in nodes or edge.dst not in nodes:
            continue
        if edge.edge_type is EdgeType.HIERARCHICAL:
            pairs.append((edge.src, edge.dst))
            continue
        name = REFERENCE_EDGES.get(edge.edge_type)
        if name is not None:
            refs = nodes[edge.src].refs.setdefault(name, [])
            if edge.dst not in refs:
                refs.append(edge.dst)
    header: dict[str, Any] = {"kind": "header", "format": FORMAT, "version": VERSION}
    header["session"] = session
    if exported_at is not None:
        header["exported_at"] = format_rfc3339(exported_at)
    header["note"] = (
        "derived edges (derives, cooccurrence, semantic, supersedes_suspected) are not "
        "exported; an import recomputes them"
    )
    yield header
    order, deferred = _targets_first(nodes)
    key = {nid: n.order for nid, n in nodes.items()}
    for node_id in order:
        yield _line(nodes[node_id], key, vectors=vectors, skip=deferred.get(node_id, set()))
    for node_id, cut in sorted(deferred.items(), key=lambda kv: nodes[kv[0]].order):
        c = nodes[node_id].concept
        for target in sorted(cut, key=lambda t: nodes[t].order):
            yield {
                "kind": "concept",
                "content": c.content,
                "type": c.concept_type.value,
                "against": [target],
            }
    for parent, child in sorted(pairs, key=lambda p: (key[p[0]], key[p[1]])):
        yield {"kind": "parent_of", "parent": parent, "child": child}


def _targets_first(nodes: dict[str, _Node]) -> tuple[list[str], dict[str, set[str]]]:
    """Node ids, each after every node it references (Kahn's, least (content, type) first);
    the against edges cut to break a cycle, by node."""
    deferred: dict[str, set[str]] = {}
    waiting: dict[str, set[str]] = {}
    for node_id, node in nodes.items():
        waiting[node_id] = {t for refs in node.refs.values() for t in refs if t != node_id}
    users: dict[str, set[str]] = {nid: set() for nid in nodes}
    for node_id, targets in waiting.items():
        for target in targets:
            users[target].add(node_id)
    ready = [(nodes[nid].order, nid) for nid, t in waiting.items() if not t]
    heapq.heapify(ready)
    out: list[str] = []
    placed: set[str] = set()
    while len(out) < len(nodes):
        if not ready:  # only a contradiction cycle is left: cut the least node's against
            stuck = min((nodes[n].order, n) for n in nodes if n not in placed)[1]
            cut = {t for t in waiting[stuck] if t in nodes[stuck].refs.get("against", [])}
            deferred[stuck] = cut | deferred.get(stuck, set())
            waiting[stuck] -= cut
            for target in cut:
                users[target].discard(stuck)
            if not waiting[stuck]:
                heapq.heappush(ready, (nodes[stuck].order, stuck))
            else:  # pragma: no cover - admission refuses every other kind of cycle
                raise RuntimeError("a cycle not of against edges")
            continue
        _, node_id = heapq.heappop(ready)
        out.append(node_id)
        placed.add(node_id)
        for user in users[node_id]:
            waiting[user].discard(node_id)
            if not waiting[user]:
                heapq.heappush(ready, (nodes[user].order, user))
    return out, deferred


def _line(
    node: _Node, order: dict[str, tuple[str, str]], *, vectors: bool, skip: set[str]
) -> dict[str, Any]:
    c = node.concept

    def refs(name: str) -> list[str]:
        targets = [t for t in node.refs.get(name, []) if not (name == "against" and t in skip)]
        return sorted(targets, key=lambda t: order[t])

    line: dict[str, Any]
    names: tuple[str, ...]
    if node.is_action:
        line = {"kind": "action", "id": c.id, "action": c.content}
        names = ("produces", "modifies", "depends_on", "against")
    else:
        line = {"kind": "concept", "id": c.id, "content": c.content, "type": c.concept_type.value}
        names = ("depends_on", "against")
    line["status"] = c.status.value
    line["event_time"] = format_rfc3339(c.about_time)
    for name in names:
        targets = refs(name)
        if targets:
            line[name] = targets
    if vectors and c.vector is not None:
        line["vector"] = [round(float(x), 7) for x in c.vector]
    return line


def dump_line(line: dict[str, Any]) -> str:
    return json.dumps(line, ensure_ascii=False, separators=(",", ":"))
