"""A concept's evidence: its counted support, and contradicting concepts with newer evidence.

Spec: lambo_inspect's admission section (what counts as support) and "Superseded concepts"
(newer evidence).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..contradiction import supporting_edges, written_with
from ..index.graph import SessionGraph
from ..model import Concept, EdgeType
from .rules import CanonRules


@dataclass(frozen=True)
class Support:
    """A concept's counted support at one time."""

    interactions: int  # distinct other interactions that declared counted support
    agents: int  # distinct agents among them, the concept's own writer left out
    latest: float | None  # the latest about-time among the counted edges


def measure_support(
    graph: SessionGraph,
    concept: Concept,
    now: float,
    edge_min_age: float,
    *,
    not_agent: str | None = None,
    not_node: str | None = None,
    after: float | None = None,
) -> Support:
    """Counted support of ``concept`` at ``now``: edges past the age floor, not from its own write.

    ``not_agent`` drops edges that agent declared, ``not_node`` a supporter,
    and ``after`` edges dated (about-time) at or before it.
    """
    interactions: set[str] = set()
    agents: set[str] = set()
    latest: float | None = None
    for other, edge in supporting_edges(graph, concept.id):
        if now - edge.created_at < edge_min_age:
            continue
        if other == not_node or (not_agent is not None and edge.agent_id == not_agent):
            continue
        if after is not None and edge.about_time <= after:
            continue
        supporter = graph.concept(other)
        if written_with(concept, supporter, edge):
            continue
        source = edge.interaction_id or (supporter.interaction_id if supporter else None)
        interactions.add(source or f"node:{other}")
        if edge.agent_id != concept.agent_id:
            agents.add(edge.agent_id)
        if latest is None or edge.about_time > latest:
            latest = edge.about_time
    return Support(len(interactions), len(agents), latest)


def aged_blast_radius(graph: SessionGraph, node_id: str, now: float, edge_min_age: float) -> int:
    """The blast radius the promotion gate measures: dependents whose edge is past the floor."""
    return len(
        {
            other
            for other, e in supporting_edges(graph, node_id)
            if now - e.created_at >= edge_min_age
        }
    )


@dataclass(frozen=True)
class NewerSide:
    """A contradicting concept holding newer evidence against a concept."""

    by: str  # the contradicting concept
    at: float  # the contradiction's date
    agent_id: str  # who declared the contradiction
    interactions: int  # other interactions behind its newer support
    agents: int


def newer_sides(
    graph: SessionGraph, node_id: str, now: float, rules: CanonRules
) -> list[NewerSide]:
    """Every contradicting concept holding newer evidence against ``node_id``, newest first."""
    concept = graph.concept(node_id)
    if concept is None:
        return []
    found: list[tuple[NewerSide, str]] = []
    for edge in graph.edges_in(node_id, (EdgeType.CONTRADICTS,)):
        by = graph.concept(edge.src)
        if by is None or by.id == node_id or edge.about_time <= concept.about_time:
            continue
        defended = measure_support(
            graph, concept, now, rules.edge_min_age_s, not_agent=edge.agent_id, not_node=by.id
        )
        latest = defended.latest if defended.latest is not None else -math.inf
        floor = max(concept.about_time, latest)
        newer = measure_support(
            graph,
            by,
            now,
            rules.edge_min_age_s,
            not_agent=edge.agent_id,
            not_node=node_id,
            after=floor,
        )
        if newer.interactions < rules.supersede_min_interactions:
            continue
        if rules.policy == "swarm" and newer.agents < rules.min_agents:
            continue
        side = NewerSide(by.id, edge.about_time, edge.agent_id, newer.interactions, newer.agents)
        found.append((side, by.canonical_key))
    found.sort(key=lambda pair: (-pair[0].at, pair[1], pair[0].by))
    return [side for side, _ in found]
