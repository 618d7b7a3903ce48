"""One daemon per session: canonization cycles, the contradiction list, and sweeps.

Spec: "Contradiction warnings" (the warning "is found by the background
daemon, so it appears from the daemon's next cycle after the write"; the
contradiction budget #196), lambo_stats (``canonization_cycles``), and the
canonization rules in ``canon.py``.

``Daemon.cycle`` is one pass, run on the session's single writer thread
(``attach`` registers it with ``WritePipeline.every`` at
``[canonization] cycle_interval_s``), so it never races the apply worker:

1. a canonization cycle (``canon.run_cycle``): at most one step per concept,
   each persisted and recorded as a canonization event;
2. garbage collection: ``gc.maybe_sweep(session, now, gc_settings)``, which
   sweeps when ``[gc]``'s mutation count or elapsed time is due (the daemon
   keeps the last report, ``last_sweep``); then any extra hooks in ``sweeps``,
   each called with ``(session, now)``. A sweep that ran (anything but None
   returned) makes the next cycle measure every concept's support afresh,
   since it may have removed concepts;
3. the contradiction list recall reads: every concept a contradiction
   currently fires on (``contradiction.contradictions``), at most
   ``contradiction_budget`` of them kept, Canonical first, then Venerable,
   Candidate and the rest, newest contradiction first within a status; the
   rest are counted in ``contradictions_dropped``.

At start, the daemon's first job on the writer thread (as soon as the worker
is free) is the contradiction list alone (``list_contradictions``), so a
fresh serve warns on the contradictions its store already holds without
waiting one interval; the first whole cycle follows one interval later. The
start pass takes no canonization step and sweeps nothing: a serve restarted
often must not promote (or age concepts through sweeps) faster than one
cycle per interval. Until that first listing, recall checks every hit
(``listing`` stays None), so a recall answered before
it misses nothing either.

Every time it reads comes from one injectable clock (``clock``, the
session's by default), so tests drive cycles by calling ``cycle()`` on a
``ManualClock`` without sleeping. A session's other background jobs keep
their own schedules: the write-behind of recall access counts runs on the
same writer thread (``WritePipeline.flush_access_counts``, about once a
second), and the lease heartbeat in the hub (``hub.LeaseKeeper.renew``), so a
long cycle can never let the lease lapse.

The daemon registers itself per session (``daemon_for``), so readers that
hold only the session (recall, stats) can reach its list and counters.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import gc
from .canon import RANK, CanonRules, CycleReport, CycleState, run_cycle
from .clock import Clock
from .config import Config
from .contradiction import ContradictionInfo, contradicted_targets, contradictions
from .owned import PerOwner

if TYPE_CHECKING:
    from .session import Session
    from .writes import WritePipeline

log = logging.getLogger(__name__)

# A sweep the daemon runs after each cycle: ``(session, now) -> anything``.
Sweep = Callable[["Session", float], object]

CONTRADICTION_CHUNK = 2048  # targets checked per hold of the index lock


class Daemon:
    """The background work of one session, one ``cycle()`` at a time."""

    def __init__(
        self,
        session: Session,
        config: Config | CanonRules | None = None,
        clock: Clock | None = None,
        *,
        gc_settings: gc.GcSettings | None = None,
    ) -> None:
        """``config``: a Config (its ``[canonization]`` and ``[gc]``), or the rules alone
        (garbage collection then runs only with ``gc_settings``)."""
        self.session = session
        self.config = config if isinstance(config, Config) else None
        if isinstance(config, CanonRules):
            self.rules = config
        elif config is not None:
            self.rules = CanonRules.from_config(config)
        else:
            self.rules = CanonRules()
        if gc_settings is None and self.config is not None:
            gc_settings = gc.GcSettings.from_config(self.config)
        self.gc_settings = gc_settings  # None: this daemon does not collect
        self.last_sweep: gc.SweepReport | None = None
        self.clock: Clock = clock or session.clock
        # More sweeps after garbage collection's, each called with (session, now).
        self.sweeps: list[Sweep] = []
        self._state = CycleState()
        self._lock = threading.Lock()  # the counters and the list, read from other threads
        self.cycles = 0
        self.promotions = 0
        self.demotions = 0
        self.failed_cycles = 0  # cycles a store refusal stopped early
        self.last_report: CycleReport | None = None
        self._contradictions: dict[str, ContradictionInfo] = {}
        self.contradictions_dropped = 0
        _DAEMONS.put(session, self)
        # What recall warns on (the service hands it over): the list, from the first
        # listing on; until then None, and recall checks every hit.
        self.listing: Callable[[str], bool] | None = None

    def attach(self, pipeline: WritePipeline) -> Daemon:
        """On the pipeline's writer thread: the contradiction list at once, then ``cycle``
        every ``cycle_interval_s``."""
        interval = self.rules.cycle_interval_s
        started = False

        def scheduled() -> None:
            nonlocal started
            if started:
                self.cycle()
            else:
                started = True
                self.list_contradictions()

        pipeline.every(interval, scheduled, first_in_s=0.0)
        return self

    # -- the cycle ---------------------------------------------------------------------
    def cycle(self) -> CycleReport:
        """One pass: canonization, the sweeps, then the contradiction list.

        Call it on the session's writer thread (``attach`` does), or while no
        write is being applied (tests): canonization reads the graph without
        holding the index lock, relying on being its only writer meanwhile.
        """
        now = self.clock.now()
        report = run_cycle(self.session, self.rules, now, self._state)
        hooks: list[Sweep] = list(self.sweeps)
        if self.gc_settings is not None:
            hooks.insert(0, self._collect)
        for sweep in hooks:
            try:
                swept = sweep(self.session, now)
            except Exception:  # one failing sweep must not stop the cycle's bookkeeping
                log.exception("session %s: sweep %r failed", self.session.name, sweep)
                swept = True
            if swept is not None:  # it may have removed concepts: measure support afresh
                self._state.forget()
        listed, dropped = self._measure_contradictions(now)  # after the sweeps removed any
        with self._lock:
            self.cycles += 1
            self.promotions += report.promotions
            self.demotions += report.demotions
            self.failed_cycles += report.failed is not None
            self.last_report = report
            self._contradictions = listed
            self.contradictions_dropped = dropped
        self.listing = self.listed
        return report

    def list_contradictions(self) -> int:
        """The start pass: the contradiction list alone, no canonization step and no sweep.

        From the first listing on (this or a cycle), recall warns only on what the
        list holds. Returns how many it lists.
        """
        listed, dropped = self._measure_contradictions(self.clock.now())
        with self._lock:
            self._contradictions = listed
            self.contradictions_dropped = dropped
        self.listing = self.listed
        return len(listed)

    def _collect(self, session: Session, now: float) -> gc.SweepReport | None:
        assert self.gc_settings is not None
        report = gc.maybe_sweep(session, now, self.gc_settings)
        if report is not None:
            with self._lock:
                self.last_sweep = report
        return report

    def _measure_contradictions(self, now: float) -> tuple[dict[str, ContradictionInfo], int]:
        """Every concept a contradiction fires on now, within the budget; and how many were cut."""
        index = self.session.index
        with index.lock:
            graph = index.graph
            targets = contradicted_targets(graph)
        found: list[tuple[int, float, str, ContradictionInfo]] = []
        min_age = self.rules.edge_min_age_s
        for start in range(0, len(targets), CONTRADICTION_CHUNK):
            with index.lock:
                graph = index.graph
                for node_id in targets[start : start + CONTRADICTION_CHUNK]:
                    concept = graph.concept(node_id)
                    if concept is None:
                        continue
                    firing = contradictions(graph, node_id, now, min_age)
                    if firing:
                        info = firing[0]
                        found.append((-RANK[concept.status], -info.at, node_id, info))
        found.sort(key=lambda row: row[:3])
        budget = self.rules.contradiction_budget
        kept = {node_id: info for *_, node_id, info in found[:budget]}
        return kept, max(0, len(found) - budget)

    # -- what readers ask ----------------------------------------------------------------
    def listed(self, node_id: str) -> bool:
        """Whether the daemon's last listing (a cycle's, or the start pass's) holds a
        contradiction on ``node_id``.

        Recall warns on a hit only when it is listed (the warning appears from
        the daemon's next cycle after the write) and the contradiction still
        fires when re-checked at recall time (it lapses by itself).
        """
        with self._lock:
            return node_id in self._contradictions

    def contradiction(self, node_id: str) -> ContradictionInfo | None:
        """The contradiction the last listing holds on ``node_id`` (as of that listing)."""
        with self._lock:
            return self._contradictions.get(node_id)

    def contradiction_count(self) -> int:
        with self._lock:
            return len(self._contradictions)

    def counters(self) -> dict[str, Any]:
        """The figures lambo_stats reports beside ``promotion_policy``."""
        with self._lock:
            last = self.last_report
            return {
                "canonization_cycles": self.cycles,
                "canonization_promotions": self.promotions,
                "canonization_demotions": self.demotions,
                "canonization_last_cycle_ms": (
                    round(last.elapsed_ms, 3) if last is not None else None
                ),
                "contradictions_listed": len(self._contradictions),
                "contradictions_dropped": self.contradictions_dropped,
            }


_DAEMONS: PerOwner[Session, Daemon] = PerOwner()


def daemon_for(session: Session) -> Daemon | None:
    """The daemon running for ``session`` in this process, if any (the latest one made)."""
    return _DAEMONS.peek(session)
