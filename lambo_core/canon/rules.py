"""The ``[canonization]`` settings, and the stages a concept walks through.

Spec: lambo_stats (``promotion_policy``) and the canonization knobs of lambo.toml.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..model import Status

if TYPE_CHECKING:
    from ..config import Config

Policy = Literal["swarm", "solo"]
Reason = Literal["superseded", "budget"]

STAGES = (Status.NONE, Status.CANDIDATE, Status.VENERABLE, Status.CANONICAL)
RANK = {status: i for i, status in enumerate(STAGES)}
LAST_STAGE_REASON = "Canonical is the last stage; there is no next promotion"
QUOTE_CHARS = 80


def next_status(status: Status) -> Status | None:
    i = RANK[status]
    return STAGES[i + 1] if i + 1 < len(STAGES) else None


@dataclass(frozen=True)
class CanonRules:
    """The ``[canonization]`` settings a cycle and inspect's admission measure with."""

    policy: Policy = "swarm"
    cycle_interval_s: float = 60.0
    edge_min_age_s: float = 60.0
    supersede: bool = False
    canonical_budget: int = 1000
    candidate_min_interactions: int = 1
    venerable_min_interactions: int = 3
    min_agents: int = 2
    canonical_min_blast_radius: int = 5
    demotion_cooldown_s: float = 300.0
    batch: int = 50
    solo_min_concepts: int = 20
    solo_min_gc_survived: int = 3
    solo_percentile: float = 90.0
    supersede_min_interactions: int = 3
    contradiction_budget: int = 10_000

    @classmethod
    def from_config(cls, config: Config) -> CanonRules:
        def get(name: str) -> Any:
            return config.get(f"canonization.{name}")

        policy: Policy = "solo" if str(get("promotion_policy")) == "solo" else "swarm"
        return cls(
            policy=policy,
            cycle_interval_s=float(get("cycle_interval_s")),
            edge_min_age_s=float(get("edge_min_age_s")),
            supersede=bool(get("supersede")),
            canonical_budget=int(get("canonical_budget")),
            candidate_min_interactions=int(get("candidate_min_interactions")),
            venerable_min_interactions=int(get("venerable_min_interactions")),
            min_agents=int(get("min_agents")),
            canonical_min_blast_radius=int(get("canonical_min_blast_radius")),
            demotion_cooldown_s=float(get("demotion_cooldown_s")),
            batch=int(get("batch")),
            solo_min_concepts=int(get("solo_min_concepts")),
            solo_min_gc_survived=int(get("solo_min_gc_survived")),
            solo_percentile=float(get("solo_percentile")),
            supersede_min_interactions=int(get("supersede_min_interactions")),
            contradiction_budget=int(get("contradiction_budget")),
        )

    @property
    def shown_policy(self) -> str:
        return self.policy.capitalize()
