"""Garbage collection's knobs (``[gc]`` of lambo.toml) and the constants of its rules.

Spec: lambo_stats (``gc``); the numbers start from the 0.2.2 release.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..contradiction import DEFAULT_EDGE_MIN_AGE_S
from ..model import ESTABLISHED, ConceptType, EdgeType

if TYPE_CHECKING:
    from ..config import Config

RESISTANCE: dict[ConceptType, float] = {
    ConceptType.CONSTRAINT: 1.5,
    ConceptType.ENTITY: 1.2,
    ConceptType.LOGIC: 1.1,
    ConceptType.RESOURCE: 1.0,
    ConceptType.OBSERVATION: 0.7,
}
PROTECTED_STATUSES = ESTABLISHED  # never collected

# 0.2.2's weak-edge rule: a sweep drops these (CoOccurrence/Semantic, under 0.5, an hour old).
WEAK_EDGE_TYPES = (EdgeType.COOCCURRENCE, EdgeType.SEMANTIC)
WEAK_EDGE_WEIGHT = 0.5
WEAK_EDGE_AGE_S = 3600.0

# Why a due concept was kept (``GcPlan.kept`` values, ``SweepReport.kept`` keys).
KEPT_STATUS = "status"
KEPT_CONTRADICTS_HELD = "contradicts_held"
KEPT_CORRECTION = "correction"
KEPT_DEPENDENTS = "dependents"


@dataclass(frozen=True)
class GcSettings:
    """Garbage collection's knobs (``[gc]`` in lambo.toml; defaults as in 0.2.2)."""

    mutations_per_sweep: int = 10_000
    elapsed_s: float = 3600.0
    per_sweep_cap: int = 2_000
    score_floor: float = 0.12
    min_age_s: float = 3600.0
    survivor_bumps_per_sweep: int = 100_000
    edge_min_age_s: float = DEFAULT_EDGE_MIN_AGE_S  # canonization_edge_min_age (the #197 rule)

    @classmethod
    def from_config(cls, config: Config) -> GcSettings:
        return cls(
            mutations_per_sweep=int(config.get("gc.mutations_per_sweep")),
            elapsed_s=float(config.get("gc.elapsed_s")),
            per_sweep_cap=int(config.get("gc.per_sweep_cap")),
            score_floor=float(config.get("gc.score_floor")),
            min_age_s=float(config.get("gc.min_age_s")),
            survivor_bumps_per_sweep=int(config.get("gc.survivor_bumps_per_sweep")),
            edge_min_age_s=float(config.get("canonization.edge_min_age_s")),
        )

    def bar(self, concept_type: ConceptType) -> float:
        """The base score under which a concept of this type is due."""
        return self.score_floor / RESISTANCE[concept_type]
