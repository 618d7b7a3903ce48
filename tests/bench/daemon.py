"""Daemon cycle time at 10k and 100k concepts. Run by hand: ``python tests/bench/daemon.py``.

Builds a session in a MemoryStore through ``Store.apply`` (not the write
pipeline): interactions of five concepts each, written by one of eight
agents over a simulated day; about half the concepts cite an earlier concept
of another interaction (a Dependency edge), one in ten is the parent_of child
of an earlier one, and one in a hundred contradicts an earlier one. A mature
session also carries statuses: 5% Candidate, 2% Venerable, 0.5% Canonical.
The session is opened as a serve opens it (``Session.open`` rebuilds the
index) and a ``Daemon`` runs cycles on a ManualClock two minutes past the
last write, so every edge is past the age floor.

For each size and policy (Swarm, Solo; ``canonization_supersede`` on, so the
supersession check runs too) it prints the first cycle of the mature session
and the median and max of the next ``--cycles`` (default 5): the whole
``Daemon.cycle`` (canonization, then the contradiction list) and, inside it,
the canonization part alone (``CycleReport.elapsed_ms``), with how many
concepts each looked at and how many steps it took. Asserts nothing.

Options: ``--sizes`` (default 10000 100000), ``--cycles N``, ``--seed``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from lambo_core.canon.rules import CanonRules  # noqa: E402
from lambo_core.clock import ManualClock  # noqa: E402
from lambo_core.daemon import Daemon  # noqa: E402
from lambo_core.model import (  # noqa: E402
    Concept,
    ConceptType,
    Edge,
    EdgeType,
    Interaction,
    InteractionKind,
    Status,
    WriteBatch,
    new_id,
)
from lambo_core.session import EmbedderPlan, Session  # noqa: E402
from lambo_core.store import MemoryStore  # noqa: E402

SESSION = "bench"
T0 = 1_760_000_000.0
DAY = 86_400.0
PER_INTERACTION = 5
AGENTS = [f"agent-{i}" for i in range(8)]
TYPES = list(ConceptType)
PLAN = EmbedderPlan(lazy=None, contract=None)


def build(size: int, seed: int) -> tuple[MemoryStore, float]:
    """A session of ``size`` concepts with statuses; returns the store and the last write time."""
    rng = np.random.default_rng(seed)
    store = MemoryStore()
    store.ensure_session(SESSION, T0)
    ids: list[str] = []
    interaction_of: list[str] = []
    step = DAY / max(1, size // PER_INTERACTION)
    at = T0
    for start in range(0, size, PER_INTERACTION):
        at += step
        agent = AGENTS[int(rng.integers(len(AGENTS)))]
        interaction = Interaction(
            new_id(), SESSION, agent, InteractionKind.DERIVE, at, at, f"call {start}"
        )
        batch = WriteBatch(session=SESSION, interaction=interaction)
        for i in range(start, min(size, start + PER_INTERACTION)):
            node = new_id()
            batch.concepts.append(
                Concept(
                    id=node,
                    session=SESSION,
                    content=f"fact number {i} about component {i % 977}",
                    canonical_key=f"fact {i} component {i % 977}",
                    concept_type=TYPES[i % len(TYPES)],
                    created_at=at,
                    about_time=at,
                    agent_id=agent,
                    interaction_id=interaction.id,
                )
            )
            batch.edges.append(
                Edge(
                    SESSION,
                    interaction.id,
                    node,
                    EdgeType.DERIVES,
                    1.0,
                    interaction.id,
                    agent,
                    at,
                    at,
                )
            )
            earlier = start  # concepts of earlier interactions only
            if earlier > 0:
                draw = rng.random()
                if draw < 0.5:  # cite an earlier concept, skewed toward popular old ones
                    target = ids[int(earlier * rng.random() ** 2)]
                    batch.edges.append(
                        Edge(
                            SESSION,
                            node,
                            target,
                            EdgeType.DEPENDENCY,
                            1.0,
                            interaction.id,
                            agent,
                            at,
                            at,
                        )
                    )
                if 0.5 <= draw < 0.6:
                    parent = ids[int(rng.integers(earlier))]
                    batch.edges.append(
                        Edge(
                            SESSION,
                            parent,
                            node,
                            EdgeType.HIERARCHICAL,
                            1.0,
                            interaction.id,
                            agent,
                            at,
                            at,
                        )
                    )
                if draw >= 0.99:
                    target = ids[int(rng.integers(earlier))]
                    batch.edges.append(
                        Edge(
                            SESSION,
                            node,
                            target,
                            EdgeType.CONTRADICTS,
                            1.0,
                            interaction.id,
                            agent,
                            at,
                            at,
                        )
                    )
            ids.append(node)
            interaction_of.append(interaction.id)
        store.apply(batch)
    # a mature session: some concepts already on their way
    draws = rng.random(size)
    for node, draw in zip(ids, draws, strict=True):
        if draw < 0.005:
            store.set_status(SESSION, node, Status.CANONICAL)
        elif draw < 0.025:
            store.set_status(SESSION, node, Status.VENERABLE)
        elif draw < 0.075:
            store.set_status(SESSION, node, Status.CANDIDATE)
    return store, at


def run(size: int, policy: str, cycles: int, seed: int) -> None:
    built = time.perf_counter()
    store, last = build(size, seed)
    clock = ManualClock(last + 120.0)
    session = Session.open(store, SESSION, PLAN, clock=clock)
    build_s = time.perf_counter() - built
    rules = CanonRules(policy="solo" if policy == "solo" else "swarm", supersede=True)
    daemon = Daemon(session, rules)
    graph = session.index.graph
    rows = []
    for _ in range(cycles + 1):
        started = time.perf_counter()
        report = daemon.cycle()
        total_ms = (time.perf_counter() - started) * 1000.0
        rows.append((total_ms, report.elapsed_ms, report.looked_at, len(report.steps)))
        clock.advance(rules.cycle_interval_s)
    first, rest = rows[0], rows[1:]
    med_total = statistics.median(r[0] for r in rest)
    med_canon = statistics.median(r[1] for r in rest)
    print(
        f"{size:>7} concepts, {graph.edge_count:>7} edges, {policy:>5}: "
        f"first cycle {first[0]:7.1f} ms (canonization {first[1]:7.1f} ms, looked at "
        f"{first[2]}, {first[3]} steps); next {len(rest)}: median {med_total:7.1f} ms "
        f"(canonization {med_canon:7.1f} ms), max {max(r[0] for r in rest):7.1f} ms; "
        f"contradictions listed {daemon.contradiction_count()}  [built in {build_s:.1f}s]",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    for size in args.sizes:
        for policy in ("swarm", "solo"):
            run(size, policy, args.cycles, args.seed)


if __name__ == "__main__":
    main()
