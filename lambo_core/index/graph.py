"""One session's graph in RAM: concepts, typed adjacency both ways, and traversals.

A read-side copy of the store, rebuilt at open and kept current by the apply worker
under the session index lock (the graph has no lock of its own); ``version`` grows on
every change so caches can key on it. Design notes: docs/design.md, recall.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, deque
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ..model import Concept, Edge, EdgeType, Status, short_id
from ..store.base import EDGE_WEIGHT_CAP, Store
from ..text import fold_case
from .degrees import DegreeCount
from .names import MultiIndex, multi_add, multi_get, multi_remove
from .path_index import PathIndex

Direction = Literal["both", "out", "in"]

# The relation blast radius counts: "src depends on dst" edges into a concept,
# plus parent_of edges out of it (its children).
_DEPENDENT_IN = EdgeType.DEPENDENCY
_DEPENDENT_OUT = EdgeType.HIERARCHICAL

_HEX = frozenset("0123456789abcdef")

Adjacency = dict[EdgeType, dict[str, dict[str, Edge]]]


@dataclass
class Neighbourhood:
    """What ``SessionGraph.neighbours`` found around a focus concept."""

    focus: str
    hops: dict[str, int] = field(default_factory=dict)  # neighbour id -> hop (focus excluded)
    edges: list[Edge] = field(default_factory=list)  # every edge walked, each once
    truncated: bool = False  # the limit stopped the walk


class SessionGraph:
    """Adjacency, lookups and traversals for one session."""

    def __init__(self, session: str) -> None:
        self.session = session
        self.version = 0  # bumped on every mutation (cache keys)
        self._concepts: dict[str, Concept] = {}
        self._out: Adjacency = {t: {} for t in EdgeType}
        self._in: Adjacency = {t: {} for t in EdgeType}
        self._by_prefix: MultiIndex = {}  # short id -> node id(s)
        self._by_key: MultiIndex = {}  # canonical key -> node id(s)
        self._by_folded_key: MultiIndex = {}  # canonical key, case folded -> node id(s)
        self.paths = PathIndex()  # repository-scoped concepts by (repo, path)
        self._interactions: set[str] = set()
        self._edge_count = 0
        self._status_count: Counter[Status] = Counter()  # lambo_stats reads it per call
        self._strings: dict[str, str] = {}  # see _shared
        # edge stamps (see edge_stamp): a node's is set, after the change, whenever an
        # edge touching it is added or removed; one below the floor reads as the floor
        self._edge_stamps: dict[str, int] = {}
        self._stamp_clock = 0
        self._stamp_floor = 0
        self._degrees = DegreeCount()  # edges per node, and the highest of any concept

    # -- building ---------------------------------------------------------------
    @classmethod
    def load(cls, store: Store, session: str) -> SessionGraph:
        """Rebuild a session's graph from the store (concepts, then edges, then interactions)."""
        graph = cls(session)
        for concept in store.concepts(session):
            graph._put_concept(concept, owned=True)
        graph.load_edges(store.edges(session))
        for interaction in store.interactions(session):
            graph._interactions.add(interaction.id)
        return graph

    def load_edges(self, edges: Iterable[Edge]) -> None:
        """Adopt stored edges as they are (the store already merged repeats).

        The Edge objects are kept (weights change in place on reinforcement).
        ``add_edge`` without copies or reinforcement: it runs once per stored edge at open.
        """
        out, inn, share = self._out, self._in, self._strings.setdefault  # see _shared
        interactions = self._interactions
        derives = EdgeType.DERIVES
        added = 0
        for edge in edges:
            if edge.session == self.session:
                edge.session = self.session
            src = edge.src = share(edge.src, edge.src)
            dst = edge.dst = share(edge.dst, edge.dst)
            edge.agent_id = share(edge.agent_id, edge.agent_id)
            by_src = out[edge.edge_type].get(src)
            if by_src is None:
                by_src = out[edge.edge_type][src] = {}
            existing = by_src.get(dst)
            if existing is not None:
                existing.weight = edge.weight
                continue
            by_src[dst] = edge
            by_dst = inn[edge.edge_type].get(dst)
            if by_dst is None:
                by_dst = inn[edge.edge_type][dst] = {}
            by_dst[src] = edge
            added += 1
            if edge.interaction_id:
                edge.interaction_id = share(edge.interaction_id, edge.interaction_id)
                interactions.add(edge.interaction_id)
            if edge.edge_type is derives:
                interactions.add(src)
        self._edge_count += added
        self._recount_degrees()
        self._stamp_clock += 1
        self._stamp_floor = self._stamp_clock  # every node's edges may have changed
        self.version += 1

    def _recount_degrees(self) -> None:
        degrees: Counter[str] = Counter()
        for side in (self._out, self._in):
            for by_node in side.values():
                for node, peers in by_node.items():
                    degrees[node] += len(peers)
        self._degrees.recount(degrees, self._concepts)

    def _shared(self, text: str) -> str:
        """One string object per distinct id, agent or session value.

        SQLite hands out a fresh string per row, so without this every edge
        end and every concept's agent and interaction would be its own copy.
        """
        return self._strings.setdefault(text, text)

    # -- mutation (caller holds the index lock) ---------------------------------
    def add_concept(self, concept: Concept) -> None:
        """Add or replace a concept. The caller's object is not modified."""
        self._put_concept(concept, owned=False)

    def adopt_concept(self, concept: Concept) -> None:
        """Like ``add_concept`` but keeps (and strips the vector from) the caller's object.

        For open-time loading, where the store's objects are ours to keep.
        """
        self._put_concept(concept, owned=True)

    def _put_concept(self, concept: Concept, *, owned: bool) -> None:
        if owned:
            concept.vector = None
            kept = concept
        else:
            kept = dataclasses.replace(concept, vector=None)
        share = self._shared
        kept.id = share(kept.id)
        kept.session = self.session if kept.session == self.session else kept.session
        kept.agent_id = share(kept.agent_id)
        if kept.interaction_id:
            kept.interaction_id = share(kept.interaction_id)
        old = self._concepts.get(kept.id)
        if old is not None:
            self._unindex(old)
            self._stamp(kept.id)  # its summary counts its own interaction, which may differ
        self._concepts[kept.id] = kept
        if old is None:
            self._degrees.admit(kept.id)
        self._status_count[kept.status] += 1
        multi_add(self._by_prefix, short_id(kept.id), kept.id)
        multi_add(self._by_key, kept.canonical_key, kept.id)
        multi_add(self._by_folded_key, fold_case(kept.canonical_key), kept.id)
        self.paths.add(kept)
        if kept.interaction_id:
            self._interactions.add(kept.interaction_id)
        self.version += 1

    def _unindex(self, concept: Concept) -> None:
        self._status_count[concept.status] -= 1
        multi_remove(self._by_prefix, short_id(concept.id), concept.id)
        multi_remove(self._by_key, concept.canonical_key, concept.id)
        multi_remove(self._by_folded_key, fold_case(concept.canonical_key), concept.id)
        self.paths.remove(concept)

    def add_edge(self, edge: Edge) -> Edge:
        """Add an edge, or reinforce the one already on (src, dst, type).

        Mirrors the store's rule: a new edge keeps its weight (capped at
        ``EDGE_WEIGHT_CAP``); a repeat adds 1.0 to the weight, capped, and keeps
        the first interaction, agent and times. Returns the edge the graph holds.
        """
        share = self._shared
        src, dst = share(edge.src), share(edge.dst)
        by_src = self._out[edge.edge_type].setdefault(src, {})
        existing = by_src.get(dst)
        if existing is not None:
            existing.weight = min(existing.weight + 1.0, EDGE_WEIGHT_CAP)
            self.version += 1
            return existing
        # our own copy, since weights change in place; capped like the store caps it
        kept = dataclasses.replace(
            edge,
            src=src,
            dst=dst,
            agent_id=share(edge.agent_id),
            weight=min(edge.weight, EDGE_WEIGHT_CAP),
        )
        if kept.interaction_id:
            kept.interaction_id = share(kept.interaction_id)
            self._interactions.add(kept.interaction_id)
        if kept.edge_type is EdgeType.DERIVES:
            self._interactions.add(kept.src)  # DERIVES starts at the interaction
        by_src[kept.dst] = kept
        self._in[kept.edge_type].setdefault(kept.dst, {})[kept.src] = kept
        self._edge_count += 1
        self._bump_degrees(src, dst, 1)
        self._stamp(src, dst)
        self.version += 1
        return kept

    def add_interaction(self, interaction_id: str) -> None:
        self._interactions.add(interaction_id)

    def remove_concept(self, node_id: str) -> Concept | None:
        """Drop a concept and every edge touching it, both ways. Returns what was removed."""
        concept = self._concepts.pop(node_id, None)
        if concept is not None:
            self._unindex(concept)
            self._degrees.retire(node_id)
        self._strings.pop(node_id, None)
        peers: list[str] = []
        for edge_type in EdgeType:
            out, inn = self._out[edge_type], self._in[edge_type]
            for dst in out.pop(node_id, {}):
                self._drop_half(inn, dst, node_id)
                peers.append(dst)
            for src in inn.pop(node_id, {}):
                self._drop_half(out, src, node_id)
                peers.append(src)
        for peer in peers:
            if peer != node_id:
                self._degrees.bump(peer, -1, concept=peer in self._concepts)
        self._degrees.forget(node_id)
        self._stamp(node_id, *peers)  # kept for node_id too: a re-added id must not match
        self.version += 1
        return concept

    def remove_edge(self, src: str, dst: str, edge_type: EdgeType) -> Edge | None:
        """Drop one edge, both ways; its ends stay. Returns the edge removed, or None.

        Inner dicts left empty are dropped, so adjacency lookups read "no edges"
        the same way as for a node that never had any. An interaction a Derives
        edge named stays known (the store keeps the interaction).
        """
        out, inn = self._out[edge_type], self._in[edge_type]
        by_src = out.get(src)
        if by_src is None:
            return None
        removed = by_src.pop(dst, None)
        if removed is None:
            return None
        if not by_src:
            del out[src]
        by_dst = inn.get(dst)
        if by_dst is not None:
            by_dst.pop(src, None)
            if not by_dst:
                del inn[dst]
        self._edge_count -= 1
        self._bump_degrees(src, dst, -1)
        self._stamp(src, dst)
        self.version += 1
        return removed

    def _bump_degrees(self, src: str, dst: str, delta: int) -> None:
        concepts = self._concepts
        self._degrees.bump(src, delta, concept=src in concepts)
        self._degrees.bump(dst, delta, concept=dst in concepts)

    def _stamp(self, *node_ids: str) -> None:
        self._stamp_clock += 1
        for node_id in node_ids:
            self._edge_stamps[node_id] = self._stamp_clock

    def edge_stamp(self, node_id: str) -> int:
        """A number that changes whenever an edge touching ``node_id`` is added or removed.

        Lets a per-concept summary of its edges outlive writes elsewhere in the
        session (``scoring.EdgeView``). Set after the change, so a reader that
        took the stamp before summarising never keeps a summary older than it.
        Reinforcing an edge (its weight) does not change it.
        """
        stamp = self._edge_stamps.get(node_id, 0)
        return stamp if stamp > self._stamp_floor else self._stamp_floor

    def _drop_half(self, side: dict[str, dict[str, Edge]], key: str, other: str) -> None:
        peers = side.get(key)
        if peers is not None and peers.pop(other, None) is not None:
            self._edge_count -= 1
            if not peers:
                del side[key]

    def set_status(self, node_id: str, status: Status) -> None:
        concept = self._concepts.get(node_id)
        if concept is not None:
            self._status_count[concept.status] -= 1
            self._status_count[status] += 1
            concept.status = status
            self.version += 1

    def status_count(self, status: Status) -> int:
        """How many concepts hold ``status`` (kept as statuses change, not counted per call)."""
        return self._status_count[status]

    def touch(self) -> None:
        """Record a change made directly on a held Concept (bumps ``version``)."""
        self.version += 1

    # -- size and plain lookups -------------------------------------------------
    def __len__(self) -> int:
        return len(self._concepts)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._concepts

    @property
    def edge_count(self) -> int:
        return self._edge_count

    @property
    def max_degree(self) -> int:
        """The highest edge count (all types, both directions) of any concept."""
        return self._degrees.highest

    @property
    def interaction_count(self) -> int:
        return len(self._interactions)

    def adjacency_out(self, edge_type: EdgeType) -> dict[str, dict[str, Edge]]:
        """src -> {dst: edge} for one edge type: the live index, read-only, for hot loops
        (scoring a hundred candidates a recall) that cannot afford a list per call.
        Insertion order is write order."""
        return self._out[edge_type]

    def adjacency_in(self, edge_type: EdgeType) -> dict[str, dict[str, Edge]]:
        """dst -> {src: edge} for one edge type; as ``adjacency_out``."""
        return self._in[edge_type]

    def concept_ids(self) -> list[str]:
        return list(self._concepts)

    def iter_concepts(self) -> Iterator[Concept]:
        return iter(list(self._concepts.values()))

    def iter_edges(self) -> Iterator[Edge]:
        for by_src in self._out.values():
            for peers in list(by_src.values()):
                yield from list(peers.values())

    def edge(self, src: str, dst: str, edge_type: EdgeType) -> Edge | None:
        return self._out[edge_type].get(src, {}).get(dst)

    def edges_out(self, node_id: str, edge_types: Collection[EdgeType] | None = None) -> list[Edge]:
        """Edges starting at ``node_id`` (all types unless given)."""
        types = EdgeType if edge_types is None else edge_types
        return [e for t in types for e in self._out[t].get(node_id, {}).values()]

    def edges_in(self, node_id: str, edge_types: Collection[EdgeType] | None = None) -> list[Edge]:
        """Edges ending at ``node_id`` (all types unless given)."""
        types = EdgeType if edge_types is None else edge_types
        return [e for t in types for e in self._in[t].get(node_id, {}).values()]

    # -- the reference-lookup protocol (lambo_core/references.py) ---------------
    def concept(self, node_id: str) -> Concept | None:
        return self._concepts.get(node_id)

    def concepts_with_prefix(self, hex8: str) -> list[Concept]:
        """Concepts whose id starts with these 8 hex digits (the short id recall prints)."""
        key = hex8.lower()
        if len(key) != 8 or not _HEX.issuperset(key):
            return []
        return [self._concepts[i] for i in multi_get(self._by_prefix, key)]

    def concepts_with_key(self, canonical_key: str) -> list[Concept]:
        return [self._concepts[i] for i in multi_get(self._by_key, canonical_key)]

    def concepts_with_folded_key(self, folded: str) -> list[Concept]:
        """Concepts whose canonical key, case folded (``text.fold_case``), is ``folded``."""
        return [self._concepts[i] for i in multi_get(self._by_folded_key, folded)]

    def is_interaction(self, some_id: str) -> bool:
        return some_id in self._interactions

    # -- dependents and blast radius --------------------------------------------
    def dependent_edges(self, node_id: str) -> list[tuple[str, EdgeType]]:
        """Each concept counted in the blast radius once, with the edge type that put it there.

        Dependency sources first (concepts that depend on ``node_id``), then
        its parent_of children not already listed; each group in edge order.
        """
        seen: dict[str, EdgeType] = {}
        for src in self._in[_DEPENDENT_IN].get(node_id, {}):
            if src in self._concepts and src != node_id:
                seen.setdefault(src, _DEPENDENT_IN)
        for child in self._out[_DEPENDENT_OUT].get(node_id, {}):
            if child in self._concepts and child != node_id:
                seen.setdefault(child, _DEPENDENT_OUT)
        return list(seen.items())

    def dependents(self, node_id: str) -> list[str]:
        """Concepts that depend on ``node_id`` (Dependency in) plus its children, distinct."""
        return [node for node, _ in self.dependent_edges(node_id)]

    def blast_radius(self, node_id: str) -> int:
        return len(self.dependent_edges(node_id))

    # -- cycles -------------------------------------------------------------------
    def ancestors(self, node_id: str, edge_types: Collection[EdgeType]) -> set[str]:
        """Every node that reaches ``node_id`` along one or more edges of these types.

        For parent_of these are its parents, grandparents, ...; ``node_id`` itself
        is included only if it already sits on a cycle.
        """
        starts = [src for t in edge_types for src in self._in[t].get(node_id, {})]
        return self._reach(starts, edge_types, self._in)

    def descendants(self, node_id: str, edge_types: Collection[EdgeType]) -> set[str]:
        """Every node ``node_id`` reaches along one or more edges of these types."""
        starts = [dst for t in edge_types for dst in self._out[t].get(node_id, {})]
        return self._reach(starts, edge_types, self._out)

    @staticmethod
    def _reach(
        starts: Iterable[str], edge_types: Collection[EdgeType], side: Adjacency
    ) -> set[str]:
        seen: set[str] = set()
        stack = list(starts)
        layers = [side[t] for t in edge_types]
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            for layer in layers:
                stack.extend(layer.get(node, ()))
        return seen

    def would_close_cycle(self, src: str, dst: str, edge_types: Collection[EdgeType]) -> bool:
        """Whether adding ``src -> dst`` closes a cycle among edges of these types.

        It does iff ``dst`` already reaches ``src`` (a self loop always does).
        Iterative DFS, so chain length is bounded by memory, not the stack.
        """
        return self.batch_closes_cycle([(src, dst)], edge_types) is not None

    def batch_closes_cycle(
        self, pairs: Iterable[tuple[str, str]], edge_types: Collection[EdgeType]
    ) -> int | None:
        """The index of the first pair that would close a cycle, or None.

        Pairs are taken in order, each checked against the graph plus the
        earlier pairs of the same batch, so a call whose own pairs loop
        (a->b, b->a) is caught at the pair that closes the loop. Pair ends need
        not exist yet (concepts the same call creates).
        """
        layers = [self._out[t] for t in edge_types]
        pending: dict[str, set[str]] = {}  # the batch's accepted pairs, src -> dsts
        for index, (src, dst) in enumerate(pairs):
            if src == dst or self._reaches(dst, src, layers, pending):
                return index
            pending.setdefault(src, set()).add(dst)
        return None

    @staticmethod
    def _reaches(
        start: str,
        goal: str,
        layers: list[dict[str, dict[str, Edge]]],
        pending: dict[str, set[str]],
    ) -> bool:
        seen = {start}
        stack = [start]
        while stack:
            node = stack.pop()
            nexts: list[Iterable[str]] = [layer.get(node, ()) for layer in layers]
            nexts.append(pending.get(node, ()))
            for peers in nexts:
                for peer in peers:
                    if peer == goal:
                        return True
                    if peer not in seen:
                        seen.add(peer)
                        stack.append(peer)
        return False

    # -- traversals ---------------------------------------------------------------
    def _steps(
        self, node_id: str, edge_types: Collection[EdgeType], direction: Direction
    ) -> Iterator[tuple[str, Edge]]:
        for t in edge_types:
            if direction != "in":
                for dst, edge in self._out[t].get(node_id, {}).items():
                    yield dst, edge
            if direction != "out":
                for src, edge in self._in[t].get(node_id, {}).items():
                    yield src, edge

    def expand(
        self,
        seed_ids: Iterable[str],
        depth: int,
        edge_types: Collection[EdgeType],
        *,
        direction: Direction = "both",
        limit: int | None = None,
    ) -> dict[str, int]:
        """Breadth-first expansion for recall: ``{node_id: hop}``, seeds at hop 0.

        Walks only onto concepts, at most ``depth`` hops, in insertion (BFS)
        order; ``limit`` caps how many nodes the result holds, seeds included.
        """
        hops: dict[str, int] = {}
        queue: deque[str] = deque()
        for seed in seed_ids:
            if seed in self._concepts and seed not in hops:
                if limit is not None and len(hops) >= limit:
                    return hops
                hops[seed] = 0
                queue.append(seed)
        while queue:
            node = queue.popleft()
            hop = hops[node]
            if hop >= depth:
                continue
            for peer, _ in self._steps(node, edge_types, direction):
                if peer in hops or peer not in self._concepts:
                    continue
                if limit is not None and len(hops) >= limit:
                    return hops
                hops[peer] = hop + 1
                queue.append(peer)
        return hops

    def neighbours(
        self,
        node_id: str,
        depth: int,
        limit: int,
        *,
        edge_types: Collection[EdgeType] | None = None,
    ) -> Neighbourhood:
        """The neighbourhood inspect renders: BFS both directions up to ``depth`` hops.

        ``hops`` holds at most ``limit`` neighbours (the focus is not counted);
        ``edges`` holds each edge walked between the focus and kept neighbours,
        once; ``truncated`` says the limit cut the walk short.
        """
        types = list(EdgeType) if edge_types is None else list(edge_types)
        result = Neighbourhood(focus=node_id)
        if node_id not in self._concepts:
            return result
        level = {node_id: 0}
        seen_edges: set[int] = set()
        queue: deque[str] = deque([node_id])
        while queue:
            node = queue.popleft()
            hop = level[node]
            if hop >= depth:
                continue
            for peer, edge in self._steps(node, types, "both"):
                if peer not in self._concepts:
                    continue
                if peer not in level:
                    if len(result.hops) >= limit:
                        result.truncated = True
                        continue
                    level[peer] = hop + 1
                    result.hops[peer] = hop + 1
                    queue.append(peer)
                if id(edge) not in seen_edges:
                    seen_edges.add(id(edge))
                    result.edges.append(edge)
        return result


if TYPE_CHECKING:
    from ..references import ConceptLookup

    # mypy checks that the graph satisfies the reference resolver's protocol
    _as_lookup: ConceptLookup = SessionGraph("")
