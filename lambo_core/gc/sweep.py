"""Sweeps on a session: when one is due, running it, the survivors it owes, and the stats.

Spec: lambo_stats (``gc``). It runs on the session's writer thread (the daemon calls
``maybe_sweep``); what the session keeps between sweeps is its ``gc_state``.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from ..errors import LamboError
from ..text import format_rfc3339
from .plan import PLAN_CHUNK, plan_sweep
from .report import TRIGGERS, SweepReport, Trigger
from .settings import GcSettings

if TYPE_CHECKING:
    from ..session import Session

log = logging.getLogger(__name__)


def maybe_sweep(session: Session, now: float, settings: GcSettings) -> SweepReport | None:
    """Sweep if a trigger is due; start the clock of a session that never swept.

    Returns the sweep's report, or None when nothing ran (including the first
    call on a session that never swept, which only stores ``last_gc_at`` and
    ``last_gc_epoch``).
    """
    record = session.store.get_session(session.name)
    if record is None:
        return None
    if record.last_gc_at is None:
        session.store.set_gc_clock(session.name, now, record.mutation_count)
        return None
    if record.mutation_count - record.last_gc_epoch >= settings.mutations_per_sweep:
        return sweep(session, now, settings, "mutations")
    if now - record.last_gc_at >= settings.elapsed_s:
        return sweep(session, now, settings, "elapsed")
    return None


def sweep(session: Session, now: float, settings: GcSettings, trigger: Trigger) -> SweepReport:
    """Run one sweep now: collect, drop weak edges, bump survivors, store the clock. On the
    writer thread.

    Concepts go first, then weak edges, each deleted from the store and then
    mirrored in the index. A store failure while deleting propagates with that
    deletion not mirrored (concepts already collected stay collected) and the
    clock unchanged, so the next call plans again; a failure writing survivor
    bumps keeps them owed.
    """
    if trigger not in TRIGGERS:
        raise ValueError(f"trigger must be one of {', '.join(TRIGGERS)}")
    started = time.perf_counter()
    record = session.store.get_session(session.name)
    epoch = record.mutation_count if record is not None else 0
    index = session.index
    plan = plan_sweep(
        index.graph,
        now,
        settings,
        pending_access=lambda node_id: session.access_counts.pending(node_id),
        lock=index.lock,
        summaries=index.summaries,
    )
    if plan.collect:
        session.store.delete_concepts(session.name, plan.collect)
        index.remove_concepts(plan.collect)
    dropped = 0
    if plan.drop_edges:
        dropped = session.store.delete_edges(session.name, plan.drop_edges)
        for start in range(0, len(plan.drop_edges), PLAN_CHUNK):
            index.remove_edges(plan.drop_edges[start : start + PLAN_CHUNK])
    spared_by_cap = set(plan.deferred)  # due, left only by the cap: they outlived nothing
    with index.lock:
        survivors = [nid for nid in index.graph.concept_ids() if nid not in spared_by_cap]
    state = session.gc_state
    with state.lock:
        for node_id in plan.collect:
            state.owed.pop(node_id, None)
        owed = state.owed
        for node_id in survivors:
            owed[node_id] = owed.get(node_id, 0) + 1
    bumped = drain_survivors(session, settings.survivor_bumps_per_sweep)
    session.store.set_gc_clock(session.name, now, epoch)
    kept: dict[str, int] = {}
    for reason in plan.kept.values():
        kept[reason] = kept.get(reason, 0) + 1
    report = SweepReport(
        trigger=trigger,
        at=now,
        epoch=epoch,
        collected=len(plan.collect),
        deferred=len(plan.deferred),
        collection_cap=settings.per_sweep_cap,
        cap_bound=plan.cap_bound,
        resources_spared_by_dependents=plan.resources_spared_by_dependents,
        survivors_deferred=owed_survivor_bumps(session),
        collected_ids=tuple(plan.collect),
        kept=kept,
        survivors_bumped=bumped,
        weak_edges=dropped,
        duration_ms=(time.perf_counter() - started) * 1000.0,
    )
    with state.lock:
        state.last = report
    log.info(
        "session %s: gc sweep (%s) collected %d, deferred %d (cap %d), kept %s, "
        "dropped %d weak edges, survivor bumps written %d, owed %d, %.0f ms",
        session.name,
        trigger,
        report.collected,
        report.deferred,
        report.collection_cap,
        kept or "none",
        report.weak_edges,
        bumped,
        report.survivors_deferred,
        report.duration_ms,
    )
    return report


def drain_survivors(session: Session, limit: int | None = None) -> int:
    """Write up to ``limit`` owed ``gc_survived`` increments (all if None); how many were written.

    On the writer thread. Concepts collected meanwhile are skipped by the
    store and the graph alike; a store failure keeps the increments owed.
    """
    state = session.gc_state
    with state.lock:
        budget = sum(state.owed.values()) if limit is None else limit
        batch: dict[str, int] = {}
        taken = 0
        for node_id, n in state.owed.items():
            if taken >= budget:
                break
            step = min(n, budget - taken)
            batch[node_id] = step
            taken += step
        for node_id, step in batch.items():
            left = state.owed[node_id] - step
            if left:
                state.owed[node_id] = left
            else:
                del state.owed[node_id]
    if not batch:
        return 0
    ids = [node_id for node_id, step in batch.items() for _ in range(step)]
    try:
        session.store.bump_gc_survived(session.name, ids)
    except LamboError as exc:
        log.warning("gc_survived not written (kept owed): %s", exc.render())
        with state.lock:
            for node_id, step in batch.items():
                state.owed[node_id] = state.owed.get(node_id, 0) + step
        return 0
    with session.index.lock:
        graph = session.index.graph
        for node_id, step in batch.items():
            concept = graph.concept(node_id)
            if concept is not None:
                concept.gc_survived += step
        graph.touch()
    return taken


def owed_survivor_bumps(session: Session) -> int:
    """``gc_survived`` increments this server still owes the session's concepts."""
    state = session.gc_state
    with state.lock:
        return sum(state.owed.values())


def last_sweep(session: Session) -> SweepReport | None:
    """The most recent sweep this server ran on the session, or None."""
    state = session.gc_state
    with state.lock:
        return state.last


def gc_stats(session: Session) -> dict[str, Any]:
    """lambo_stats's ``gc`` object: the stored clock and this server's last sweep."""
    record = session.store.get_session(session.name)
    at = record.last_gc_at if record is not None else None
    report = last_sweep(session)
    return {
        "last_gc_at": format_rfc3339(at) if at is not None else None,
        "last_gc_epoch": record.last_gc_epoch if record is not None else 0,
        "last_sweep": report.to_json() if report is not None else None,
    }
