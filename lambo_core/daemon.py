"""One daemon per session: canonization cycles, the contradiction list, and sweeps.

Spec: "Contradiction warnings" (the warning is found by the daemon, from its next cycle
after the write; the contradiction budget), lambo_stats (``canonization_cycles``). It runs
on the session's writer thread; the order of one pass and the start pass are in
docs/design.md, "The daemon". The service that owns it hands its contradiction list and
its demotion history (``history``) to recall and inspect.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .canon.cycle import CycleReport, CycleState, run_cycle
from .canon.history import CanonHistory
from .canon.rules import RANK, CanonRules
from .clock import Clock
from .config import Config
from .contradiction import ContradictionInfo, contradicted_targets, contradictions
from .gc.report import SweepReport
from .gc.settings import GcSettings
from .gc.sweep import maybe_sweep

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
        gc_settings: GcSettings | None = None,
    ) -> None:
        """``config``: a Config (its ``[canonization]`` and ``[gc]``), or the rules alone
        (garbage collection then runs only with ``gc_settings``)."""
        self.session = session
        self.config = config if isinstance(config, Config) else None
        if isinstance(config, CanonRules):
            rules = config
        elif config is not None:
            rules = CanonRules.from_config(config)
        else:
            rules = CanonRules()
        # The demotion history its cycles record and recall and inspect read, under its rules.
        self.history = CanonHistory(session, rules)
        if gc_settings is None and self.config is not None:
            gc_settings = GcSettings.from_config(self.config)
        self.gc_settings = gc_settings  # None: this daemon does not collect
        self.last_sweep: SweepReport | None = None
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
        # What recall warns on (the service hands it over): the list, from the first
        # listing on; until then None, and recall checks every hit.
        self.listing: Callable[[str], bool] | None = None

    @property
    def rules(self) -> CanonRules:
        """The ``[canonization]`` rules: its history's, the one place they are kept."""
        return self.history.rules

    @rules.setter
    def rules(self, rules: CanonRules) -> None:
        self.history.rules = rules

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
        report = run_cycle(self.history, now, self._state)
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

    def _collect(self, session: Session, now: float) -> SweepReport | None:
        assert self.gc_settings is not None
        report = maybe_sweep(session, now, self.gc_settings)
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
