"""What one sweep says (lambo_stats's ``gc.last_sweep``), and what a session keeps in RAM.

Spec: lambo_stats (``gc``). A ``GcState`` is made with its ``Session`` (``session.gc_state``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Literal

Trigger = Literal["mutations", "elapsed"]
TRIGGERS: tuple[Trigger, ...] = ("mutations", "elapsed")


@dataclass(frozen=True)
class SweepReport:
    """One sweep's accounting. ``to_json`` is lambo_stats's ``gc.last_sweep``."""

    trigger: Trigger
    at: float
    epoch: int  # the mutation count the sweep ran at (the next sweep counts from it)
    collected: int
    deferred: int
    collection_cap: int
    cap_bound: bool
    resources_spared_by_dependents: int
    survivors_deferred: int
    # beyond the spec's keys: for logs, tests and the daemon
    collected_ids: tuple[str, ...] = ()
    kept: dict[str, int] = field(default_factory=dict)  # reason -> due concepts kept for it
    survivors_bumped: int = 0
    weak_edges: int = 0  # weak edges dropped (not those that went with a collected concept)
    duration_ms: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "trigger": self.trigger,
            "collected": self.collected,
            "deferred": self.deferred,
            "collection_cap": self.collection_cap,
            "cap_bound": self.cap_bound,
            "resources_spared_by_dependents": self.resources_spared_by_dependents,
            "survivors_deferred": self.survivors_deferred,
        }


class GcState:
    """What a server keeps about one session's collection in RAM: the last sweep, owed bumps."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last: SweepReport | None = None
        self.owed: dict[str, int] = {}  # gc_survived increments not yet written
