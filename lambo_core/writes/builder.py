"""The apply builder: one resolved write intent turned into concepts and edges.

Runs on the writer thread under the index lock. A derive's concept lands on a key this call
already placed, an existing key, a similarity merge or a new concept; then its edges, its
replacement candidates and possibly-superseded flags (spec: lambo_derive, "Replacement
candidates"; lambo_recall, "Possibly superseded, not declared").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..admission import NOTHING_WRITTEN, call_text, check_action_acyclic, check_hierarchy_acyclic
from ..call_scope import CallScope, Inferred
from ..derive_image import payload_vector
from ..errors import ImageIdTaken, StoreError
from ..index.graph import SessionGraph
from ..matching import MERGE_CANDIDATES, Facts, merge_refused
from ..model import (
    Concept,
    ConceptType,
    Edge,
    EdgeType,
    Interaction,
    InteractionKind,
    Vector,
    WriteBatch,
    WriteIntent,
    new_id,
    short_id,
)
from ..references import refuse_changed
from ..repo_scope import ScopedKey
from ..scoped_intent import WRITE_KINDS, unknown_kind
from ..session import Session
from ..supersession import Side, comparable, flags
from ..text import canonical_key, show_safely

COOCCURRENCE_PAIRS_PER_CALL = 10
COOCCURRENCE_WEIGHT = 0.5
# Replacement candidates (spec: lambo_derive, "Replacement candidates").
CANDIDATES_PER_CONCEPT = 3
CANDIDATE_BYTES = 2048
EXCERPT_CHARS = 80


def row_bytes(row: dict[str, Any]) -> int:
    """A candidate row's size as the byte bound counts it: its compact serialized JSON."""
    return len(json.dumps(row, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


@dataclass
class Placement:
    """One derive concept placed by similarity search: what it hit, and where it landed."""

    node_id: str
    content: str
    ctype: ConceptType
    hits: list[tuple[str, float]]  # top-k hits at or above the threshold, closest first
    never_into: set[str]
    merged_cosine: float | None = None  # set when the write merged into node_id


@dataclass
class Plan:
    """What one intent will write, worked out under the index lock."""

    batch: WriteBatch
    created: list[str] = field(default_factory=list)
    matched: list[str] = field(default_factory=list)
    embedded: int = 0
    semantic_merged: int = 0
    reinforced: int = 0
    citations: int = 0
    contradictions: int = 0
    action_node: str | None = None
    candidates: list[dict[str, Any]] = field(default_factory=list)  # within the byte bound
    candidate_total: int = 0
    supersessions: int = 0
    against_targets: list[str] = field(default_factory=list)


def plan_write(
    session: Session, intent: WriteIntent, payload: dict[str, Any], vectors: list[Vector] | None
) -> Plan:
    """What ``intent`` will write against the current graph (call under the index lock)."""
    if payload.get("kind") not in WRITE_KINDS:
        raise unknown_kind(payload.get("kind"))  # a clean failure, not a fault mid-write
    now = session.clock.now()
    event_time = payload.get("event_time")
    about = min(float(event_time), now) if event_time is not None else now
    kind = _INTERACTION_KINDS[payload["kind"]]
    if payload["kind"] == "derive":
        summary = call_text([c["content"] for c in payload["concepts"]])
    else:
        summary = payload["action" if payload["kind"] == "action" else "content"]
    interaction = Interaction(new_id(), session.name, intent.agent_id, kind, now, about, summary)
    plan = Plan(batch=WriteBatch(session=session.name, interaction=interaction))
    # The vectors came from the loaded embedder: its threshold is the one they merge by.
    # (an image write with no parent_of has no texts, and merges nothing: no model needed)
    threshold = session.embedder(0).merge_threshold if vectors else None
    builder = Builder(session, plan, intent.agent_id, now, about, interaction.id, threshold)
    builder.scope_to(payload.get("repo_scope"))
    if payload["kind"] == "derive":
        builder.derive(payload, vectors)
    elif payload["kind"] == "derive_image":
        builder.derive_image(payload, vectors or [])
    else:
        builder.action(payload, vectors)
    return plan


_INTERACTION_KINDS = {
    "derive": InteractionKind.DERIVE,
    "action": InteractionKind.ACTION,
    "derive_image": InteractionKind.DERIVE_IMAGE,
}


class Builder:
    """Turns one resolved intent into concepts and edges against the current graph."""

    def __init__(
        self,
        session: Session,
        plan: Plan,
        agent_id: str,
        now: float,
        about: float,
        interaction_id: str,
        merge_threshold: float | None,
    ) -> None:
        self.session = session
        self.graph: SessionGraph = session.index.graph
        self.plan = plan
        self.agent_id = agent_id
        self.now = now
        self.about = about
        self.interaction_id = interaction_id
        self.scope = CallScope(self.graph, None)  # what the call's texts name (scope_to)
        self.names = self.scope.names
        self._placements: list[Placement] = []  # placed by similarity search, in call order
        self._cites_itself: set[str] = set()  # merged into a concept its depends_on names
        self._edges: dict[tuple[str, str, EdgeType], Edge] = {}
        self._threshold = merge_threshold  # None: this write has no vectors
        self._read: dict[str, Facts] = {}  # see _facts

    def scope_to(self, repo: str | None) -> None:
        """Read this call's texts under its repo_scope (call_scope.py), before placing any."""
        self.scope = CallScope(self.graph, repo)
        self.names = self.scope.names

    # -- concepts ---------------------------------------------------------------------------
    def place(
        self,
        content: str,
        ctype: ConceptType,
        vector: Vector | None,
        *,
        merge: bool = True,
        never_into: set[str] | None = None,
    ) -> str:
        """The node id ``content`` lands on: this call's, an existing key, a merge, or new."""
        scoped = self.scope.own_path(content, ctype)
        if scoped is not None:
            return self._place_scoped(scoped, content, vector)
        key = canonical_key(content)
        earlier = self.names.placed(content)
        if earlier is not None:
            return earlier.node_id
        existing = self.names.exact(content)
        if existing is not None:
            node_id = existing.node_id
            self._matched(node_id)
        else:
            barred = never_into or set()
            hits = self._near(vector) if merge else []
            target = self._merge_target(content, hits, barred)
            if target is not None:
                self.plan.semantic_merged += 1
                self._matched(target)
                node_id = target
            else:
                node_id = self._create(content, key, ctype, vector)
            if merge and hits:
                placed = Placement(node_id, content, ctype, hits, barred)
                if target is not None:
                    placed.merged_cosine = dict(hits)[target]
                self._placements.append(placed)
        self.names.place(content, node_id, new=node_id in self.plan.created)
        return node_id

    def place_named(self, field: str, text: str, ctype: ConceptType, vector: Vector | None) -> str:
        """An action's produces / modifies entry: the concept its text names (as written,
        else the one in any case; several refuse the write), or a new one; under a
        repo_scope, a path is that repository's."""
        scoped = self.scope.named_path(text)
        if scoped is not None:
            return self._place_scoped(scoped, text, vector)
        return self.land(text, Inferred(self.names.named(field, text)), ctype, vector)

    def land(self, text: str, inferred: Inferred, ctype: ConceptType, vector: Vector | None) -> str:
        """Where a text whose concept was looked up lands: that concept, or a new one."""
        found, key = inferred.named, inferred.key
        if found is None:
            if key is not None:
                return self._place_scoped(key, text, vector)
            return self.place(text, ctype, vector, merge=False)
        if not found.new:
            self._matched(found.node_id)
        if key is not None:
            self.scope.place_scoped(key, text, found.node_id, new=found.new)
        else:
            self.names.place(text, found.node_id, new=found.new)
        return found.node_id

    def _end_lander(self, vectors: list[Vector]) -> Callable[[str, Inferred], str]:
        """Lands a parent_of pair's ends in order, each with its vector (if any)."""
        left = iter(vectors)

        def land_end(text: str, inferred: Inferred) -> str:
            return self.land(text, inferred, ConceptType.ENTITY, next(left, None))

        return land_end

    def _place_scoped(self, key: ScopedKey, text: str, vector: Vector | None) -> str:
        """A repository's path: the concept at its key, else a new scoped Resource, whose
        content keeps this first spelling; never merged by similarity (spec: Exact text)."""
        found = self.scope.scoped(key)
        if found is not None:
            node_id = found.node_id
            if not found.new:
                self._matched(node_id)
        else:
            node_id = self._create(
                text, canonical_key(text), ConceptType.RESOURCE, vector, repo=key.repo
            )
        self.scope.place_scoped(key, text, node_id, new=node_id in self.plan.created)
        return node_id

    def _matched(self, node_id: str) -> None:
        if node_id not in self.plan.matched and node_id not in self.plan.created:
            self.plan.matched.append(node_id)

    def _near(self, vector: Vector | None) -> list[tuple[str, float]]:
        """The one vector search a placement makes: top-k hits at or above the threshold.

        The merge, the replacement candidates and the possibly-superseded flag all
        read these hits; nothing searches again.
        """
        matrix = self.session.index.vectors
        if vector is None or self._threshold is None or matrix is None or not matrix:
            return []
        if matrix.dim != vector.shape[0]:
            return []
        hits = matrix.top_k(vector, MERGE_CANDIDATES)
        return [(node_id, cosine) for node_id, cosine in hits if cosine >= self._threshold]

    def _mergeable(self, content: str, node_id: str, never_into: set[str]) -> bool:
        if node_id in never_into:
            return False
        candidate = self.graph.concept(node_id)
        return (
            candidate is not None
            and not candidate.repo_scope  # nothing merges into a scoped path
            and not candidate.is_image  # nor into an image (spec: lambo_derive_image)
            and merge_refused(self._facts(content), self._facts(candidate.content)) is None
        )

    def _facts(self, text: str) -> Facts:
        """The merge guard's reading of ``text``, once per write (a text meets up to
        MERGE_CANDIDATES neighbours, twice when the merge ties)."""
        if text not in self._read:
            self._read[text] = Facts.of(text)
        return self._read[text]

    def _merge_target(
        self, content: str, hits: list[tuple[str, float]], never_into: set[str]
    ) -> str | None:
        for node_id, _cosine in hits:
            if self._mergeable(content, node_id, never_into):
                return node_id
        return None

    def _create(
        self,
        content: str,
        key: str,
        ctype: ConceptType,
        vector: Vector | None,
        *,
        repo: str | None = None,
        source: str | None = None,
    ) -> str:
        node_id = new_id()
        self.plan.batch.concepts.append(
            Concept(
                id=node_id,
                session=self.session.name,
                content=content,
                canonical_key=key,
                concept_type=ctype,
                created_at=self.now,
                about_time=self.about,
                agent_id=self.agent_id,
                interaction_id=self.interaction_id,
                repo_scope=repo,
                vector=vector,
                vector_source=source,
            )
        )
        self.plan.created.append(node_id)
        if vector is not None:
            self.plan.embedded += 1
        return node_id

    # -- edges ------------------------------------------------------------------------------
    def edge(self, src: str, dst: str, etype: EdgeType, weight: float = 1.0) -> None:
        key = (src, dst, etype)
        if key in self._edges:
            return
        if self.graph.edge(src, dst, etype) is not None:
            self.plan.reinforced += 1
        self._edges[key] = Edge(
            self.session.name,
            src,
            dst,
            etype,
            weight,
            self.interaction_id,
            self.agent_id,
            self.now,
            self.about,
        )

    def _finish(self) -> None:
        self.plan.batch.edges = list(self._edges.values())

    def _linked(self, a: str, b: str, *, stored: bool = True) -> bool:
        """An against or depends_on between ``a`` and ``b``, either way: in this call, and
        (``stored``) already in the graph."""
        for etype in (EdgeType.DEPENDENCY, EdgeType.CONTRADICTS):
            for src, dst in ((a, b), (b, a)):
                if (src, dst, etype) in self._edges:
                    return True
                if stored and self.graph.edge(src, dst, etype) is not None:
                    return True
        return False

    # -- replacement candidates and possible supersessions -----------------------------------
    def _neighbours(self) -> None:
        """Replacement candidates and possibly-superseded flags for this derive's placements.

        Runs after the call's edges are built, so a depends_on or against written by
        this same call excludes a pair. Never lists a concept this call wrote or
        re-derived, except the concept a placement merged into (marked merged).
        """
        this_call = set(self.plan.created) | set(self.plan.matched)
        rows: list[dict[str, Any]] = []
        seen: set[tuple[str, str]] = set()
        for placed in self._placements:
            for row in self._candidates(placed, this_call):
                pair = (row["node_id"], row["new_id"])
                if pair not in seen:  # two texts of the call merged into one concept
                    seen.add(pair)
                    rows.append(row)
            if placed.merged_cosine is None:
                self._flag_supersessions(placed, this_call)
        used = 0
        for row in rows:
            size = row_bytes(row)
            if used + size > CANDIDATE_BYTES:
                break  # rows stay a prefix, in call order then closest first
            self.plan.candidates.append(row)
            used += size
        self.plan.candidate_total = len(rows)

    def _eligible(self, placed: Placement, hit: Concept) -> bool:
        """Same type (logic, constraint, observation), same repository scope (this write
        records none; none do today), not an image."""
        return comparable(placed.ctype, hit)

    def _candidates(self, placed: Placement, this_call: set[str]) -> list[dict[str, Any]]:
        merged_with: set[str] = set()
        if placed.merged_cosine is not None:
            # The concept merged into, and any other it tied with for the merge.
            tie = round(placed.merged_cosine, 4)
            merged_with = {
                node_id
                for node_id, cosine in placed.hits
                if round(cosine, 4) == tie
                and self._mergeable(placed.content, node_id, placed.never_into)
            }
        out: list[dict[str, Any]] = []
        for node_id, cosine in placed.hits:
            if len(out) >= CANDIDATES_PER_CONCEPT:
                break
            merged = node_id in merged_with
            if placed.merged_cosine is not None and not merged:
                continue  # nothing was created: only what it merged with is listed
            if not merged and node_id in this_call:
                continue
            hit = self.graph.concept(node_id)
            if hit is None or not self._eligible(placed, hit):
                continue
            if node_id == placed.node_id:
                if node_id in self._cites_itself:
                    continue  # the write cites what it merged into: a depends_on between them
            elif self._linked(placed.node_id, node_id, stored=not merged):
                # A created concept has no stored edges but this call's; for a merge the
                # write's concept is the one merged into, and only what this write itself
                # declares (its depends_on, its against) ties it to another tied concept.
                continue
            row: dict[str, Any] = {
                "id": short_id(node_id),
                "node_id": node_id,
                "excerpt": show_safely(hit.content, EXCERPT_CHARS),
                "cosine": round(cosine, 4),
                "new_id": short_id(placed.node_id),
            }
            if merged:
                row["merged"] = True
            if hit.about_time > self.about:
                row["newer"] = True
            out.append(row)
        return out

    def _flag_supersessions(self, placed: Placement, this_call: set[str]) -> None:
        """SUPERSEDES_SUSPECTED, newer -> older by about-time, for a created concept's hits."""
        for node_id, _cosine in placed.hits:
            if node_id in this_call:
                continue
            hit = self.graph.concept(node_id)
            if hit is None or not self._eligible(placed, hit):
                continue
            # a backfilled write (dated before the hit) makes the hit the newer fact
            flagged = flags(
                Side(placed.node_id, placed.content, self.about),
                Side(node_id, hit.content, hit.about_time),
                self._linked,
            )
            if flagged is None:
                continue
            newer, older = flagged
            self.edge(newer.node_id, older.node_id, EdgeType.SUPERSEDES_SUSPECTED)
            self.plan.supersessions += 1

    def _check_ref(self, field: str, ref: dict[str, Any]) -> str:
        """The node a reference fixed at admission still names, or the receipt's refusal."""
        node_id = str(ref["node_id"])
        if not self.scope.still_names(str(ref["ref"]), node_id):
            raise refuse_changed(field, str(ref["ref"]))
        return node_id

    # -- lambo_derive -----------------------------------------------------------------------
    def derive(self, payload: dict[str, Any], vectors: list[Vector] | None) -> None:
        concepts = payload["concepts"]
        nodes: list[str] = []
        dependency_pairs: list[tuple[str, str]] = []
        for i, c in enumerate(concepts):
            against = [
                self._check_ref(f"concepts[{i}].against[{j}]", r)
                for j, r in enumerate(c["against"])
            ]
            depends = [
                self._check_ref(f"concepts[{i}].depends_on[{j}]", r)
                for j, r in enumerate(c["depends_on"])
            ]
            vector = vectors[i] if vectors is not None else None
            node = self.place(c["content"], ConceptType(c["type"]), vector, never_into=set(against))
            nodes.append(node)
            self.edge(self.interaction_id, node, EdgeType.DERIVES)
            for dep in depends:
                if dep == node:  # merged into what it cites: the merge already ties them
                    self.plan.reinforced += 1
                    self._cites_itself.add(node)
                    continue
                dependency_pairs.append((node, dep))
                self.edge(node, dep, EdgeType.DEPENDENCY)
                self.plan.citations += 1
            for target in against:
                if target != node:
                    self.edge(node, target, EdgeType.CONTRADICTS)
                    self.plan.contradictions += 1
                    self.plan.against_targets.append(target)
        if self.graph.batch_closes_cycle(dependency_pairs, (EdgeType.DEPENDENCY,)) is not None:
            raise StoreError(
                "depends_on would close a dependency loop with a write applied since this one "
                "was accepted" + NOTHING_WRITTEN
            )
        distinct = list(dict.fromkeys(nodes))
        pairs = [(a, b) for i, a in enumerate(distinct) for b in distinct[i + 1 :]]
        for a, b in pairs[:COOCCURRENCE_PAIRS_PER_CALL]:
            self.edge(a, b, EdgeType.COOCCURRENCE, COOCCURRENCE_WEIGHT)

        offset = len(concepts)
        hierarchy: list[tuple[str, str]] = []
        for i, pair in enumerate(payload["parent_of"]):
            end_vectors = vectors[offset + 2 * i : offset + 2 * i + 2] if vectors else []
            land_end = self._end_lander(end_vectors)
            ends = self.scope.pair(f"parent_of[{i}].", pair["parent"], pair["child"], land_end)
            hierarchy.append(ends)
            self.edge(ends[0], ends[1], EdgeType.HIERARCHICAL)
        check_hierarchy_acyclic(self.graph, hierarchy)
        self._neighbours()
        self._finish()

    # -- lambo_derive_image -----------------------------------------------------------------
    def derive_image(self, payload: dict[str, Any], end_vectors: list[Vector]) -> None:
        """The image concept at its content's key: the same concept when an image already
        holds it, refused when a text concept does; else new, with the image's vector. It
        never merges by similarity, so it has no replacement candidates either."""
        content, ctype = payload["content"], ConceptType(payload["type"])
        existing = self.names.exact(content)
        if existing is not None:
            held = self.graph.concept(existing.node_id)
            if held is None or not held.is_image:
                raise ImageIdTaken(
                    f"{payload['image_id']}: a text concept already holds the content "
                    f"'{show_safely(content, EXCERPT_CHARS)}'; choose another image id, or "
                    "derive the image before naming it" + NOTHING_WRITTEN
                )
            node = existing.node_id
            self._matched(node)
        else:
            vector = payload_vector(payload, self.session.contract)
            node = self._create(
                content, canonical_key(content), ctype, vector, source=payload["source"]
            )
        self.names.place(content, node, new=node in self.plan.created)
        self.edge(self.interaction_id, node, EdgeType.DERIVES)
        hierarchy: list[tuple[str, str]] = []
        for i, pair in enumerate(payload["parent_of"]):
            land_end = self._end_lander(end_vectors[2 * i : 2 * i + 2])
            ends = self.scope.pair(f"parent_of[{i}].", pair["parent"], pair["child"], land_end)
            hierarchy.append(ends)
            self.edge(ends[0], ends[1], EdgeType.HIERARCHICAL)
        check_hierarchy_acyclic(self.graph, hierarchy)
        self._finish()

    # -- lambo_record_action ----------------------------------------------------------------
    def action(self, payload: dict[str, Any], vectors: list[Vector] | None) -> None:
        vector_of = iter(vectors or [])

        def next_vector() -> Vector | None:
            return next(vector_of, None) if vectors is not None else None

        against = [self._check_ref(f"against[{j}]", r) for j, r in enumerate(payload["against"])]
        act = self.place(payload["action"], ConceptType.RESOURCE, next_vector(), merge=False)
        self.plan.action_node = act
        self.edge(self.interaction_id, act, EdgeType.DERIVES)
        pairs: list[tuple[str, str]] = []
        for field_name, etype in (("produces", EdgeType.PRODUCES), ("modifies", EdgeType.MODIFIES)):
            for j, target in enumerate(payload[field_name]):
                where = f"{field_name}[{j}]"
                node = self.place_named(where, target, ConceptType.RESOURCE, next_vector())
                pairs.append((act, node))
                self.edge(act, node, etype)
        for j, dep in enumerate(payload["depends_on"]):
            if dep.get("node_id"):
                node = self._check_ref(f"depends_on[{j}]", dep)
            else:
                inferred = self.scope.infer(f"depends_on[{j}]", dep["ref"], ids_accepted=True)
                node = self.land(dep["ref"], inferred, ConceptType.ENTITY, next_vector())
            pairs.append((act, node))
            self.edge(act, node, EdgeType.DEPENDENCY)
            self.plan.citations += 1
        for target in against:
            self.edge(act, target, EdgeType.CONTRADICTS)
            self.plan.contradictions += 1
            self.plan.against_targets.append(target)
        check_action_acyclic(self.graph, pairs)
        self._finish()
