"""Garbage-collection sweep time at 10k and 100k concepts: ``python tests/bench/gc.py``.

Builds a session through ``Store.apply`` (not the write pipeline), written
over a simulated 60 days so recency has decayed unevenly: interactions of 20
concepts each by one of eight agents, every concept with its Derives edge;
about half cite an earlier concept (Dependency), one in ten is the parent_of
child of an earlier one, one in a hundred contradicts an earlier one, and
co-occurrence edges tie a call's first concepts together. 2% Venerable, 0.5%
Canonical; 1 in 20 concepts has been recalled a few times. The session is
opened as a serve opens it and swept a day after the last write.

For each size and store (memory, SQLite in a temporary directory) it prints
the plan alone (``plan_sweep`` with the index lock, as a sweep runs it: its
total, and the longest single hold of the lock, which is the longest a recall
waits on a sweep), then two real sweeps one after the other: concepts due,
collected, deferred, kept by reason, and the sweep's own time (plan, deletes,
index mirror, survivor bumps, the clock). Asserts nothing.

Options: ``--sizes`` (default 10000 100000), ``--cap`` (default 2000),
``--stores`` (default memory sqlite), ``--seed``.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from lambo_core.gc.plan import plan_sweep  # noqa: E402
from lambo_core.gc.settings import GcSettings  # noqa: E402
from lambo_core.gc.sweep import sweep  # noqa: E402
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
from lambo_core.store import MemoryStore, SqliteStore  # noqa: E402
from lambo_core.store.base import Store  # noqa: E402

SESSION = "bench"
T0 = 1_760_000_000.0
DAY = 86_400.0
SPAN = 60 * DAY
PER_INTERACTION = 20
AGENTS = [f"agent-{i}" for i in range(8)]
TYPES = list(ConceptType)
PLAN = EmbedderPlan(lazy=None, contract=None)


def build(store: Store, size: int, seed: int) -> float:
    """Write a session of ``size`` concepts; returns the last write time."""
    rng = np.random.default_rng(seed)
    store.ensure_session(SESSION, T0)
    ids: list[str] = []
    step = SPAN / max(1, size // PER_INTERACTION)
    at = T0
    for start in range(0, size, PER_INTERACTION):
        at += step
        agent = AGENTS[int(rng.integers(len(AGENTS)))]
        interaction = Interaction(new_id(), SESSION, agent, InteractionKind.DERIVE, at, at, "call")
        batch = WriteBatch(session=SESSION, interaction=interaction)

        def edge(src: str, dst: str, etype: EdgeType, weight: float = 1.0) -> Edge:
            return Edge(SESSION, src, dst, etype, weight, interaction.id, agent, at, at)  # noqa: B023

        fresh: list[str] = []
        for i in range(start, min(size, start + PER_INTERACTION)):
            node = new_id()
            draw = rng.random()
            status = (
                Status.CANONICAL
                if draw < 0.005
                else Status.VENERABLE
                if draw < 0.025
                else Status.NONE
            )
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
                    status=status,
                    access_count=int(rng.integers(1, 8)) if rng.random() < 0.05 else 0,
                )
            )
            batch.edges.append(edge(interaction.id, node, EdgeType.DERIVES))
            if start > 0:
                draw = rng.random()
                target = ids[int(start * rng.random() ** 2)]
                if draw < 0.5:
                    batch.edges.append(edge(node, target, EdgeType.DEPENDENCY))
                elif draw < 0.6:
                    batch.edges.append(edge(target, node, EdgeType.HIERARCHICAL))
                elif draw < 0.61:
                    batch.edges.append(edge(node, target, EdgeType.CONTRADICTS))
            fresh.append(node)
        for a, b in itertools.pairwise(fresh[:6]):
            batch.edges.append(edge(a, b, EdgeType.COOCCURRENCE, 0.5))
        ids.extend(fresh)
        store.apply(batch)
    return at


class _TimedLock:
    """The index lock, timing each hold."""

    def __init__(self, lock: Any) -> None:
        self.lock = lock
        self.holds_ms: list[float] = []
        self._since = 0.0

    def __enter__(self) -> None:
        self.lock.acquire()
        self._since = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.holds_ms.append((time.perf_counter() - self._since) * 1000)
        self.lock.release()


def run(kind: str, size: int, cap: int, seed: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store: Store = MemoryStore() if kind == "memory" else SqliteStore(Path(tmp) / "gc.db")
        started = time.perf_counter()
        last = build(store, size, seed)
        built = time.perf_counter() - started
        session = Session.open(store, SESSION, PLAN)
        now = last + DAY
        settings = GcSettings(per_sweep_cap=cap)
        lock = _TimedLock(session.index.lock)
        started = time.perf_counter()
        plan = plan_sweep(session.index.graph, now, settings, lock=lock)
        planned_ms = (time.perf_counter() - started) * 1000
        print(
            f"{kind:6} {size:>7} concepts (built in {built:.1f} s): plan {planned_ms:.0f} ms in "
            f"{len(lock.holds_ms)} holds of the index lock, longest {max(lock.holds_ms):.0f} ms; "
            f"due {plan.due}, to collect {len(plan.collect)}, deferred {len(plan.deferred)}"
        )
        for n in (1, 2):
            report = sweep(session, now, settings, "mutations")
            print(
                f"       sweep {n}: collected {report.collected}, deferred {report.deferred}, "
                f"cap_bound {report.cap_bound}, kept {report.kept}, survivor bumps "
                f"{report.survivors_bumped} (owed {report.survivors_deferred}): "
                f"{report.duration_ms:.0f} ms"
            )
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--cap", type=int, default=2_000)
    parser.add_argument("--stores", nargs="+", default=["memory", "sqlite"])
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    for size in args.sizes:
        for kind in args.stores:
            run(kind, size, args.cap, args.seed)


if __name__ == "__main__":
    main()
